"""The docker-compose TLS set-up without Docker: `make deploy-secrets` writes the files the
compose secrets name, and the broker started with the compose's environment (its /run/secrets
paths rebased onto those files) serves TLS that wharf-probe (the image's HEALTHCHECK, with the
compose's WHARF_PROBE_CA_FILE) accepts, /metrics only with the token Prometheus sends, and
gRPC only with the admin keys the same make target wrote (ACL on)."""

from __future__ import annotations

import http.client
import os
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cryptography import x509

from tests.harness import REPO_ROOT, Daemons
from tests.ops.deploy_files import DEPLOY, load_yaml

COMPOSE = load_yaml(DEPLOY / "docker-compose.yml")


def test_deploy_secrets_and_the_compose_environment_give_a_tls_broker(
    daemons: Daemons, tmp_path: Path
) -> None:
    secrets_dir = tmp_path / "secrets"
    made = subprocess.run(
        ["make", "-s", "deploy-secrets", f"SECRETS_DIR={secrets_dir}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    # /run/secrets/<name> in the container -> the file the compose secret <name> names.
    mounted = {
        f"/run/secrets/{name}": secrets_dir / Path(spec["file"]).name
        for name, spec in COMPOSE["secrets"].items()
    }
    assert all(path.exists() for path in mounted.values()), sorted(os.listdir(secrets_dir))
    cert = x509.load_pem_x509_certificates(mounted["/run/secrets/wharf_tls_cert"].read_bytes())[0]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"broker", "localhost"} <= set(san.get_values_for_type(x509.DNSName))
    token = mounted["/run/secrets/wharf_metrics_token"].read_text().strip()
    assert len(token) >= 32
    # A second run keeps what exists (a restart of the stack keeps its certificate).
    before = mounted["/run/secrets/wharf_tls_cert"].read_bytes()
    subprocess.run(["make", "-s", "deploy-secrets", f"SECRETS_DIR={secrets_dir}"],
                   cwd=REPO_ROOT, check=True, capture_output=True, timeout=120)  # fmt: skip
    assert mounted["/run/secrets/wharf_tls_cert"].read_bytes() == before
    assert stat.S_IMODE(mounted["/run/secrets/wharf_tls_key"].stat().st_mode) == 0o644

    env = {
        name: str(mounted.get(str(value), value))
        for name, value in COMPOSE["services"]["broker"]["environment"].items()
    }
    env.pop("WHARF_ADVERTISED_ADDRESS")  # the harness's ephemeral port is advertised instead
    with daemons.broker(tmp_path / "broker", env=env) as broker:
        assert broker.tls_endpoint == broker.endpoint  # the compose's 8081 is TLS-only
        probe = subprocess.run(
            [sys.executable, "-m", "wharf.broker.kit.probe", "--endpoint", broker.endpoint],
            capture_output=True, text=True, timeout=30, env={**os.environ, **env},
        )  # fmt: skip
        assert probe.returncode == 0 and probe.stdout.strip() == "SERVING", probe.stderr
        # /metrics is HTTPS on the same certificate (metricsTlsEnable follows tlsEnable): the
        # token never crosses in clear; a plaintext request gets no answer.
        ca = ssl.create_default_context(cafile=env["WHARF_PROBE_CA_FILE"])
        url = f"https://{broker.metrics_endpoint}/metrics"
        try:
            urllib.request.urlopen(url, timeout=10, context=ca)
            raise AssertionError("/metrics answered without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        request = urllib.request.Request(url, headers={"Authorization": f"bearer {token}"})
        with urllib.request.urlopen(request, timeout=10, context=ca) as reply:
            assert reply.status == 200 and b"rocketmq_topic_number" in reply.read()
        plain = urllib.request.Request(url.replace("https:", "http:"), headers=request.headers)
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(plain, timeout=10)

        # ACL on: the CLI over TLS is refused unsigned, served with the admin keys of admin.env.
        keys = dict(line.split("=", 1) for line in (secrets_dir / "admin.env").read_text().split())
        assert keys["WHARF_ACCESS_KEY"] == "admin" and len(keys["WHARF_SECRET_KEY"]) >= 24
        cli = [sys.executable, "-m", "wharf.client.cli.main", "--endpoints", broker.endpoint,
               "--ca-file", env["WHARF_PROBE_CA_FILE"], "topic", "list"]  # fmt: skip
        clean = {k: v for k, v in os.environ.items() if not k.startswith("WHARF_")}
        refused = subprocess.run(cli, capture_output=True, text=True, timeout=60, env=clean)
        assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr + refused.stdout
        served = subprocess.run(cli, capture_output=True, text=True, timeout=60,
                                env={**clean, **keys})  # fmt: skip
        assert served.returncode == 0, served.stderr
