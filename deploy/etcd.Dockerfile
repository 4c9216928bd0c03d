# etcd from Debian's packages, for machines with no image registry (`make images`; the HA
# compose file picks it with WHARF_ETCD_IMAGE=wharf/etcd:debian). Debian bookworm ships 3.4
# (the default image is 3.5): the brokers use only the v3 API both serve. The compose file's
# paths (/usr/local/bin/etcd, etcdctl) are the official image's, linked here. Built with no
# context:  docker build --network host -t wharf/etcd:debian - < deploy/etcd.Dockerfile
ARG BASE_IMAGE=wharf/python:3.11-bookworm
FROM ${BASE_IMAGE}
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server etcd-client >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/sbin/policy-rc.d \
 && ln -s /usr/bin/etcd /usr/local/bin/etcd && ln -s /usr/bin/etcdctl /usr/local/bin/etcdctl
# etcd 3.4 is not pre-vote by default (3.5 is): a member back from a partition unseats the leader.
ENV ETCDCTL_API=3 ETCD_PRE_VOTE=true
EXPOSE 2379 2380
ENTRYPOINT []
CMD ["/usr/local/bin/etcd"]
