"""Kafka transactions: the coordinator's state per transactional id and its log layout."""
