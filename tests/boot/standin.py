"""The stand-in k3s the boot tests install where the image puts the real one.

It runs inside a booted node (the node's python3; raya's tree mounted read-only) and knows
only what the node's Ignition gave it. It logs its arguments, the config files it sees and
the private addresses present when it starts (never the token), then plays its role:
- `server`: with `cluster-init`, logs that it starts the cluster's etcd; with `server`, first
  joins through that URL as k3s' `server` user with its token (the full token: the CA is
  checked), retrying until it answers, as a joining k3s server does (k3s `pkg/etcd/etcd.go`,
  `Start` then `join`); then HTTPS on the advertised address, port 6443, with a serving
  certificate from the cluster's server CA for that address and every `tls-san`, and
  `/cacerts`, as k3s does;
- `agent`: the k3s join check against its `server` with its token (tests/nodes/k3s_join.py);
  connection failures are retried, as k3s does; a refused join exits 1;
- `kubectl`: refused until the server answers on its advertised address, then done.
Tokens are never logged, only their SHA-256 (`token sha256: ...`), for the tests to compare.
It signals readiness on $NOTIFY_SOCKET itself (the unit is Type=notify, and a
systemd-notify child is not the main process).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
from pathlib import Path
from typing import Any

import yaml

from raya.nodes.identity import CertificateAuthority
from raya.nodes.render import PRIVATE_INTERFACE
from tests.nodes.k3s_join import JoinRefused, join, k3s_like_server, serving_certificate

CONFIG = Path("/etc/rancher/k3s/config.yaml")
TLS = Path("/var/lib/rancher/k3s/server/tls")
SHOWN = (
    "cluster-init",
    "server",
    "node-name",
    "node-ip",
    "advertise-address",
    "node-external-ip",
    "tls-san",
    "kubelet-arg",
)


def say(text: str) -> None:
    print(text, flush=True)


def notify_ready() -> None:
    address = os.environ["NOTIFY_SOCKET"]
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.sendto(b"READY=1", address)


def load_config() -> dict[str, Any]:
    """config.yaml, then its drop-ins in name order, as k3s merges them: a later value
    replaces an earlier one, and a key ending in `+` appends to it (k3s'
    pkg/configfilearg/parser.go)."""
    files = [CONFIG, *sorted(CONFIG.with_name("config.yaml.d").glob("*.yaml"))]
    config: dict[str, Any] = {}
    for path in files:
        for key, value in (yaml.safe_load(path.read_text()) or {}).items():
            name = key.removesuffix("+")
            if key.endswith("+") and name in config:
                config[name] = [*_listed(config[name]), *_listed(value)]
            else:
                config[name] = value
    say("config files: " + " ".join(str(path) for path in files))
    say("config: " + json.dumps({key: config[key] for key in SHOWN if key in config}))
    return config


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def private_addresses() -> list[str]:
    result = subprocess.run(
        ["ip", "-j", "-4", "address", "show", "dev", PRIVATE_INTERFACE],
        capture_output=True,
        text=True,
        check=False,
    )
    links = json.loads(result.stdout or "[]")
    return [f"{a['local']}/{a['prefixlen']}" for link in links for a in link["addr_info"]]


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def register(server: str, token: str, path: str) -> bytes | None:
    """Join `server` with `token` as k3s does, retrying while it does not answer; None if
    refused."""
    say(f"token sha256: {fingerprint(token)}")
    while True:
        try:
            return join(server, token, path)
        except JoinRefused as refusal:
            say(f"join refused by {server}: {refusal}")
            return None
        except (urllib.error.URLError, OSError) as error:
            say(f"waiting for {server}: {error}")
            time.sleep(1)


def serve(config: dict[str, Any]) -> int:
    ca = CertificateAuthority(
        cert_pem=(TLS / "server-ca.crt").read_text(), key_pem=(TLS / "server-ca.key").read_text()
    )
    token = str(config["token"])
    if config.get("cluster-init") is True:
        say("etcd: cluster-init, starting a new cluster")
    if "server" in config:
        answer = register(str(config["server"]), token, "/v1-k3s/server-bootstrap")
        if answer is None:
            return 1
        say(f"joined {config['server']} as a server: {answer.decode()}")
    address = str(config["advertise-address"])
    names = [str(name) for name in config.get("tls-san", [])]
    serving = serving_certificate(ca, Path(tempfile.mkdtemp()), address, names)
    cacerts = (TLS / "server-ca.crt").read_bytes()
    # k3s keeps the secret of a full token as the cluster's (pkg/cluster/storage.go).
    secrets = token.rpartition(":")[2], str(config["agent-token"])
    name = str(config["node-name"])
    with k3s_like_server(serving, cacerts, *secrets, (address, 6443), name) as url:
        say(f"serving {url}")
        notify_ready()
        while True:
            time.sleep(3600)


def agent(config: dict[str, Any]) -> int:
    server = str(config["server"])
    answer = register(server, str(config["token"]), "/v1-k3s/config")
    if answer is None:
        return 1
    say(f"joined {server}: {answer.decode()}")
    notify_ready()
    while True:
        time.sleep(3600)


def kubectl(config: dict[str, Any], arguments: list[str]) -> int:
    """`k3s kubectl`: refused while the server's API does not answer (as kubectl is),
    else done; what it was asked is logged."""
    address = (str(config["advertise-address"]), 6443)
    try:
        socket.create_connection(address, timeout=2).close()
    except OSError as error:
        say(f"kubectl: the connection to the server {address[0]}:6443 was refused: {error}")
        return 1
    say("kubectl " + " ".join(arguments) + ": done")
    return 0


def main(arguments: list[str]) -> int:
    say("k3s " + " ".join(arguments))
    config = load_config()
    say(f"{PRIVATE_INTERFACE} addresses at start: {' '.join(private_addresses()) or 'none'}")
    if arguments[:1] == ["server"]:
        return serve(config)
    if arguments[:1] == ["agent"]:
        return agent(config)
    if arguments[:1] == ["kubectl"]:
        return kubectl(config, arguments[1:])
    say(f"unknown role {arguments!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
