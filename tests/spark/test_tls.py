"""The Spark connector over TLS against a real daemon (tlsEnable + tlsListen): the sink and
the source with ``caFile`` on the TLS port, the same rows on the plaintext port, and a read
without ``caFile`` refused by the TLS port. The CA bundle is read on the driver and travels to
the Python workers inside the pickled options."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import Daemons

pytestmark = pytest.mark.spark


def read(spark, endpoint: str, **options: str):
    reader = spark.read.format("wharf").option("endpoints", endpoint).option("topic", "tls-spark")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_sink_and_source_over_tls(daemons: Daemons, spark, tmp_path: Path) -> None:
    settings = {"tlsEnable": True, "tlsListen": "127.0.0.1:0", "defaultTopicQueueNums": 2}
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        ca = str(broker.store_dir / "config" / "tls" / "broker.crt")
        bodies = [f"secure {i}" for i in range(50)]
        frame = spark.createDataFrame([(b,) for b in bodies], "body string")
        (
            frame.write.format("wharf")
            .option("endpoints", broker.tls_endpoint)
            .option("topic", "tls-spark")
            .option("caFile", ca)
            .mode("append")
            .save()
        )
        rows = read(spark, broker.tls_endpoint, caFile=ca).collect()
        assert sorted(bytes(r.body).decode() for r in rows) == sorted(bodies)
        assert read(spark, broker.plaintext_endpoint).count() == 50  # one store, two ports
        with pytest.raises(Exception, match="UNAVAILABLE"):
            read(spark, broker.tls_endpoint, timeoutMs="3000").collect()
