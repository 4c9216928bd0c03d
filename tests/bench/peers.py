"""Wharf beside Apache Kafka and Apache RocketMQ on the same machine, each driven by the same
Apache client or benchmark tool (``make bench-peers``).

    .venv/bin/python -m tests.bench.peers [--paths kafka,rmq4,rmq5] [--rounds 6]
        [--messages 50000] [--size 1024] [--flush async|sync] [--rate 1000]
        [--latency-messages 5000] [--wharf-groups 1] [--wharf-fronts 0] [--wharf-only] [--smoke]
        [--output FILE] [--pool FILE...]

Peers (``make peers``: tests/java/peers/pom.xml fetches them from Maven Central by
coordinates; each JVM started here with ``java -cp`` on its main class, no Apache script):

- ``kafka``: Apache Kafka 4.4.0 (``kafka.Kafka``), one KRaft node (broker and controller), its
  log formatted first (``kafka.tools.StorageTool format``, not timed); against Wharf's Kafka port.
  Clients: kafka-tools' ``ProducerPerformance`` (N records, ``--throughput -1``, the producer's
  defaults: acks=all, linger 5 ms, batch 16 KiB), ``ConsumerPerformance`` (N records, a group,
  its defaults; the figure is its fetch.nMsg.sec, the group join excluded) and ``EndToEndLatency``
  (lock-step: one record in flight, acks=all; it prints whole milliseconds), then the project's
  ``PeerBench kafka-latency`` (KafkaProducer, linger 0, at ``--rate`` a second; a KafkaConsumer
  assigned the partition in the same JVM: send-to-poll percentiles in µs).
- ``rmq4``: Apache RocketMQ 5.3.3 NameServer (``NamesrvStartup``) and broker (``BrokerStartup``);
  against Wharf's remoting port (which is its own NameServer too). Client: Apache's 4.9.8
  remoting client through ``PeerBench rmq4-*``, which does what rocketmq-example's benchmark
  Producer and Consumer do (that module is not on Maven Central): 64 threads of synchronous
  sends (the Producer's ``-w`` default), a DefaultMQPushConsumer with its defaults, then sends
  at ``--rate`` with a push consumer in the same JVM.
- ``rmq5``: the NameServer and RocketMQ's proxy in local mode (``ProxyStartup -pm local``: the
  broker runs in the proxy's JVM); against Wharf's gRPC port. Client: the official 5.x Java
  client (rocketmq-client-java 5.0.8, gRPC) through ``PeerBench rmq5-*``: the same three phases.

Settings matched to Wharf's (``--flush``): the same data disk (a temporary directory, deleted
after each broker), 4 MiB message limit (Wharf's and RocketMQ's ``maxMessageSize``; Kafka's
``message.max.bytes``), 1 GiB commit log segments (Kafka's ``log.segment.bytes`` default),
8 queues / partitions a topic. ``async``: Wharf and RocketMQ ASYNC_FLUSH, Kafka's default (no
fsync per write); ``sync``: SYNC_FLUSH, Kafka ``log.flush.interval.messages=1``. JVM heaps for
this 2-core 24 GiB machine: Kafka -Xms1g -Xmx1g with kafka-run-class's G1 flags (its script's
default); RocketMQ broker and proxy -Xms2g -Xmx2g with runbroker.sh's G1 flags less
AlwaysPreTouch (the scripts' 8 g heap is a third of this machine, and pre-touching makes the
RSS the heap by construction), NameServer -Xms256m -Xmx256m; every client JVM -Xmx512m (the
perf scripts' KAFKA_HEAP_OPTS). Wharf: its defaults (one process, uvloop), logLevel WARNING.

``--wharf-groups N`` (N > 1): Wharf as a ``wharf-namesrv`` and N broker groups on this host,
each one process with its own store (``peers_groups.py``): one broker's protocol work is one
event loop, one core, where the JVMs use both. The same total queues a topic, split over the
groups; 4.x clients at the NameServer, Kafka's at every broker, 5.x at one broker (its routes
list every group). Start until every group serves; RSS and broker CPU summed over every
Wharf process (NameServer included; each in the notes). ``--wharf-fronts N``: the 5.x path
with ``v2Fronts = N`` (broker/fronts/), the client at the fronts' port, their CPU and RSS
counted with the broker's. ``--wharf-only``: no peer broker.

Each round, for each path, who goes first alternating, each broker started afresh (timed from
spawn until it serves: its metadata / cluster info lists a broker), topics created, then:
produce, the broker's RSS, consume, latency; then stopped by its pid and its files deleted. One
broker runs at a time. The program runs itself in a network namespace of its own
(``unshare --net``, loopback only): RocketMQ's HA listener binds every interface and no setting
moves it. The targets are judged on per-round ratios (``pooled.py``: the median's
distribution-free 95% interval; met / missed only when it lies on one side). ``--smoke``: Kafka
and the RocketMQ broker, a few hundred messages produced and consumed each way (the Kafka
producer without adaptive partitioning), one round, nothing judged
(tests/client/test_bench_peers.py runs it in CI, and with ``--wharf-groups 2 --wharf-only``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.broker_send import process_cpu_seconds
from tests.bench.peers_groups import (
    Groups,
    broker_names,
    create_topics,
    start_groups,
    stored_each,
)
from tests.bench.peers_probes import (
    QUEUES,
    create_kafka_topics,
    create_rmq_topic,
    kafka_serving,
    port_open,
    remoting_serving,
    wait_until,
)
from tests.bench.pooled import decide, median_interval, round_lines
from tests.harness import REPO_ROOT, bench_broker, free_port

PEERS = REPO_ROOT / "tests" / "java" / "target" / "peers"
MIB = 1024 * 1024
MAX_MESSAGE = 4 * MIB
# Commit log segment and index sizes: Wharf's and RocketMQ's defaults (Kafka's log.segment.bytes
# is 1 GiB too); the smoke run's are small, as the test brokers' (harness.TEST_STORE_SIZES).
STORE_SIZES = {"segment": 1024 * MIB, "maxHashSlotNum": 5_000_000, "maxIndexNum": 20_000_000}
SMOKE_SIZES = {"segment": 64 * MIB, "maxHashSlotNum": 50_000, "maxIndexNum": 200_000}
NETNS_MARK = "WHARF_PEERS_NETNS"

# The JVMs' options: heaps stated above; the GC flags of Apache's own start scripts.
KAFKA_JVM = [
    "-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]  # fmt: skip
RMQ_G1 = [
    "-server", "-XX:+UseG1GC", "-XX:G1HeapRegionSize=16m", "-XX:G1ReservePercent=25",
    "-XX:InitiatingHeapOccupancyPercent=30", "-XX:SoftRefLRUPolicyMSPerMB=0",
    "-XX:-OmitStackTraceInFastThrow", "-XX:MaxDirectMemorySize=15g",
]  # fmt: skip
RMQ_BROKER_JVM = ["-Xms2g", "-Xmx2g", *RMQ_G1]
RMQ_NAMESRV_JVM = ["-Xms256m", "-Xmx256m", *RMQ_G1]
CLIENT_JVM = ["-Xmx512m", "-XX:+UseG1GC"]
# The smoke run's client JVMs start faster (C1 only, serial GC: tests/javaclients.JVM's flags).
SMOKE_CLIENT_JVM = ["-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


def classpath(module: str) -> str:
    path = PEERS / module / "classpath.txt"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `make peers` (tests/java/peers/pom.xml)")
    jars = path.read_text().strip()
    if module == "clients":
        return f"{PEERS / 'clients' / 'classes'}{os.pathsep}{jars}"
    return jars


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- processes ------------------------------------------------------------------------------


class JavaProcess:
    """One JVM, output to ``log``; stopped by its pid (SIGTERM, SIGKILL after ``grace``)."""

    def __init__(self, args: list[str], log: Path, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HOME": str(home), "ROCKETMQ_HOME": str(home)}
        env.pop("NAMESRV_ADDR", None)
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                ["java", f"-Duser.home={home}", *args], cwd=home, env=env, stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace: float = 60.0) -> None:
        if self.proc.poll() is not None:
            return
        os.kill(self.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait()


@dataclass
class Broker:
    """What a path needs of a running broker, Wharf's or a peer's."""

    name: str  # "wharf" | "kafka" | "rocketmq"
    pid: int
    start_seconds: float
    kafka: str = ""  # bootstrap host:port
    namesrv: str = ""  # the NameServer 4.x clients are given
    remoting: str = ""  # the broker's remoting address (topic creation)
    grpc: str = ""  # the 5.x clients' endpoint
    side_pids: dict[str, int] = field(default_factory=dict)  # the NameServer's
    stop: Callable[[], object] = lambda: None
    groups: Groups | None = None  # Wharf as N broker groups (--wharf-groups N > 1)
    fronts: dict[str, int] = field(default_factory=dict)  # Wharf's v2Fronts processes

    def counted(self) -> dict[str, int]:
        """The processes whose CPU and RSS are the broker's: with groups, the NameServer and
        every broker (each group's share of the work is in its own process); with fronts,
        the broker and its fronts (as the peer's proxy and broker are both counted)."""
        return self.groups.pids if self.groups else {self.name: self.pid, **self.fronts}


def start_kafka(root: Path, flush: str, sizes: dict[str, int]) -> Broker:
    port, controller = free_port(), free_port()
    data = root / "data"
    props = {
        "process.roles": "broker,controller", "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data), "num.partitions": str(QUEUES),
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
        "message.max.bytes": str(MAX_MESSAGE), "log.segment.bytes": str(sizes["segment"]),
    }  # fmt: skip
    if flush == "SYNC_FLUSH":
        props["log.flush.interval.messages"] = "1"
    root.mkdir(parents=True, exist_ok=True)
    config = root / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    cp = classpath("kafka")
    cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    subprocess.run(
        ["java", *CLIENT_JVM, "-cp", cp, "kafka.tools.StorageTool", "format", "-t", cluster,
         "-c", str(config)], check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    started = time.monotonic()
    proc = JavaProcess([*KAFKA_JVM, "-cp", cp, "kafka.Kafka", str(config)], root / "kafka.log",
                       root)  # fmt: skip
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_until(lambda: kafka_serving(bootstrap), 120, "kafka", proc.alive)
    except Exception:
        proc.stop(5)
        raise
    return Broker("kafka", proc.pid, time.monotonic() - started, kafka=bootstrap, stop=proc.stop)


def start_rocketmq(root: Path, flush: str, proxy: bool, sizes: dict[str, int]) -> Broker:
    ns_port, port, ha_port = free_port(), free_port(), free_port()
    root.mkdir(parents=True, exist_ok=True)
    namesrv = f"127.0.0.1:{ns_port}"
    (root / "namesrv.conf").write_text(f"listenPort={ns_port}\nbindAddress=127.0.0.1\n")
    store = root / "store"
    broker_conf = {
        "brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0",
        "brokerIP1": "127.0.0.1", "bindAddress": "127.0.0.1", "listenPort": str(port),
        "haListenPort": str(ha_port), "namesrvAddr": namesrv,
        "storePathRootDir": str(store), "storePathCommitLog": str(store / "commitlog"),
        "flushDiskType": flush, "maxMessageSize": str(MAX_MESSAGE),
        "mappedFileSizeCommitLog": str(sizes["segment"]), "defaultTopicQueueNums": str(QUEUES),
        "maxHashSlotNum": str(sizes["maxHashSlotNum"]), "maxIndexNum": str(sizes["maxIndexNum"]),
        "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true",
    }  # fmt: skip
    (root / "broker.conf").write_text("".join(f"{k}={v}\n" for k, v in broker_conf.items()))
    cp = classpath("rocketmq")
    grpc = ""
    started = time.monotonic()
    ns = JavaProcess([*RMQ_NAMESRV_JVM, "-cp", cp, "org.apache.rocketmq.namesrv.NamesrvStartup",
                      "-c", str(root / "namesrv.conf")], root / "namesrv.log", root / "ns-home")  # fmt: skip
    if proxy:
        grpc_port, proxy_remoting = free_port(), free_port()
        grpc = f"127.0.0.1:{grpc_port}"
        (root / "rmq-proxy.json").write_text(json.dumps({
            "rocketMQClusterName": "DefaultCluster", "namesrvAddr": namesrv,
            "grpcServerPort": grpc_port, "remotingListenPort": proxy_remoting,
        }))  # fmt: skip
        main = ["org.apache.rocketmq.proxy.ProxyStartup", "-pm", "local",
                "-bc", str(root / "broker.conf"), "-pc", str(root / "rmq-proxy.json")]  # fmt: skip
    else:
        main = ["org.apache.rocketmq.broker.BrokerStartup", "-c", str(root / "broker.conf")]
    br = JavaProcess([*RMQ_BROKER_JVM, "-cp", cp, *main], root / "broker.log", root / "br-home")

    def stop() -> None:
        br.stop()
        ns.stop()

    def serving() -> bool:
        return remoting_serving(namesrv) and (not grpc or port_open(grpc))

    try:
        wait_until(serving, 180, "rocketmq", lambda: br.alive() and ns.alive())
    except Exception:
        stop()
        raise
    return Broker(
        "rocketmq", br.pid, time.monotonic() - started, namesrv=namesrv,
        remoting=f"127.0.0.1:{port}", grpc=grpc, side_pids={"namesrv": ns.pid}, stop=stop,
    )  # fmt: skip


def start_wharf(root: Path, flush: str, path: str, sizes: dict[str, int], groups: int = 1,
                extra: dict[str, Any] | None = None, fronts: int = 0) -> Broker:  # fmt: skip
    fronts = fronts if path == "rmq5" else 0  # only the 5.x clients dial the fronts
    if fronts:
        extra = {**(extra or {}), "wireListen": "127.0.0.1:0", "v2Fronts": fronts,
                 "v2FrontsListen": "127.0.0.1:0"}  # fmt: skip
    settings: dict[str, Any] = {**(extra or {}),
        "flushDiskType": flush, "maxMessageSize": MAX_MESSAGE,
        "mappedFileSizeCommitLog": sizes["segment"], "defaultTopicQueueNums": QUEUES,
        "maxHashSlotNum": sizes["maxHashSlotNum"], "maxIndexNum": sizes["maxIndexNum"],
        "remotingListen": "127.0.0.1:0", "kafkaListen": "127.0.0.1:0",
    }  # fmt: skip
    if groups > 1:
        return start_wharf_groups(root, settings, path, groups)
    broker = bench_broker(root, settings, ready_timeout=120.0)  # warnings only in its log
    started = time.monotonic()
    broker.start()
    kafka, remoting, grpc = broker.kafka_endpoint, broker.remoting_endpoint, broker.endpoint
    front_pids: dict[str, int] = {}
    if fronts:  # the broker's ready file comes after its fronts serve
        grpc = broker.fronts_endpoint
        front_pids = {f"front-{i}": pid for i, pid in enumerate(broker.children())}

    def serving() -> bool:
        if path == "kafka":
            return kafka_serving(kafka)
        return remoting_serving(remoting) and (path != "rmq5" or port_open(grpc))

    try:
        wait_until(serving, 60, "wharf", lambda: broker.running)
    except Exception:
        broker.stop(60)
        raise
    return Broker(
        "wharf", broker.pid, time.monotonic() - started, kafka=kafka, namesrv=remoting,
        remoting=remoting, grpc=grpc, stop=lambda: broker.stop(60), fronts=front_pids,
    )  # fmt: skip


def start_wharf_groups(root: Path, settings: dict[str, Any], path: str, n: int) -> Broker:
    """A ``wharf-namesrv`` and ``n`` broker groups with the single broker's ``settings``
    (``peers_groups.py``): 4.x clients get the NameServer, Kafka every broker, 5.x the first
    broker's gRPC port."""
    g = start_groups(root, n, settings, path)
    first = next(iter(g.brokers.values()))

    def stop() -> None:
        g.stop()
        for error in g.errors:
            print(f"# wharf groups: {error}", file=sys.stderr, flush=True)

    return Broker(
        "wharf", first.pid, g.start_seconds, kafka=g.kafka, namesrv=g.namesrv.remoting_endpoint,
        remoting=first.remoting_endpoint, grpc=first.endpoint, stop=stop, groups=g,
    )  # fmt: skip


# --- the clients ----------------------------------------------------------------------------


def run_java(module: str, main: str, args: list[str], home: Path, timeout: float = 600
             ) -> str:  # fmt: skip
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "ROCKETMQ_HOME": str(home)}
    env.pop("NAMESRV_ADDR", None)
    proc = subprocess.run(
        ["java", *CLIENT_JVM, f"-Duser.home={home}", "-cp", classpath(module), main, *args],
        cwd=home, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{main} {args} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-2000:]}")  # fmt: skip
    return proc.stdout


def peer_bench(args: list[str], home: Path) -> dict[str, Any]:
    out = run_java("clients", "dev.wharf.peers.PeerBench", args, home)
    for line in out.splitlines():
        if line.startswith('{"phase"'):
            result: dict[str, Any] = json.loads(line)
            return result
    raise RuntimeError(f"PeerBench {args}: no result line:\n{out[-2000:]}")


@dataclass
class Figures:
    """One broker's figures in one round of one path."""

    path: str
    broker: str
    round: int
    start_s: float = 0.0
    produce: float = 0.0  # msg/s
    produce_cpu_us: float = 0.0  # broker CPU per produced message
    rss_mb: float = 0.0  # the broker's RSS right after produce
    side_rss_mb: float = 0.0  # the NameServer's (RocketMQ), beside
    consume: float = 0.0  # msg/s
    p50_ms: float = 0.0  # paced end-to-end at --rate
    p99_ms: float = 0.0
    tool_e2e: str = ""  # EndToEndLatency's own line (Kafka)
    failed: int = 0  # sends or receives that failed, all phases
    notes: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return (f"round {self.round} {self.path:<5} {self.broker:<8} start {self.start_s:6.2f} s  "
                f"produce {self.produce:9,.0f} msg/s ({self.produce_cpu_us:6.1f} us/msg)  "
                f"rss {self.rss_mb:7.1f} MB  consume {self.consume:9,.0f} msg/s  "
                f"p50 {self.p50_ms:6.2f} ms  p99 {self.p99_ms:7.2f} ms  failed {self.failed}"
                f"  {json.dumps(self.notes, sort_keys=True)}")  # fmt: skip


_PRODUCER_PERF = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")
_E2E_AVG = re.compile(r"Avg latency: ([\d.]+) ms")
_E2E_PCT = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")


def cpu_seconds(b: Broker) -> dict[str, float]:
    return {name: process_cpu_seconds(pid) for name, pid in b.counted().items()}


def produce_cost(b: Broker, fig: Figures, before: dict[str, float], n: int) -> None:
    """The broker's CPU per produced message and its RSS right after produce, summed over its
    processes (with groups also each process's, in the notes)."""
    used = {name: cpu - before[name] for name, cpu in cpu_seconds(b).items()}
    fig.produce_cpu_us = sum(used.values()) / n * 1e6
    rss = {name: rss_mb(pid) for name, pid in b.counted().items()}
    fig.rss_mb = sum(rss.values())
    if b.groups:
        fig.notes["groups"] = len(b.groups.brokers)
        fig.notes["rss_mb_each"] = {name: round(mb, 1) for name, mb in rss.items()}
        fig.notes["cpu_us_each"] = {name: round(s / n * 1e6, 1) for name, s in used.items()}
        fig.notes["stored_each"] = stored_each(b.groups, "bench", QUEUES)


def kafka_phases(b: Broker, fig: Figures, args: argparse.Namespace, home: Path) -> None:
    n = args.messages
    topics = {"bench": QUEUES, "e2e": 1, "lat": 1}
    if b.groups:
        create_topics(b.groups, topics)
    else:
        create_kafka_topics(b.kafka, topics)
    cpu = cpu_seconds(b)
    props = [f"bootstrap.servers={b.kafka}"]
    if args.smoke:
        # 300 records are ~20 sticky batches: the adaptive partitioner (the default) steers
        # them all away from a group whose first answers came late (a busy CI machine, its
        # start-up still reading its segment), and the smoke checks that both groups store.
        props.append("partitioner.adaptive.partitioning.enable=false")
    out = run_java("kafka", "org.apache.kafka.tools.ProducerPerformance", [
        "--topic", "bench", "--num-records", str(n), "--record-size", str(args.size),
        "--throughput", "-1", "--producer-props", *props,
    ], home)  # fmt: skip
    produce_cost(b, fig, cpu, n)
    sent = _PRODUCER_PERF.findall(out)
    if not sent or int(sent[-1][0]) != n:
        raise RuntimeError(f"ProducerPerformance:\n{out[-2000:]}")
    fig.produce = float(sent[-1][1])
    out = run_java("kafka", "org.apache.kafka.tools.ConsumerPerformance", [
        "--bootstrap-server", b.kafka, "--topic", "bench", "--num-records", str(n),
        "--timeout", "60000", "--group", f"bench-{fig.round}",
    ], home)  # fmt: skip
    rows = [line for line in out.splitlines() if line.count(",") >= 9 and line[:1].isdigit()]
    if not rows:
        raise RuntimeError(f"ConsumerPerformance:\n{out[-2000:]}")
    cols = [c.strip() for c in rows[-1].split(",")]
    consumed = int(cols[4])
    fig.failed += n - consumed
    fig.consume = float(cols[9])  # fetch.nMsg.sec: the group join excluded
    fig.notes["consume_incl_join"] = round(float(cols[5]))
    if args.smoke:
        return
    out = run_java("kafka", "org.apache.kafka.tools.EndToEndLatency", [
        "--bootstrap-server", b.kafka, "--topic", "e2e", "--num-records",
        str(args.e2e_records), "--producer-acks", "all", "--record-size", str(args.size),
    ], home)  # fmt: skip
    avg, pct = _E2E_AVG.search(out), _E2E_PCT.search(out)
    if avg and pct:
        fig.tool_e2e = f"avg {float(avg[1]):.3f} ms, p50 {pct[1]} / p99 {pct[2]} ms"
        fig.notes["e2e_tool_avg_ms"] = round(float(avg[1]), 3)
        fig.notes["e2e_tool_p99_ms"] = int(pct[2])
    paced_latency(fig, peer_bench(["kafka-latency", b.kafka, "lat", "1", str(args.rate),
                                   str(args.latency_messages), str(args.size)], home))  # fmt: skip


def paced_latency(fig: Figures, result: dict[str, Any]) -> None:
    fig.failed += int(result["failed"])
    fig.p50_ms = result.get("p50_us", 0) / 1000
    fig.p99_ms = result.get("p99_us", 0) / 1000
    fig.notes["p999_ms"] = result.get("p999_us", 0) / 1000


def rmq_phases(b: Broker, fig: Figures, args: argparse.Namespace, home: Path, v5: bool) -> None:
    n, kind = args.messages, "rmq5" if v5 else "rmq4"
    target = b.grpc if v5 else b.namesrv
    if b.groups:
        create_topics(b.groups, {"bench": QUEUES, "lat": QUEUES})
    else:
        for topic in ("bench", "lat"):
            create_rmq_topic(b.remoting, topic)
    cpu = cpu_seconds(b)
    sent = peer_bench([f"{kind}-produce", target, "bench", str(n), str(args.size),
                       str(args.threads)], home)  # fmt: skip
    produce_cost(b, fig, cpu, n)
    fig.side_rss_mb = sum(rss_mb(pid) for pid in b.side_pids.values())
    if fig.side_rss_mb:
        fig.notes["namesrv_rss_mb"] = round(fig.side_rss_mb)
    fig.failed += int(sent["failed"])
    fig.produce = sent["count"] / sent["seconds"]
    stored = n + 1 - int(sent["failed"])  # and the warm-up send
    got = peer_bench([f"{kind}-consume", target, "bench", f"bench_consumer_{fig.round}",
                      str(stored)], home)  # fmt: skip
    fig.failed += max(0, stored - int(got["count"]))
    fig.consume = got["count"] / got["seconds"]
    if args.smoke:
        return
    paced_latency(fig, peer_bench([f"{kind}-latency", target, "lat", f"lat_{fig.round}",
                                   str(args.rate), str(args.latency_messages), str(args.size)],
                                  home))  # fmt: skip


def one_broker(path: str, who: str, round_no: int, args: argparse.Namespace, scratch: Path
               ) -> Figures:  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix=f"{path}-{who}-", dir=scratch))
    fig = Figures(path, who, round_no)
    sizes = SMOKE_SIZES if args.smoke else STORE_SIZES
    try:
        if who == "wharf":
            b = start_wharf(root / "broker", args.flush, path, sizes, args.wharf_groups,
                            fronts=args.wharf_fronts)  # fmt: skip
        elif path == "kafka":
            b = start_kafka(root / "broker", args.flush, sizes)
        else:
            b = start_rocketmq(root / "broker", args.flush, path == "rmq5", sizes)
        fig.broker = b.name
        fig.start_s = b.start_seconds
        try:
            if path == "kafka":
                kafka_phases(b, fig, args, root / "client")
            else:
                rmq_phases(b, fig, args, root / "client", v5=path == "rmq5")
        finally:
            b.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(fig.line(), flush=True)
    return fig


# --- the run --------------------------------------------------------------------------------

TARGETS = [  # figure, op, bound
    ("produce", ">=", 1.0),
    ("consume", ">=", 1.0),
    ("p50_ms", "<=", 1.0),
    ("p99_ms", "<=", 1.0),
    ("rss_mb", "<=", 0.5),
    ("start_s", "<=", 0.5),
    ("produce_cpu_us", "", 0.0),  # no target: the broker's CPU per produced message
]


def parse_line(line: str) -> Figures:
    m = re.match(
        r"round (\d+) (\S+)\s+(\S+)\s+start\s+([\d.]+) s\s+produce\s+([\d,]+) msg/s \(\s*([\d.]+)"
        r" us/msg\)\s+rss\s+([\d.]+) MB\s+consume\s+([\d,]+) msg/s\s+p50\s+([\d.]+) ms\s+p99\s+"
        r"([\d.]+) ms\s+failed (\d+)\s+(\{.*\})", line)  # fmt: skip
    if m is None:
        raise ValueError(f"not a round line: {line}")
    g = m.groups()
    return Figures(
        g[1], g[2], int(g[0]), float(g[3]), float(g[4].replace(",", "")), float(g[5]),
        float(g[6]), 0.0, float(g[7].replace(",", "")), float(g[8]), float(g[9]),
        failed=int(g[10]), notes=json.loads(g[11]),
    )  # fmt: skip


def report(figs: list[Figures]) -> None:
    for path in dict.fromkeys(f.path for f in figs):
        mine = [f for f in figs if f.path == path]
        peer = next((f.broker for f in mine if f.broker != "wharf"), "")
        if not peer:
            print(f"\n{path}: Wharf only ({len(mine)} rounds), nothing judged")
            continue
        print(f"\n{path}: medians over {len(mine) // 2} rounds (wharf / {peer})")
        for name, op, bound in TARGETS:
            w = [getattr(f, name) for f in mine if f.broker == "wharf"]
            p = [getattr(f, name) for f in mine if f.broker != "wharf"]
            if not w or not p or not any(p):
                continue
            by_round = {f.round: f for f in mine if f.broker != "wharf"}
            ratios = [getattr(f, name) / getattr(by_round[f.round], name)
                      for f in mine if f.broker == "wharf" and f.round in by_round
                      and getattr(by_round[f.round], name)]  # fmt: skip
            if not ratios:
                continue
            low, high = median_interval(ratios)
            verdict = f"target {op} {bound}x: {decide(ratios, op, bound)}" if op else "no target"
            print(f"  {name:<8} wharf {statistics.median(w):10.2f}  {peer} "
                  f"{statistics.median(p):10.2f}  ratio median {statistics.median(ratios):.2f}x "
                  f"(95% {low:.2f}-{high:.2f}, range {min(ratios):.2f}-{max(ratios):.2f}) "
                  f"{verdict}")  # fmt: skip


def in_netns(module: str = "tests.bench.peers") -> None:
    """Runs ``module`` (this program, or another of the peers') again in a network namespace
    of its own (loopback only), unless it runs in one already; needs root (unshare) and
    iproute2's ``ip``."""
    if os.environ.get(NETNS_MARK) == "1":
        return
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        raise SystemExit("unshare and ip are needed (util-linux, iproute2: make system-deps)")
    inner = " ".join(["ip link set lo up && exec", sys.executable, "-m", module,
                      *(f"'{a}'" for a in sys.argv[1:])])  # fmt: skip
    env = {**os.environ, NETNS_MARK: "1"}
    os.execvpe("unshare", ["unshare", "--net", "--", "sh", "-c", inner], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", default="kafka,rmq4,rmq5")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=64, help="RocketMQ sending threads")
    parser.add_argument("--flush", choices=["async", "sync"], default="async")
    parser.add_argument("--rate", type=int, default=1000, help="paced latency: msg/s")
    parser.add_argument("--latency-messages", type=int, default=5000)
    parser.add_argument("--e2e-records", type=int, default=2000, help="EndToEndLatency's")
    parser.add_argument(
        "--wharf-groups",
        type=int,
        default=1,
        help="Wharf as a wharf-namesrv and N broker groups (peers_groups.py)",
    )
    parser.add_argument(
        "--wharf-fronts",
        type=int,
        default=0,
        help="the 5.x path: Wharf with N v2Fronts processes, the client at their port",
    )
    parser.add_argument(
        "--wharf-only", action="store_true", help="no peer broker: Wharf's side alone, unjudged"
    )
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--output", help="append the round lines to this file")
    parser.add_argument("--pool", nargs="*", default=None,
                        help="judge the round lines of saved outputs instead of running")  # fmt: skip
    args = parser.parse_args()
    if args.pool is not None:
        report([parse_line(line) for line in round_lines(args.pool)])
        return
    broker_names(args.wharf_groups)  # 1 to 26, checked before anything starts
    in_netns()
    # SIGTERM (and SIGINT, ignored in a background job) unwind through the finally blocks:
    # each running broker is stopped by its pid and its files deleted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args.flush = "SYNC_FLUSH" if args.flush == "sync" else "ASYNC_FLUSH"
    paths = args.paths.split(",")
    if args.smoke:
        args.messages, args.rounds = 300, 1
        CLIENT_JVM[:] = SMOKE_CLIENT_JVM
        paths = [p for p in paths if p != "rmq5"]
    print(f"# peers {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} flush {args.flush} "
          f"messages {args.messages} x {args.size} B, rounds {args.rounds}, wharf groups "
          f"{args.wharf_groups}, load "
          f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    figs: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="wharf-peers-") as scratch:
        for round_no in range(1, args.rounds + 1):
            for path in paths:
                order = ["wharf", "peer"] if round_no % 2 else ["peer", "wharf"]
                if args.wharf_only:
                    order = ["wharf"]
                for who in order:
                    fig = one_broker(path, who, round_no, args, Path(scratch))
                    figs.append(fig)
                    if args.output:
                        with open(args.output, "a") as out:
                            out.write(fig.line() + "\n")
    if args.smoke:
        # Sends a busy machine failed (a peer's timeouts) are printed, not fatal: the smoke run
        # keeps the program working, every broker must take messages and give them back.
        if any(not (f.produce and f.consume) for f in figs):
            raise SystemExit("smoke: a broker took or gave back no messages")
        print(f"smoke: {len(figs)} brokers produced and consumed ({args.messages} messages each, "
              f"{sum(f.failed for f in figs)} failed)")  # fmt: skip
        return
    report(figs)
    print(f"# load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
