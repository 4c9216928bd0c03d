"""Cluster membership of a broker: its registration sessions with the NameServers
(``registration``) and the cluster-wide routes it reads from them (``routes``)."""
