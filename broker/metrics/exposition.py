"""Prometheus text exposition of the per-topic families, written directly, and the /metrics app.

Why not prometheus_client's ``generate_latest`` for these: it builds a ``Sample`` per line and
formats and re-validates its labels, ~7 us a line here. The sends' per-topic families are 15
lines a topic (two counters and a histogram of 10 bounds): at 10,000 topics 150,000 lines, 1.0
s of the HTTP thread (1.5 s in OpenMetrics, what Prometheus asks for) holding the interpreter
lock every scrape, taken from the event loop; the counters by topic and group add a
line a series, and so do the consumer lag gauges (``families.lag_text``: 25,000 (topic, group)
pairs 43 ms against 261 ms). Here a topic's lines come from one label text and the cumulative
counts: 65-80 ms for the same 10,000 topics. The other families (a few series each, whatever
the number of topics) still go through prometheus_client (``tests.bench.metrics_hooks`` times
both).

The app answers GET with text format 0.0.4 (which Prometheus accepts whatever it asked for),
gzip-compressed when the scraper accepts it (zlib releases the interpreter lock while it
compresses), as prometheus_client's app does; OPTIONS with the allowed methods, anything else
405.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, gzip_accepted

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", '"': '\\"'})


def label_value(text: str) -> str:
    """A label value as the text format writes it (backslash, newline and quote escaped)."""
    return text.translate(_ESCAPES)


def number(value: float) -> str:
    """A sample value: ints as floats ("4.0"), as prometheus_client writes them."""
    return repr(float(value))


def bound_texts(bounds: Sequence[float]) -> list[str]:
    """The ``le`` texts of a histogram's buckets, +Inf last."""
    return [*(repr(float(bound)) for bound in bounds), "+Inf"]


def header(name: str, doc: str, kind: str) -> str:
    escaped = doc.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} {kind}\n"


def metrics_app(render: Callable[[], bytes]) -> WsgiApp:
    """A WSGI app serving ``render()`` (the whole exposition) on GET."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method == "OPTIONS":
            start_response("200 OK", [("Allow", "OPTIONS,GET")])
            return [b""]
        if method != "GET":
            start_response("405 Method Not Allowed", [("Allow", "OPTIONS,GET")])
            return [b"Method Not Allowed\n"]
        body = render()
        headers = [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    return app
