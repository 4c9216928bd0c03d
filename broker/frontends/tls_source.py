"""The broker's TLS at start: the material of tlsEnable or haTlsEnable (either), its reloader,
and the one rule every front end follows (``TlsSource``, broker/frontends/frontend.py)."""

from __future__ import annotations

import asyncio

from wharf.broker.config import BrokerConfig
from wharf.broker.frontends.frontend import FrontEndUnavailable, TlsSource
from wharf.broker.kit.tls.contexts import server_ssl_context
from wharf.broker.kit.tls.reload import CertificateReloader
from wharf.broker.tls_settings import ServerTls, TlsError, load_server_tls_blocking

__all__ = ["load_tls"]


async def load_tls(
    broker: BrokerConfig, store_dir: str
) -> tuple[ServerTls | None, CertificateReloader | None, TlsSource]:
    """(material, reloader, rule); FrontEndUnavailable when the material cannot be used."""
    if not (broker.tls_enable or broker.ha_tls_enable):
        return None, None, TlsSource()
    try:
        tls = await asyncio.to_thread(load_server_tls_blocking, broker, store_dir)
    except TlsError as exc:
        raise FrontEndUnavailable(str(exc)) from None
    reloader = CertificateReloader(tls)
    return (
        tls,
        reloader,
        TlsSource(
            enabled=broker.tls_enable,
            separate_port=bool(broker.tls_listen),
            tls_listen_host=broker.tls_listen.rpartition(":")[0].strip("[]"),
            make_context=lambda: server_ssl_context(reloader.refreshed),
            make_credentials=reloader.credentials,
        ),
    )
