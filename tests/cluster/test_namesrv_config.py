"""NameServer settings for ACL and TLS: booleans as the broker's, settings that need each other
refused with the missing one named, and an ACL file that cannot be read stops the start with
exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from wharf.broker.namesrv.config import ConfigError, load_namesrv_settings

from tests.harness import REPO_ROOT


def test_acl_and_tls_settings_parse_and_need_their_files(tmp_path: Path) -> None:
    config = load_namesrv_settings(
        None,
        {"WHARF_NAMESRV_ACL_ENABLE": "true", "WHARF_NAMESRV_ACL_FILE": "/etc/acl.yml",
         "WHARF_NAMESRV_TLS_ENABLE": "on", "WHARF_NAMESRV_TLS_CERT_PATH": "c.pem",
         "WHARF_NAMESRV_TLS_KEY_PATH": "k.pem"},
    )  # fmt: skip
    assert config.acl_enable and config.tls_enable and config.acl_max_clock_skew == 900_000
    toml = tmp_path / "ns.toml"
    toml.write_text('aclEnable = true\naclFile = "a.yml"\ntlsClientAuth = "require"\n')
    with pytest.raises(ConfigError, match="tlsTrustCertPath"):
        load_namesrv_settings(toml)
    with pytest.raises(ConfigError, match="aclEnable needs aclFile"):
        load_namesrv_settings(None, {"WHARF_NAMESRV_ACL_ENABLE": "1"})
    with pytest.raises(ConfigError, match="tlsEnable needs tlsCertPath and tlsKeyPath"):
        load_namesrv_settings(None, {"WHARF_NAMESRV_TLS_ENABLE": "yes"})
    with pytest.raises(ConfigError, match="WHARF_NAMESRV_ACL_ENABLE"):
        load_namesrv_settings(None, {"WHARF_NAMESRV_ACL_ENABLE": "maybe"})


def test_an_unusable_acl_file_stops_the_start_with_exit_code_2(tmp_path: Path) -> None:
    acl = tmp_path / "acl.yml"
    acl.write_text("accounts: [{accessKey: a}]\n")  # no secretKey
    proc = subprocess.run(
        [sys.executable, "-m", "wharf.broker.namesrv", "--listen", "127.0.0.1:0"],
        env={"PATH": "/usr/bin:/bin", "WHARF_NAMESRV_ACL_ENABLE": "true",
             "WHARF_NAMESRV_ACL_FILE": str(acl)},
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "aclEnable" in proc.stderr and str(acl) in proc.stderr
