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
import ipaddress
import itertools
import json
import os
import ssl
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raya.model.fleet import Cluster
from raya.nodes.render import RenderedNode
from tests import support
from tests.nodes.test_control_planes import render, sized, units
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
        *urls: str, state: str = "active", env: dict[str, str] | None = None
    ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
        systemctl.with_suffix(".state").write_text(state)
        result = subprocess.run(
            ["bash", str(script), "k3s.service", "90", *urls],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={"PATH": f"{bin_dir}:{os.environ['PATH']}", **(env or {})},
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
        assert "inside k3s' 90-day renewal window\n" in result.stdout
        assert "restarting k3s.service so that k3s renews it" in result.stdout


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


# --- a control plane restarts only while etcd keeps a quorum without it ---------------------
#
# etcd as k3s runs it (k3s `pkg/etcd/etcd.go`: client URL https://<address>:2379 and
# https://127.0.0.1:2379, `ClientCertAuth`, trusting tls/etcd/server-ca.crt; k3s' own client
# certificate tls/etcd/client.crt): TLS that requires a client certificate from that CA; the
# JSON gateway's POST /v3/maintenance/status (`header.member_id`) and
# POST /v3/cluster/member/list (`members[]` with `ID`, `clientURLs`, `isLearner` only when
# true: grpc-gateway v1's default marshaler, `JSONPb{OrigName: true}`, proto field names and
# defaults left out; etcd `server/embed/serve.go`, `registerGateway`), and GET /health
# answering {"health": "true"} or "false" (etcd `server/etcdserver/api/etcdhttp/health.go`).
# IDs are uint64s, strings in JSON.


def etcd_tls(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """k3s' etcd TLS folder (server-ca.crt, client.crt, client.key, as k3s makes them: a CA,
    a client certificate it signs) and the servers' context, with a serving certificate for
    127.0.0.1 from that CA, asking every client for a certificate from that CA."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "etcd-server-ca")])
    now = datetime.datetime.now(datetime.UTC)

    def issued(name: str, usage: x509.ObjectIdentifier, key: Any, ca: bool = False) -> bytes:
        builder = (
            x509.CertificateBuilder()
            .subject_name(
                ca_name if ca else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
            )
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    def pem(key: Any) -> bytes:
        return bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    tls = folder / "tls-etcd"
    tls.mkdir()
    ca = issued("", ExtendedKeyUsageOID.SERVER_AUTH, ca_key, ca=True)
    (tls / "server-ca.crt").write_bytes(ca)
    client_key, server_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    (tls / "client.crt").write_bytes(
        issued("etcd-client", ExtendedKeyUsageOID.CLIENT_AUTH, client_key)
    )
    (tls / "client.key").write_bytes(pem(client_key))
    (folder / "etcd-server.crt").write_bytes(
        issued("etcd-server", ExtendedKeyUsageOID.SERVER_AUTH, server_key)
    )
    (folder / "etcd-server.key").write_bytes(pem(server_key))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "etcd-server.crt", folder / "etcd-server.key")
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=ca.decode())
    return context, tls


@contextmanager
def etcd_member(context: ssl.SSLContext, answer: Callable[[str, str], Any]) -> Iterator[str]:
    """A member's client URL: `answer(method, path)` is the JSON body of each reply."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method: str) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps(answer(method, self.path)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._reply("GET")

        def do_POST(self) -> None:
            self._reply("POST")

        def log_message(self, format: str, *args: object) -> None:
            pass

    with support.serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler), context) as url:
        yield url


@contextmanager
def etcd_cluster(folder: Path, others: Sequence[str]) -> Iterator[dict[str, str]]:
    """This member (a voter, ID "1") and `others`, each "healthy", "sick" (answers
    health false), "down" (nothing listens) or "learner" (healthy, not voting): the
    script's environment on a control plane."""
    context, tls = etcd_tls(folder)

    def health(healthy: bool) -> Callable[[str, str], Any]:
        return lambda method, path: {"health": "true" if healthy else "false"}

    with ExitStack() as stack:
        urls = [
            "https://127.0.0.1:9"
            if state == "down"
            else stack.enter_context(etcd_member(context, health(state != "sick")))
            for state in others
        ]
        members = [
            {"ID": str(k + 2), "name": f"control-plane-{k + 1}-0", "clientURLs": [url]}
            | ({"isLearner": True} if state == "learner" else {})
            for k, (state, url) in enumerate(zip(others, urls, strict=True))
        ]

        def local(method: str, path: str) -> Any:
            header = {"cluster_id": "77", "member_id": "1", "revision": "9", "raft_term": "3"}
            if method == "POST" and path == "/v3/maintenance/status":
                return {"header": header, "version": "3.5.21"}
            if method == "POST" and path == "/v3/cluster/member/list":
                own = {"ID": "1", "name": "control-plane-0", "clientURLs": [endpoint]}
                return {"header": header, "members": [own, *members]}
            return {"health": "true"}

        endpoint = ""
        endpoint = stack.enter_context(etcd_member(context, local))
        yield {"RAYA_ETCD_ENDPOINT": endpoint, "RAYA_ETCD_TLS": str(tls)}


@pytest.mark.parametrize(
    ("others", "restarts", "figures"),
    [
        (["healthy", "healthy"], True, "2 of the other voters healthy, of 3 voters; 2 needed"),
        (["healthy", "down"], False, "1 of the other voters healthy, of 3 voters; 2 needed"),
        (["healthy", "sick"], False, "1 of the other voters healthy, of 3 voters; 2 needed"),
        # A learner does not vote: two voters, the other one healthy, two needed.
        (["healthy", "learner"], False, "1 of the other voters healthy, of 2 voters; 2 needed"),
        (["healthy"] * 2 + ["down"] * 2, False, "2 of the other voters healthy, of 5 voters"),
        (["healthy"] * 3 + ["down"], True, "3 of the other voters healthy, of 5 voters; 3 "),
        ([], True, "etcd: this is its only voter, no quorum to keep"),
    ],
)
def test_a_control_plane_restarts_only_while_etcd_keeps_a_quorum_without_it(
    check: Check, tmp_path: Path, others: list[str], restarts: bool, figures: str
) -> None:
    require_tool("jq")
    with (
        http_server(lambda _: (200, b"ok"), serving(tmp_path, 30)) as due,
        etcd_cluster(tmp_path, others) as env,
    ):
        result, asked = check(due, env=env)
    assert figures in result.stdout, (result.stdout, result.stderr)
    if restarts:
        assert result.returncode == 0, result.stderr
        assert asked[-1] == "restart k3s.service"
    else:
        assert result.returncode == 1
        assert asked == ["is-active --quiet k3s.service"]
        assert "not restarting k3s.service: etcd would be without a quorum" in result.stderr


def test_an_etcd_that_refuses_the_client_certificate_means_no_restart(
    check: Check, tmp_path: Path
) -> None:
    require_tool("jq")
    with (
        http_server(lambda _: (200, b"ok"), serving(tmp_path, 30)) as due,
        etcd_cluster(tmp_path, ["healthy", "healthy"]) as env,
    ):
        other = tmp_path / "other"
        other.mkdir()
        _, wrong = etcd_tls(other)  # a certificate from another CA
        result, asked = check(due, env={**env, "RAYA_ETCD_TLS": str(wrong)})
    assert result.returncode == 1
    assert asked == ["is-active --quiet k3s.service"]


@pytest.mark.parametrize("count", [3, 5])
def test_control_planes_check_at_their_own_times_and_ask_etcd_first(
    cluster: Cluster, count: int
) -> None:
    rendered, _ = render(sized(cluster, count))
    times: dict[str, int] = {}
    for name, node in rendered.items():
        unit = units(node)
        service, timer = unit["raya-k3s-certs.service"], unit["raya-k3s-certs.timer"]
        (slot,) = [line for line in timer.splitlines() if line.startswith("OnCalendar=")]
        hours, minutes = slot.split()[1].split(":")[:2]
        times[name] = int(hours) * 60 + int(minutes)
        etcd = "Environment=RAYA_ETCD_ENDPOINT=https://127.0.0.1:2379 " + (
            "RAYA_ETCD_TLS=/var/lib/rancher/k3s/server/tls/etcd"
        )
        assert (etcd in service) == name.startswith("control-plane"), name
        assert "RandomizedDelaySec=15min" in timer
    planes = sorted(times[name] for name in rendered if name.startswith("control-plane"))
    # Each control plane its own slot, 30 min apart: more than the 15 min random delay.
    assert len(planes) == count
    assert all(b - a >= 30 for a, b in itertools.pairwise(planes))
