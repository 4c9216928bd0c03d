# Prometheus from Debian's package, for machines with no image registry (`make images`; the
# compose files pick it with WHARF_PROMETHEUS_IMAGE=wharf/prometheus:debian). Debian bookworm
# ships 2.42 (the default image is 2.53): everything deploy/prometheus.yml uses (bearer
# credentials_file, rule files) works on it. Built with no context:
#   docker build --network host -t wharf/prometheus:debian - < deploy/prometheus.Dockerfile
ARG BASE_IMAGE=wharf/python:3.11-bookworm
FROM ${BASE_IMAGE}
# policy-rc.d: the package's maintainer scripts must not try to start a service in the build.
# wget: the compose file's health check (the official image's busybox has one).
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus wget >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/sbin/policy-rc.d \
 && mkdir -p /prometheus && chown nobody:nogroup /prometheus
# As the official image: runs as nobody (/bin/prometheus is /usr/bin's on merged-usr Debian), data in /prometheus, the config path given by compose.
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
