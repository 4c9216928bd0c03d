"""The console's health check: ``python -m wharf.client.console.probe`` exits 0 when the
console answers its overview page with the token, which needs a broker to answer too.

Docker's health check of the compose files' console service (the image's own HEALTHCHECK
probes a broker's gRPC port, which the console has not). Reads the token from
``$WHARF_CONSOLE_TOKEN_FILE`` (the compose secret) and sends it as ``Authorization: Bearer``;
dials ``$WHARF_CONSOLE_HEALTH_URL`` (default ``http://127.0.0.1:8082/``). Exit 0: 200; 1: any
other status; 2: unreachable.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8082/"
TIMEOUT_S = 4.0  # below compose's 5 s health check timeout


def main() -> int:
    url = os.environ.get("WHARF_CONSOLE_HEALTH_URL", DEFAULT_URL)
    headers = {}
    token_file = os.environ.get("WHARF_CONSOLE_TOKEN_FILE")
    if token_file:
        with open(token_file, encoding="utf-8") as file:
            headers["Authorization"] = "Bearer " + file.read().strip()
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S
        ):
            print(f"SERVING {url}")
            return 0
    except urllib.error.HTTPError as error:
        print(f"{error.code} {url}")
        return 1
    except OSError as error:
        print(f"UNREACHABLE {url}: {error}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
