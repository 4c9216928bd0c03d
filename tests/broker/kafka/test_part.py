"""The Kafka part as the broker composes it (``FrontEnd``): off, optional on its default
address, a taken port, ready keys, stop."""

from __future__ import annotations

import dataclasses
import socket

import pytest
from wharf.broker.config import BrokerConfig, Config, StoreConfig
from wharf.broker.frontends.frontend import FrontEndUnavailable, PortBook, TlsSource
from wharf.broker.frontends.kafka.part import KafkaPart, kafka_part


def config(**broker: str) -> Config:
    return Config(dataclasses.replace(BrokerConfig(), **broker), StoreConfig())


def test_off_default_and_explicit() -> None:
    assert kafka_part(config(kafka_listen="off")) is None
    default = kafka_part(config())
    assert isinstance(default, KafkaPart) and default.optional and default.name == "kafka"
    explicit = kafka_part(config(kafka_listen="127.0.0.1:0"))
    assert isinstance(explicit, KafkaPart) and not explicit.optional
    assert explicit.store_host("127.0.0.1:8081") is None


def test_a_taken_port_names_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        part = kafka_part(config(kafka_listen=f"127.0.0.1:{port}"))
        assert part is not None
        ports = PortBook()
        with pytest.raises(FrontEndUnavailable) as info:
            part.reserve(ports, TlsSource())
        ports.close()
    assert info.value.setting == "kafkaListen" and "--kafka-listen" in str(info.value)


def test_ready_reports_the_bound_port() -> None:
    part = kafka_part(config(kafka_listen="127.0.0.1:0"))
    assert part is not None
    ports = PortBook()
    part.reserve(ports, TlsSource())
    ready = part.ready()
    ports.close()
    assert ready["kafka_tls"] is None
    host, _, port = (ready["kafka"] or "").rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0
