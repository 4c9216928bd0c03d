# Wharf developer commands. `make run` and `make test` create .venv/ on first use.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST := $(PY) -m pytest

.PHONY: setup image images rmq-client rmq4-client stream-tools java-clients peers deploy-secrets run test test-fast test-spark test-slow system-deps lint fmt typecheck proto bench-store bench-compare bench-peers console-screenshots bench-console clean

# The C sources too: a changed accelerator is rebuilt by the editable install.
$(STAMP): pyproject.toml $(wildcard store/fast/*.c store/fast/*.h)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark,bench,console]'
	# Byte-code beside the sources: the editable install compiles nothing, and under
	# PYTHONDONTWRITEBYTECODE (set on the CI machines) every broker and CLI process the tests
	# start compiled ~360 modules again: 2.4 s of CPU an import of the broker, 0.9 s with these.
	$(PY) -m compileall -q -j 0 broker store client tests
	touch $(STAMP)

setup: $(STAMP)

# The official RocketMQ 5 Python client, in its own venv: its generated apache.rocketmq.v2 protos
# clash with wharf.rocketmq.v2 in one process, so tests/broker/v2 runs it in a subprocess.
RMQ_VENV  := .venv-rmq
RMQ_STAMP := $(RMQ_VENV)/.installed-stamp
RMQ_CLIENT := rocketmq-python-client==5.1.2
$(RMQ_STAMP): Makefile
	test -x $(RMQ_VENV)/bin/python || python3 -m venv $(RMQ_VENV)
	$(RMQ_VENV)/bin/python -m pip install -q '$(RMQ_CLIENT)'
	touch $(RMQ_STAMP)

# The RocketMQ 4.x C++ client (PyPI rocketmq: ctypes over Apache's bundled librocketmq) for
# tests/broker/remoting/test_cpp_client.py, which drives it in a subprocess against the
# broker's remoting port (--remoting-listen).
RMQ4_VENV   := .venv-rmq4
RMQ4_STAMP  := $(RMQ4_VENV)/.installed-stamp
RMQ4_CLIENT := rocketmq==0.4.4
$(RMQ4_STAMP): Makefile
	test -x $(RMQ4_VENV)/bin/python || python3 -m venv $(RMQ4_VENV)
	$(RMQ4_VENV)/bin/python -m pip install -q '$(RMQ4_CLIENT)'
	touch $(RMQ4_STAMP)

rmq4-client: $(RMQ4_STAMP)

# The Python stream processors of tests/broker/kafka/test_stream_processors.py (quixstreams,
# faust-streaming: pyproject.toml's `streams` extra, exact pins) in a venv of their own, their
# applications run as subprocesses: quixstreams 3.28.1 needs confluent-kafka < 2.13, the tests'
# own is 2.16.1. Only the extra's packages are installed (read from pyproject.toml), not Wharf.
STREAMS_VENV  := .venv-streams
STREAMS_STAMP := $(STREAMS_VENV)/.installed-stamp
$(STREAMS_STAMP): pyproject.toml
	test -x $(STREAMS_VENV)/bin/python || python3 -m venv $(STREAMS_VENV)
	$(STREAMS_VENV)/bin/python -m pip install -q $$($(STREAMS_VENV)/bin/python -c \
	  'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["streams"]))')
	touch $(STREAMS_STAMP)

stream-tools: $(STREAMS_STAMP)

# The official RocketMQ 5 Node.js client (npm rocketmq-client-nodejs, exact version pinned with
# its lock file) for tests/broker/v2/test_node_client.py; node and npm come from the machine.
NODE_DIR   := tests/broker/v2/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed-stamp
$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  echo "node and npm are needed for the Node.js client tests: install Node.js >= 18 (e.g. apt-get install nodejs npm)"; exit 1; }
	npm ci --prefix $(NODE_DIR) --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

rmq-client: $(RMQ_STAMP) $(NODE_STAMP)

# The RocketMQ 4.x Node.js client (npm ali-ons, exact version pinned with its lock file) for
# tests/broker/remoting/test_node_client.py, against the broker's remoting port.
REMOTING_NODE_DIR   := tests/broker/remoting/node
REMOTING_NODE_STAMP := $(REMOTING_NODE_DIR)/node_modules/.installed-stamp
$(REMOTING_NODE_STAMP): $(REMOTING_NODE_DIR)/package.json $(REMOTING_NODE_DIR)/package-lock.json
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  echo "node and npm are needed for the Node.js client tests: install Node.js >= 18 (e.g. apt-get install nodejs npm)"; exit 1; }
	npm ci --prefix $(REMOTING_NODE_DIR) --no-audit --no-fund --loglevel=error
	touch $(REMOTING_NODE_STAMP)

# The Kafka Node.js client (npm kafkajs, exact version pinned with its lock file) for
# tests/broker/kafka/test_clients_kafkajs.py, against the broker's Kafka port (--kafka-listen).
KAFKA_NODE_DIR   := tests/broker/kafka/node
KAFKA_NODE_STAMP := $(KAFKA_NODE_DIR)/node_modules/.installed-stamp
$(KAFKA_NODE_STAMP): $(KAFKA_NODE_DIR)/package.json $(KAFKA_NODE_DIR)/package-lock.json
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  echo "node and npm are needed for the Node.js client tests: install Node.js >= 18 (e.g. apt-get install nodejs npm)"; exit 1; }
	npm ci --prefix $(KAFKA_NODE_DIR) --no-audit --no-fund --loglevel=error
	touch $(KAFKA_NODE_STAMP)

# Apache's Java clients and admin tools (tests/java/pom.xml, exact versions: rocketmq-client and
# rocketmq-tools 4.9.8, rocketmq-client-java 5.x, kafka-clients 4.x) and the project's own Java
# test programs (tests/java/src) for the test_java_client.py of tests/broker/remoting, v2 and
# kafka: `mvn package` compiles them and writes
# target/classpath.txt, the jars in the user's Maven repository (~/.m2, kept between runs).
# Offline first (nothing to fetch once ~/.m2 has them, ~2 s less per run), then from Maven Central.
JAVA_DIR   := tests/java
JAVA_STAMP := $(JAVA_DIR)/target/.installed-stamp
# Then Spark's own Kafka connector for tests/spark/test_spark_kafka_connector.py (a pom of its
# own, tests/java/spark-kafka: Spark's kafka-clients, not the clients' above), its four jars
# copied to tests/java/target/spark-kafka/jars for `spark.jars`; and Kafka Connect and Kafka
# Streams for tests/broker/kafka/test_kafka_connect_streams.py (tests/java/kafka-tools: a
# class path each, under tests/java/target/kafka-tools).
$(JAVA_STAMP): $(JAVA_DIR)/pom.xml $(JAVA_DIR)/spark-kafka/pom.xml $(shell find $(JAVA_DIR)/src -type f 2>/dev/null) \
	       $(shell find $(JAVA_DIR)/kafka-tools -name pom.xml -o -path '*/src/*' -type f 2>/dev/null)
	@command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 || { \
	  echo "java and mvn are needed for the Java client tests: install a JDK >= 17 and Maven >= 3.8 (e.g. apt-get install openjdk-17-jdk-headless maven)"; exit 1; }
	cd $(JAVA_DIR) && { mvn -q -B -o package >/dev/null 2>&1 || mvn -q -B package; }
	cd $(JAVA_DIR)/spark-kafka && { mvn -q -B -o package >/dev/null 2>&1 || mvn -q -B package; }
	cd $(JAVA_DIR)/kafka-tools && { mvn -q -B -o package >/dev/null 2>&1 || mvn -q -B package; }
	touch $(JAVA_STAMP)

java-clients: $(JAVA_STAMP)

# Apache Kafka 4.4.0 (broker and kafka-tools) and Apache RocketMQ 5.3.3 (NameServer, broker,
# proxy), fetched from Maven Central by coordinates for `make bench-peers` and its CI smoke test
# (tests/java/peers/pom.xml: one class path per module in tests/java/target/peers/, the jars in
# ~/.m2), and the project's PeerBench that drives Apache's RocketMQ clients. Offline first.
PEERS_DIR   := tests/java/peers
PEERS_STAMP := tests/java/target/peers/.installed-stamp
$(PEERS_STAMP): $(PEERS_DIR)/pom.xml $(wildcard $(PEERS_DIR)/*/pom.xml) $(shell find $(PEERS_DIR)/clients/src -type f 2>/dev/null)
	@command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 || { \
	  echo "java and mvn are needed for the peers: install a JDK >= 17 and Maven >= 3.8 (e.g. apt-get install openjdk-17-jdk-headless maven)"; exit 1; }
	cd $(PEERS_DIR) && { mvn -q -B -o package >/dev/null 2>&1 || mvn -q -B package; }
	touch $(PEERS_STAMP)

peers: $(PEERS_STAMP)

# Run the broker on embedded defaults: data under ./data, gRPC 127.0.0.1:8081, metrics 127.0.0.1:9100.
run: $(STAMP)
	$(PY) -m wharf.broker $(ARGS)

# Debian packages the tests drive as real peers: prometheus/promtool and redis-server (ops and
# benchmark tests), etcd (controller-mode failover: elections on etcd leases), and the headless
# browser of the console's end-to-end tests (chromium + chromedriver), and FUSE 3 for the
# power-cut filesystem of tests/fault (fuse3: fusermount3, and the libfuse3 mfusepy loads), and
# kcat, the Kafka client on Debian's librdkafka, for tests/broker/kafka/test_clients_kcat.py.
# clang (with compiler-rt) builds the C accelerators with sanitizers for tests/fuzz.
system-deps:
	@if ! command -v promtool >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1 \
	    || ! command -v etcd >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus redis-server etcd-server >/dev/null; \
	  else \
	    echo "install Debian packages: sudo apt-get install prometheus redis-server etcd-server"; exit 1; \
	  fi; \
	fi
	@if ! command -v fusermount3 >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fuse3 >/dev/null; \
	  else \
	    echo "install Debian packages: sudo apt-get install fuse3"; exit 1; \
	  fi; \
	fi
	@if ! command -v kcat >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kcat >/dev/null; \
	  else \
	    echo "install Debian packages: sudo apt-get install kcat"; exit 1; \
	  fi; \
	fi
	@if ! command -v clang >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev >/dev/null; \
	  else \
	    echo "install Debian packages: sudo apt-get install clang libclang-rt-14-dev"; exit 1; \
	  fi; \
	fi
	@if ! command -v ip >/dev/null 2>&1 || ! command -v nft >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 nftables >/dev/null; \
	  else \
	    echo "install Debian packages: sudo apt-get install iproute2 nftables"; exit 1; \
	  fi; \
	fi
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; \
	  else \
	    echo "install Debian packages: sudo apt-get install chromium chromium-driver"; exit 1; \
	  fi; \
	fi

# The whole suite, as CI runs it: fast tests, slow end-to-end tests, ops tests and the Spark tests.
# Two workers: most tests wait on daemons, and CI has 2 cores (29 -> ~20 min); TEST_WORKERS=0
# runs in one process.
TEST_WORKERS ?= 2
# The compose stack under a real engine (tests/ops/test_compose_single.py) runs last and alone:
# its image builds take both cores for ~2 minutes.
test: $(STAMP) $(RMQ_STAMP) $(RMQ4_STAMP) $(NODE_STAMP) $(REMOTING_NODE_STAMP) $(KAFKA_NODE_STAMP) $(JAVA_STAMP) $(STREAMS_STAMP) $(PEERS_STAMP) system-deps
	$(PYTEST) -q -m "not spark and not docker" -n $(TEST_WORKERS) --dist loadfile
	$(PYTEST) -q -m spark -p no:randomly
	$(PYTEST) -q -m docker -p no:randomly -rA

# Unit and integration tests without the slow, ops and Spark ones (seconds, not minutes).
test-fast: $(STAMP)
	$(PYTEST) -q -m "not spark and not slow and not ops and not browser and not docker"

test-spark: $(STAMP)
	$(PYTEST) -q -m spark

test-slow: $(STAMP) $(RMQ_STAMP) $(RMQ4_STAMP) $(NODE_STAMP) $(REMOTING_NODE_STAMP) $(KAFKA_NODE_STAMP) $(JAVA_STAMP) $(STREAMS_STAMP) $(PEERS_STAMP)
	$(PYTEST) -q -m "slow and not docker"

# The `wharf` package spans four folders (package-dir in pyproject.toml); mypy and import-linter
# find modules by walking folders, so they read it through a tree of symlinks.
TREE := build/tree
$(TREE)/wharf: Makefile
	mkdir -p $(TREE)/wharf
	ln -sfn ../../../proto/wharf/__init__.py $(TREE)/wharf/__init__.py
	ln -sfn ../../../proto/wharf/wire.py $(TREE)/wharf/wire.py
	ln -sfn ../../../proto/wharf/hops.py $(TREE)/wharf/hops.py
	ln -sfn ../../../proto/wharf/keepalive.py $(TREE)/wharf/keepalive.py
	ln -sfn ../../../proto/wharf/v1 $(TREE)/wharf/v1
	ln -sfn ../../../proto/wharf/rocketmq $(TREE)/wharf/rocketmq
	for d in store broker client; do ln -sfn ../../../$$d $(TREE)/wharf/$$d; done
	touch $(TREE)/wharf

lint: $(STAMP) $(TREE)/wharf
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	PYTHONPATH=$(TREE) $(VENV)/bin/lint-imports

fmt: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

typecheck: $(STAMP) $(TREE)/wharf
	MYPYPATH=$(TREE) $(PY) -m mypy -p wharf

# Regenerate the gRPC stubs after editing proto/wharf/v1/*.proto (generated code is committed).
# The vendored apache.rocketmq.v2 protos (proto/apache/, unchanged from rocketmq-apis v2.1.2) are
# generated into a temp dir and moved to wharf.rocketmq.v2 with their imports rewritten; the
# descriptors keep their apache/rocketmq/v2/*.proto names (wire-identical to the official clients).
RMQ_GEN := build/rmq-gen
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto --grpc_python_out=proto proto/wharf/v1/*.proto
	rm -rf $(RMQ_GEN) && mkdir -p $(RMQ_GEN) proto/wharf/rocketmq/v2
	$(PY) -m grpc_tools.protoc -Iproto --python_out=$(RMQ_GEN) --pyi_out=$(RMQ_GEN) --grpc_python_out=$(RMQ_GEN) proto/apache/rocketmq/v2/definition.proto proto/apache/rocketmq/v2/service.proto
	for f in $(RMQ_GEN)/apache/rocketmq/v2/*_pb2*.py*; do \
	  sed -e 's/^from apache\.rocketmq\.v2 import/from wharf.rocketmq.v2 import/' \
	      -e 's/^import apache\.rocketmq\.v2\./import wharf.rocketmq.v2./' \
	      -e 's/\bapache\.rocketmq\.v2\.\([a-z_]*_pb2\)\b/wharf.rocketmq.v2.\1/g' \
	      "$$f" > proto/wharf/rocketmq/v2/$$(basename "$$f"); \
	done
	touch proto/wharf/rocketmq/__init__.py proto/wharf/rocketmq/v2/__init__.py

# docker-compose secrets in deploy/secrets/ (git-ignored; files that exist are kept): a
# development certificate for the names clients dial (localhost, the compose services `broker`,
# `broker-a`, `broker-b`) and random metrics and console tokens. Compose bind-mounts file
# secrets with their host owner and mode,
# and the containers run as uid 10001 (broker) and nobody (Prometheus): SECRETS_MODE=644 lets
# them read the files on a development machine (deploy/README.md: chown instead on a shared one).
SECRETS_DIR  := deploy/secrets
SECRETS_MODE := 644
deploy-secrets: $(STAMP)
	mkdir -p $(SECRETS_DIR)
	test -e $(SECRETS_DIR)/broker.crt || $(PY) -m wharf.broker.kit.tls.certs --cert $(SECRETS_DIR)/broker.crt \
	  --key $(SECRETS_DIR)/broker.key --host localhost --host broker \
	  --host broker-a --host broker-b --host broker-a-1 --host broker-a-2 \
	  --host namesrv --host namesrv-1 --host namesrv-2 --key-mode $(SECRETS_MODE)
	test -e $(SECRETS_DIR)/metrics_token || { umask 077; \
	  $(PY) -c 'import secrets; print(secrets.token_urlsafe(32))' > $(SECRETS_DIR)/metrics_token; \
	  chmod $(SECRETS_MODE) $(SECRETS_DIR)/metrics_token; }
	test -e $(SECRETS_DIR)/console_token || { umask 077; \
	  $(PY) -c 'import secrets; print(secrets.token_urlsafe(32))' > $(SECRETS_DIR)/console_token; \
	  chmod $(SECRETS_MODE) $(SECRETS_DIR)/console_token; }
	test -e $(SECRETS_DIR)/plain_acl.yml || { umask 077; \
	  $(PY) -m wharf.client.cli.main --json acl user create admin --admin \
	    --file $(SECRETS_DIR)/plain_acl.yml | $(PY) -c 'import json, sys; d = json.load(sys.stdin); \
	    print("WHARF_ACCESS_KEY=" + d["access_key"]); print("WHARF_SECRET_KEY=" + d["secret_key"])' \
	    > $(SECRETS_DIR)/admin.env; \
	  chmod $(SECRETS_MODE) $(SECRETS_DIR)/plain_acl.yml; }
	test -e $(SECRETS_DIR)/broker.env || { umask 077; \
	  $(PY) -m wharf.client.cli.main --json acl user create broker --admin \
	    --file $(SECRETS_DIR)/plain_acl.yml | $(PY) -c 'import json, sys; d = json.load(sys.stdin); \
	    [print("WHARF_" + use + "_ACCESS_KEY=" + d["access_key"] + "\nWHARF_" + use \
	           + "_SECRET_KEY=" + d["secret_key"]) for use in ("HA", "NAMESRV")]' \
	    > $(SECRETS_DIR)/broker.env.tmp && mv $(SECRETS_DIR)/broker.env.tmp $(SECRETS_DIR)/broker.env; \
	  chmod $(SECRETS_MODE) $(SECRETS_DIR)/plain_acl.yml; }

# Docker images (deploy/README.md), built with no image registry by default: the bases are made
# from Debian packages (deploy/debian-base.sh, root, ~150 s once) when missing, the wheels are
# downloaded on the host (deploy/wheelhouse.py) and installed in the build with --no-index, and
# builds use the host's network (never a bridge). With a registry instead:
#   make image PYTHON_IMAGE=python:3.12-slim
# `images` adds Prometheus and etcd from Debian's packages (wharf/prometheus:debian,
# wharf/etcd:debian: WHARF_PROMETHEUS_IMAGE / WHARF_ETCD_IMAGE in the compose files).
DOCKER       ?= docker
IMAGE        := wharf/broker:0.1.0
PYTHON_IMAGE ?= wharf/python:3.11-bookworm
BUILD_IMAGE  ?= $(if $(filter wharf/python:%,$(PYTHON_IMAGE)),wharf/python-build:3.11-bookworm,$(PYTHON_IMAGE))
image: $(STAMP)
	@$(DOCKER) image inspect $(PYTHON_IMAGE) $(BUILD_IMAGE) >/dev/null 2>&1 || \
	  case "$(PYTHON_IMAGE)" in wharf/python:*) deploy/debian-base.sh ;; *) $(DOCKER) pull $(PYTHON_IMAGE) ;; esac
	py=$$($(DOCKER) run --rm --network host --entrypoint python3 $(PYTHON_IMAGE) -c \
	  'import sys; print("%d.%d" % sys.version_info[:2])') && \
	  $(PY) deploy/wheelhouse.py --python $$py --out build/wheelhouse/cp$$(echo $$py | tr -d .)
	$(DOCKER) build --network host -f deploy/Dockerfile --build-arg PYTHON_IMAGE=$(PYTHON_IMAGE) \
	  --build-arg BUILD_IMAGE=$(BUILD_IMAGE) -t $(IMAGE) .

images: image
	$(DOCKER) build --network host --build-arg BASE_IMAGE=$(PYTHON_IMAGE) -t wharf/prometheus:debian - < deploy/prometheus.Dockerfile
	$(DOCKER) build --network host --build-arg BASE_IMAGE=$(PYTHON_IMAGE) -t wharf/etcd:debian - < deploy/etcd.Dockerfile

# Benchmark programs (tests/bench/README.md); options through ARGS, e.g. ARGS=--quick.
bench-store: $(STAMP)
	$(PY) -m tests.bench.store_append $(ARGS)

bench-compare: $(STAMP) system-deps
	$(PY) -m tests.bench.compare $(ARGS)

# Wharf beside Apache Kafka and Apache RocketMQ (their own JVMs and tools; tests/bench/peers.py),
# in a network namespace of its own (unshare, ip: iproute2 from system-deps).
bench-peers: $(STAMP) $(PEERS_STAMP) system-deps
	$(PY) -m tests.bench.peers $(ARGS)

# One PNG per console page (headless chromium against a broker filled with sample data), into
# client/console/screenshots/ (linked from client/console/README.md).
console-screenshots: $(STAMP) system-deps
	$(PY) -m tests.console.screenshots --out client/console/screenshots $(ARGS)

# Console page render times with 1,000 topics and many messages (tests/bench/README.md).
bench-console: $(STAMP)
	$(PY) -m tests.bench.console $(ARGS)

# The C accelerators that parse client bytes or files under libFuzzer (atheris) with ASan and
# UBSan (tests/fuzz/README.md): the instrumented modules go to build/fuzz/ext, never over the
# source tree's .so files. `make fuzz` is the long run: FUZZ_SECONDS a target, two at a time
# (5 targets: 3 rounds), from the corpus the last run left in build/fuzz/corpus.
.PHONY: fuzz-build fuzz
FUZZ_SECONDS ?= 1800
fuzz-build: $(STAMP)
	$(PY) -m tests.fuzz.build

fuzz: fuzz-build
	$(PY) -m tests.fuzz.run --seconds $(FUZZ_SECONDS) --jobs 2 $(ARGS)

clean:
	rm -rf build *.egg-info .pytest_cache .mypy_cache .ruff_cache
