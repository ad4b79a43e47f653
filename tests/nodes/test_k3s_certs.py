"""The certificate check every node runs daily, for real: the script the configs carry, run
by bash against TLS servers on 127.0.0.1 serving real certificates of chosen lifetimes, with
a stand-in `systemctl` recording what it is asked.

Why it exists: k3s renews its leaf certificates (valid 365 days) only when it starts, and
only those expiring within its renewal window: "Any certificates that are expired, or within
90 days of expiring, are automatically renewed every time K3s starts" (docs.k3s.io, cli/
certificate; k3s-io/k3s pkg/daemons/config/types.go, CertificateRenewDays = 90), widened to
120 days in the May 2025 releases (k3s-io/k3s#12232). A restart inside 90 days renews under
either; raya's nodes otherwise never restart until rolled.
"""

from __future__ import annotations

import datetime
import json
import os
import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from raya.nodes.render import RenderedNode
from tests.nodes.tools import ignition_files
from tests.support import http_server, require_tool

pytestmark = pytest.mark.tools

SCRIPT = "/usr/local/bin/raya-k3s-certs"
# The script run on some URLs with k3s in a given state: its result and systemctl's calls.
Check = Callable[..., tuple[subprocess.CompletedProcess[str], list[str]]]


def serving(folder: Path, days_left: float) -> ssl.SSLContext:
    """A TLS context serving a certificate that expires `days_left` days from now."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=365 - days_left))
        .not_valid_after(now + datetime.timedelta(days=days_left))
        .sign(key, hashes.SHA256())
    )
    stem = folder / f"serving-{days_left}"
    stem.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    stem.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(stem.with_suffix(".crt"), stem.with_suffix(".key"))
    return context


@pytest.fixture(scope="module")
def script(rendered: dict[str, RenderedNode], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("certs") / "raya-k3s-certs"
    path.write_bytes(ignition_files(rendered["agent-0"].ignition)[SCRIPT])
    return path


@pytest.fixture
def check(script: Path, tmp_path: Path) -> Iterator[Check]:
    """Runs the script with a `systemctl` that says k3s is `state` and records its calls."""
    require_tool("curl")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl-calls"
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(
        f'#!/bin/sh\necho "$*" >>{calls}\n'
        'if [ "$1" = is-active ]; then [ "$(cat "$0.state")" = active ]; fi\n'
    )
    systemctl.chmod(0o755)

    def run(
        *urls: str, state: str = "active"
    ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
        systemctl.with_suffix(".state").write_text(state)
        result = subprocess.run(
            ["bash", str(script), "k3s.service", "90", *urls],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
        )
        asked = calls.read_text().splitlines() if calls.exists() else []
        calls.unlink(missing_ok=True)
        return result, asked

    yield run


def test_89_days_left_restarts_k3s_91_days_left_does_not(check: Check, tmp_path: Path) -> None:
    with (
        http_server(lambda _: (200, b"ok"), serving(tmp_path, 91)) as fresh,
        http_server(lambda _: (200, b"ok"), serving(tmp_path, 89)) as due,
    ):
        result, asked = check(fresh)
        assert result.returncode == 0, result.stderr
        assert asked == ["is-active --quiet k3s.service"]
        assert f"{fresh}: certificate expires" in result.stdout

        result, asked = check(fresh, due)
        assert result.returncode == 0, result.stderr
        assert asked == ["is-active --quiet k3s.service", "restart k3s.service"]
        assert f"{due} serves a certificate expiring" in result.stdout
        assert "inside k3s' 90-day renewal window: restarting k3s.service" in result.stdout


def test_an_expired_certificate_restarts_k3s(check: Check, tmp_path: Path) -> None:
    with http_server(lambda _: (200, b"ok"), serving(tmp_path, -2)) as expired:
        result, asked = check(expired)
    assert asked[-1] == "restart k3s.service", (asked, result.stderr)


def test_nothing_is_restarted_when_k3s_is_not_running(check: Check, tmp_path: Path) -> None:
    with http_server(lambda _: (200, b"ok"), serving(tmp_path, 10)) as due:
        result, asked = check(due, state="inactive")
    assert result.returncode == 0
    assert asked == ["is-active --quiet k3s.service"]
    assert "k3s.service is not running: nothing to check" in result.stdout


def test_an_address_that_does_not_answer_is_skipped(check: Check, tmp_path: Path) -> None:
    with http_server(lambda _: (200, b"ok"), serving(tmp_path, 200)) as fresh:
        result, asked = check("https://127.0.0.1:9", fresh)
    assert result.returncode == 0
    assert asked == ["is-active --quiet k3s.service"]
    assert "https://127.0.0.1:9: no certificate served; skipped" in result.stderr
    assert f"{fresh}: certificate expires" in result.stdout


def test_shellcheck_is_clean(script: Path) -> None:
    result = subprocess.run(
        [require_tool("shellcheck"), str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def test_the_timer_runs_the_check_and_is_enabled(rendered: dict[str, RenderedNode]) -> None:
    for node in rendered.values():
        units = {u["name"]: u for u in json.loads(node.ignition)["systemd"]["units"]}
        assert units["raya-k3s-certs.timer"]["enabled"] is True
        assert "Unit=raya-k3s-certs.service" in units["raya-k3s-certs.timer"]["contents"]
