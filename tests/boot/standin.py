"""The stand-in k3s the boot tests install where the image puts the real one.

It runs inside a booted node (the node's python3; raya's tree mounted read-only) and knows
only what the node's Ignition gave it. It logs its arguments, the config files it sees and
the private addresses present when it starts (never the token), then plays its role:
- `server`: starts its embedded etcd as k3s decides (the datastore section below): from the
  member its data dir holds; else, with `server`, it first joins through that URL as k3s'
  `server` user with its token (the full token: the CA is checked), retrying until it
  answers, as a joining k3s server does (k3s `pkg/etcd/etcd.go`, `Start` then `join`); else,
  with `cluster-init`, it starts the cluster's etcd, converting a SQLite datastore it finds;
  then HTTPS on the advertised address, port 6443, with a serving
  certificate from the cluster's server CA for that address and every `tls-san`, and
  `/cacerts`, as k3s does;
- `agent`: the k3s join check against its `server` with its token (tests/nodes/k3s_join.py);
  connection failures are retried, as k3s does; a refused join exits 1;
- `kubectl`: refused until the server answers on its advertised address, then done;
- `server --cluster-reset`: the reset of a restore, and what each server's etcd finds when
  it starts (section "etcd restore").
Tokens are never logged, only their SHA-256 (`token sha256: ...`), for the tests to compare.
It signals readiness on $NOTIFY_SOCKET itself (the unit is Type=notify, and a
systemd-notify child is not the main process).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from raya.nodes.identity import CertificateAuthority
from raya.nodes.render import KUBELET_KUBECONFIG, PRIVATE_INTERFACE
from tests.nodes.k3s_join import JoinRefused, join, k3s_like_server, serving_certificate
from tests.support import Reply

CONFIG = Path("/etc/rancher/k3s/config.yaml")
TLS = Path("/var/lib/rancher/k3s/server/tls")
SHOWN = (
    "cluster-init",
    "server",
    "node-name",
    "node-ip",
    "advertise-address",
    "node-external-ip",
    "flannel-backend",
    "flannel-iface",
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


def load_config(tell: Callable[[str], None] = say) -> dict[str, Any]:
    """config.yaml, then its drop-ins (`.yaml` and `.yml`, any case) in name order, as k3s
    merges them: a later value replaces an earlier one, and a key ending in `+` appends to it
    (k3s pkg/configfilearg/parser.go, `readConfigFile`, `dotDFiles`)."""
    dropins = CONFIG.with_name("config.yaml.d")
    files = [CONFIG, *sorted(path for path in dropins.glob("*") if path.is_file()
                             and path.suffix.lower() in (".yaml", ".yml"))]  # fmt: skip
    config: dict[str, Any] = {}
    for path in files:
        for key, value in (yaml.safe_load(path.read_text()) or {}).items():
            name = key.removesuffix("+")
            if key.endswith("+") and name in config:
                config[name] = [*_listed(config[name]), *_listed(value)]
            else:
                config[name] = value
    tell("config files: " + " ".join(str(path) for path in files))
    tell("config: " + json.dumps({key: config[key] for key in SHOWN if key in config}))
    return config


def advertised(config: dict[str, Any]) -> str:
    """The address a server advertises and serves on: `advertise-address`, else the first
    `node-external-ip`, else the first `node-ip` (k3s pkg/cli/server/server.go, `run`: "if not
    set, try setting advertise-ip from agent node-external-ip", then "from agent node-ip")."""
    for key in ("advertise-address", "node-external-ip", "node-ip"):
        if config.get(key):
            return str(_listed(config[key])[0])
    raise SystemExit("no address to advertise (k3s would take the default route's)")


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
    if not start_datastore(config, token):
        return 1
    address = advertised(config)
    # Also 127.0.0.1: agents reach the server through their load balancer there, verifying
    # its certificate (the kubelet's kubeconfig names https://127.0.0.1:6444).
    names = [str(name) for name in config.get("tls-san", [])] + ["127.0.0.1", "localhost"]
    serving = serving_certificate(ca, Path(tempfile.mkdtemp()), address, names)
    cacerts = (TLS / "server-ca.crt").read_bytes()
    # k3s keeps the secret of a full token as the cluster's (pkg/cluster/storage.go).
    secrets = token.rpartition(":")[2], str(config["agent-token"])
    name = str(config["node-name"])
    bodies = {"/db/info": db_info}
    client_ca = CertificateAuthority(
        cert_pem=(TLS / "client-ca.crt").read_text(), key_pem=(TLS / "client-ca.key").read_text()
    )
    api = NodeApi(client_ca)
    with k3s_like_server(
        serving, cacerts, *secrets, (address, 6443), name, bodies,
        agent_handlers={"/v1-k3s/client-kubelet.crt": api.kubelet_certificate},
        api=api.respond, client_ca=client_ca.cert_pem,
    ) as url:  # fmt: skip
        say(f"serving {url}")
        notify_ready()
        while True:
            time.sleep(3600)


# --- the kubelet's credentials and its Node (issue 39: a node publishes its SSH host key) ------
# The agent (k3s pkg/agent/config/config.go, `get`): its node password is /etc/rancher/node/
# password, made when missing (`ensureNodePassword`, random hex); it POSTs a certificate request
# for the kubelet's client certificate to /v1-k3s/client-kubelet.crt as user `node`, its name
# and password in the `K3s-Node-Name` and `K3s-Node-Password` headers (`getNodeNamedCrt`), and
# writes client-kubelet.crt/.key, server-ca.crt and kubelet.kubeconfig, which names the agent's
# load balancer on 127.0.0.1:6444, forwarding to its server (pkg/agent/loadbalancer; one server
# here). The kubelet then registers its Node as system:node:<name> (kubelet
# pkg/kubelet/kubelet_node_status.go, `registerWithAPIServer`, retried until it is taken).
# The server (pkg/server/handlers/handlers.go, `ClientKubeletCert`, `signAndSend`;
# pkg/nodepassword, `GetNodeAuthValidator`): a name seen before must come with the password
# whose hash it kept (the Secret <name>.node-password.k3s), else 403; a new name's is kept; the
# certificate (CN system:node:<name>, O system:nodes, client auth), for the request's key, is
# signed by the client CA and sent with the CA certificate.
# The API on the same port (kube-apiserver as k3s runs it: --anonymous-auth=false,
# --authorization-mode=Node,RBAC, the NodeRestriction admission plugin): a request without a
# client certificate is 401; a certificate's CN is the user, its O the groups; system:masters
# may do anything; a node (user system:node:<name> in group system:nodes, kubernetes
# pkg/auth/nodeidentifier/default.go, `NodeIdentity`) may get and create nodes and update or
# patch nodes and nodes/status (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go,
# `NodeRules`, which the node authorizer applies), but NodeRestriction refuses a create, update,
# patch or delete of any Node but its own (plugin/pkg/admission/noderestriction/admission.go,
# `admitNode`: `node %q is not allowed to modify node %q`); anyone else is refused by RBAC. A
# PATCH is a JSON merge patch (RFC 7386: what `kubectl annotate` sends, kubectl
# pkg/cmd/annotate/annotate.go, `types.MergePatchType`); the main resource keeps its status and
# the status subresource changes nothing else (pkg/registry/core/node/strategy.go,
# `PrepareForUpdate`). Nodes and node passwords live in the server's memory.
NODE_PASSWORD = Path("/etc/rancher/node/password")
AGENT_DIR = Path("/var/lib/rancher/k3s/agent")
LOAD_BALANCER = ("127.0.0.1", 6444)
NODES_GROUP = "system:nodes"
NODE_USER = "system:node:"
MASTERS = "system:masters"
MERGE_PATCH = "application/merge-patch+json"
# The taint a kubelet with cloud-provider=external registers with, until the cloud controller
# has initialised the node (kubelet_node_status.go, `initialNode`).
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
NODE_PATH = re.compile(r"/api/v1/nodes(?:/([^/]+)(/status)?)?")
PASSWORD_REJECTED = (
    "Node password rejected, duplicate hostname or contents of '/etc/rancher/node/password' may "
    "not match server node-passwd entry, try enabling a unique node name with the --with-node-id "
    "flag"
)


def sign_client_certificate(
    ca: CertificateAuthority, public_key: Any, user: str, groups: list[str]
) -> str:
    """A client certificate for `public_key`: CN `user`, O `groups`, client auth, signed by
    `ca` (a year, as k3s' leaves)."""
    ca_key = serialization.load_pem_private_key(ca.key_pem.encode(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.encode()).subject
    now = datetime.datetime.now(datetime.UTC)
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _status(code: int, reason: str, message: str) -> Reply:
    """A Kubernetes Status answer."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
    return code, json.dumps(body).encode(), "application/json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: an object's members merged in, a null removes one, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class NodeApi:
    """The supervisor's kubelet certificates and the API's Nodes (the section's rules)."""

    def __init__(self, client_ca: CertificateAuthority) -> None:
        self.client_ca = client_ca
        self.nodes: dict[str, dict[str, Any]] = {}
        self.passwords: dict[str, str] = {}  # node name -> sha256 of its password
        self.lock = threading.Lock()

    def kubelet_certificate(self, request: BaseHTTPRequestHandler) -> Reply:
        name = request.headers.get("K3s-Node-Name", "")
        password = request.headers.get("K3s-Node-Password", "")
        if not name or not password:
            return 400, b"header node name and node password not set"
        digest = hashlib.sha256(password.encode()).hexdigest()
        with self.lock:
            if self.passwords.setdefault(name, digest) != digest:
                say(f"kubelet certificate for {name}: refused, {PASSWORD_REJECTED}")
                return 403, PASSWORD_REJECTED.encode()
        length = int(request.headers.get("Content-Length") or 0)
        csr = x509.load_der_x509_csr(request.rfile.read(length))
        cert = sign_client_certificate(
            self.client_ca, csr.public_key(), NODE_USER + name, [NODES_GROUP]
        )
        say(f"kubelet certificate issued to {NODE_USER}{name}")
        return 200, (cert + self.client_ca.cert_pem).encode()

    def respond(self, request: BaseHTTPRequestHandler) -> Reply:
        answer = self._answer(request)
        assert answer is not None
        user = _user(request)
        say(f"api: {user[0] if user else 'anonymous'} {request.command} {request.path}: "
            f"{answer[0]}")  # fmt: skip
        return answer

    def _answer(self, request: BaseHTTPRequestHandler) -> Reply:
        user = _user(request)
        if user is None:
            return _status(401, "Unauthorized", "Unauthorized")
        path = urllib.parse.urlsplit(request.path).path
        found = NODE_PATH.fullmatch(path)
        verbs = {"GET": "get", "POST": "create", "PATCH": "patch"}
        if found is None or request.command not in verbs:
            return _status(404, "NotFound", f"the server could not find {path}")
        name, status = found[1], found[2]
        verb = verbs[request.command]
        length = int(request.headers.get("Content-Length") or 0)
        body = json.loads(request.rfile.read(length) or b"null")
        if verb == "create":
            name = str(((body or {}).get("metadata") or {}).get("name", ""))
        refusal = _authorize(user, verb, name, status is not None)
        if refusal is not None:
            return refusal
        with self.lock:
            if verb == "create":
                if name in self.nodes:
                    return _status(409, "AlreadyExists", f'nodes "{name}" already exists')
                body["metadata"]["uid"] = str(uuid.uuid4())
                self.nodes[name] = body
                return 201, json.dumps(body).encode(), "application/json"
            if name not in self.nodes:
                return _status(404, "NotFound", f'nodes "{name}" not found')
            if verb == "patch":
                kind = request.headers.get("Content-Type", "").split(";")[0]
                if kind != MERGE_PATCH:
                    return _status(415, "UnsupportedMediaType", f"{kind} is not supported here")
                node = self.nodes[name]
                merged = merge_patch(node, body)
                if status:
                    merged = {**node, "status": merged.get("status", {})}
                else:
                    merged["status"] = node.get("status", {})
                self.nodes[name] = merged
            return 200, json.dumps(self.nodes[name]).encode(), "application/json"


def _user(request: BaseHTTPRequestHandler) -> tuple[str, list[str]] | None:
    """The client certificate's CN and O's (verified against the client CA by the TLS
    handshake), or None without one."""
    peer = request.connection.getpeercert()
    if not peer:
        return None
    fields = [entry for rdn in peer["subject"] for entry in rdn]
    names = [value for key, value in fields if key == "commonName"]
    return (names[0] if names else "", [value for key, value in fields
                                        if key == "organizationName"])  # fmt: skip


def _authorize(user: tuple[str, list[str]], verb: str, name: str, status: bool) -> Reply:
    """None if `user` may `verb` node `name` (its status if `status`), else the refusal."""
    who, groups = user
    if MASTERS in groups:
        return None
    resource = "nodes/status" if status else "nodes"
    if NODES_GROUP in groups and who.startswith(NODE_USER):
        if status and verb not in ("get", "patch"):
            return _status(403, "Forbidden", f'User "{who}" cannot {verb} resource "{resource}"')
        own = who.removeprefix(NODE_USER)
        if verb != "get" and name != own:
            return _status(403, "Forbidden", f'nodes "{name}" is forbidden: node "{own}" is not '
                           f'allowed to modify node "{name}"')  # fmt: skip
        return None
    return _status(403, "Forbidden", f'{resource} "{name}" is forbidden: User "{who}" cannot '
                   f'{verb} resource "{resource}" in API group "" at the cluster scope')


def node_password() -> str:
    """The agent's node password, made as k3s makes it when the file is missing."""
    if not NODE_PASSWORD.exists():
        NODE_PASSWORD.parent.mkdir(parents=True, exist_ok=True)
        NODE_PASSWORD.write_text(os.urandom(16).hex() + "\n")
        NODE_PASSWORD.chmod(0o600)
        say(f"node password generated in {NODE_PASSWORD}")
    return NODE_PASSWORD.read_text().strip()


def load_balancer(server: str) -> None:
    """The agent's load balancer: 127.0.0.1:6444 forwarding every connection to `server`."""
    target = urllib.parse.urlsplit(server)
    upstream = (str(target.hostname), target.port or 6443)
    listener = socket.create_server(LOAD_BALANCER)

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            try:
                remote = socket.create_connection(upstream, timeout=10)
            except OSError:
                client.close()
                continue
            remote.settimeout(None)
            for ends in ((client, remote), (remote, client)):
                threading.Thread(target=pipe, args=ends, daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    say(f"Running load balancer {LOAD_BALANCER[0]}:{LOAD_BALANCER[1]} -> "
        f"[{upstream[0]}:{upstream[1]}]")  # fmt: skip


def kubelet_credentials(server: str, token: str, name: str) -> bool:
    """The kubelet's client certificate from the supervisor and its kubeconfig; False if the
    server refuses them."""
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NODE_USER + name)]))
        .sign(key, hashes.SHA256())
    )
    headers = {"K3s-Node-Name": name, "K3s-Node-Password": node_password()}
    try:
        bundle = join(server, token, "/v1-k3s/client-kubelet.crt",
                      request.public_bytes(serialization.Encoding.DER), headers)  # fmt: skip
        cacerts = join(server, token, "/cacerts")
    except JoinRefused as refusal:
        say(f"kubelet certificate refused by {server}: {refusal}")
        return False
    AGENT_DIR.mkdir(parents=True, exist_ok=True)
    (AGENT_DIR / "server-ca.crt").write_bytes(cacerts)
    (AGENT_DIR / "client-kubelet.crt").write_bytes(bundle)
    (AGENT_DIR / "client-kubelet.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ))  # fmt: skip
    (AGENT_DIR / "client-kubelet.key").chmod(0o600)
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {
            "server": f"https://{LOAD_BALANCER[0]}:{LOAD_BALANCER[1]}",
            "certificate-authority": str(AGENT_DIR / "server-ca.crt")}}],
        "users": [{"name": "user", "user": {
            "client-certificate": str(AGENT_DIR / "client-kubelet.crt"),
            "client-key": str(AGENT_DIR / "client-kubelet.key")}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "user"}}],
    }  # fmt: skip
    Path(KUBELET_KUBECONFIG).write_text(yaml.safe_dump(kubeconfig))
    say(f"kubelet credentials for {NODE_USER}{name} in {KUBELET_KUBECONFIG}")
    return True


def kube_request(
    kubeconfig: Path, method: str, path: str, body: Any = None, kind: str = "application/json"
) -> tuple[int, Any]:
    """One API request as the kubeconfig's user, trusting its CA; (status, parsed answer)."""
    document = yaml.safe_load(kubeconfig.read_text())
    cluster = document["clusters"][0]["cluster"]
    user = document["users"][0]["user"]
    context = ssl.create_default_context(cafile=cluster["certificate-authority"])
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{cluster['server']}{path}", data=data, method=method,
                                     headers={"Content-Type": kind})  # fmt: skip
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _taint(text: str) -> dict[str, str]:
    """`key[=value]:Effect`, as node-taint takes it."""
    rest, _, effect = text.rpartition(":")
    key, _, value = rest.partition("=")
    return {"key": key, **({"value": value} if value else {}), "effect": effect}


def register_node(config: dict[str, Any], name: str) -> None:
    """The kubelet's registration of its Node, retried until the API takes it (or has it)."""
    arguments = dict(str(a).partition("=")[::2] for a in _listed(config.get("kubelet-arg", [])))
    labels = dict(str(label).partition("=")[::2] for label in _listed(config.get("node-label", [])))
    taints = [_taint(str(taint)) for taint in _listed(config.get("node-taint", []))]
    if arguments.get("cloud-provider") == "external":
        taints.append({"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"})
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"providerID": arguments.get("provider-id", ""), "taints": taints},
        "status": {"addresses": [{"type": "InternalIP", "address": advertised(config)},
                                 {"type": "Hostname", "address": name}]},
    }  # fmt: skip
    while True:
        try:
            code, answer = kube_request(Path(KUBELET_KUBECONFIG), "POST", "/api/v1/nodes", node)
        except OSError as error:
            code, answer = 0, {"message": str(error)}
        if code in (201, 409):
            say(f"Successfully registered node {name}")
            return
        say(f"Unable to register node {name} with API server: {code} {answer.get('message')}")
        time.sleep(2)


def kubectl_as(kubeconfig: Path, arguments: list[str]) -> int:
    """`k3s kubectl --kubeconfig FILE annotate [--overwrite] node NAME KEY=VALUE`, as kubectl
    does it: GET the node, then PATCH a merge patch of the annotation."""
    words = [a for a in arguments if a != "--overwrite"]
    if words[:2] != ["annotate", "node"] or len(words) != 4:
        say(f"stand-in kubectl: not modelled: {arguments!r}")
        return 2
    name, (key, _, value) = words[2], words[3].partition("=")
    try:
        code, node = kube_request(kubeconfig, "GET", f"/api/v1/nodes/{name}")
        if code == 200:
            current = (node["metadata"].get("annotations") or {}).get(key)
            if current not in (None, value) and "--overwrite" not in arguments:
                say(f"error: --overwrite is false but found the following declared "
                    f"annotation(s): '{key}' already has a value ({current})")  # fmt: skip
                return 1
            patch = {"metadata": {"annotations": {key: value}}}
            code, node = kube_request(kubeconfig, "PATCH", f"/api/v1/nodes/{name}", patch,
                                      MERGE_PATCH)  # fmt: skip
    except OSError as error:
        say(f"The connection to the server was refused: {error}")
        return 1
    if code != 200:
        say(f"Error from server ({node.get('reason')}): {node.get('message')}")
        return 1
    say(f"node/{name} annotated")
    return 0


# --- the datastore (issue 22: SQLite to etcd, a first control plane that joins) ----------
# What k3s keeps in its data dir (k3s pkg/etcd/etcd.go: `sqliteFile`, `etcdDBDir`, `walDir`)
# and the order in which it decides where its datastore comes from (k3s pkg/cluster/
# bootstrap.go `shouldBootstrapLoad`, pkg/etcd/etcd.go `Start`, read at 001bb93): a member
# whose WAL directory exists starts from it, whatever `cluster-init` and `server` say; else, with
# `server`, it joins that server's cluster; else, with `cluster-init`, it starts a new one
# (`newCluster`), then moves what a SQLite datastore in the data dir holds into etcd
# (`migrateFromSQLite`: every key under /registry/, then state.db renamed state.db.migrated).
# The stand-in's etcd is a JSON file beside the WAL directory: the cluster's id, its members
# and its keys. A joiner copies them from the server it joins (`/db/info`, which in k3s lists
# the members; etcd's replication, which brings the keys, is not simulated otherwise).
# A member whose store no longer lists it was removed from the cluster: etcd, started from its
# WAL, finds itself removed, k3s writes `tombstone` in etcd's data dir and stops (k3s
# pkg/daemons/executor, `ETCD`); at the next start, k3s moves `db/etcd` aside before anything
# else (pkg/etcd/etcd.go, `Register`, `backupDirWithRetention`: `etcd-old-<unix time>`) and
# decides as on a blank volume.
DATA_DIR = Path("/var/lib/rancher/k3s/server")
SQLITE = DATA_DIR / "db/state.db"
ETCD_DIR = DATA_DIR / "db/etcd"
WAL = ETCD_DIR / "member/wal"
TOMBSTONE = ETCD_DIR / "tombstone"
STORE = DATA_DIR / "db/etcd/member/standin-store.json"
MIGRATED = "/registry/"


def kine_keys(path: Path, prefix: str) -> dict[str, str]:
    """What kine lists under `prefix` from its SQLite table: each key's newest row, left out
    when that row marks it deleted (kine pkg/drivers/generic/generic.go, its list query)."""
    with contextlib.closing(sqlite3.connect(path)) as database:
        rows = database.execute(
            "SELECT name, value, deleted FROM kine WHERE id IN "
            "(SELECT MAX(id) FROM kine WHERE substr(name, 1, ?) = ? GROUP BY name)",
            (len(prefix), prefix),
        ).fetchall()
    return {name: bytes(value).decode() for name, value, deleted in rows if not deleted}


def write_store(store: dict[str, Any]) -> None:
    WAL.mkdir(parents=True, exist_ok=True)
    STORE.write_text(json.dumps(store, sort_keys=True))


def db_info() -> bytes:
    return STORE.read_bytes() if STORE.exists() else b"{}"


def member_name(config: dict[str, Any]) -> str:
    """k3s names an etcd member after its node and 8 random hex digits (etcd.go `setName`)."""
    return f"{config['node-name']}-{uuid.uuid4().hex[:8]}"


def set_aside_removed() -> None:
    """k3s' `Register`, before etcd starts: a tombstone moves the data dir aside."""
    if TOMBSTONE.exists():
        aside = ETCD_DIR.rename(ETCD_DIR.with_name(f"etcd-old-{int(time.time())}"))
        say(f"tombstone file has been detected, removing data dir to rejoin the cluster: {aside}")


def start_datastore(config: dict[str, Any], token: str) -> bool:
    """Start, join or create the embedded etcd as k3s decides; False if a join is refused
    or the member was removed. Its store, not its WAL, says whether it holds a datastore:
    the restore section's `etcd_start`, run before, makes a new member's WAL and name."""
    if STORE.exists():
        store = json.loads(STORE.read_text())
        if store["member"] not in store["members"]:
            TOMBSTONE.write_bytes(b"")
            say(f"etcd: member {store['member']} has been removed from the cluster; tombstone "
                "written: restart k3s to rejoin the cluster")
            return False
        say(f"etcd: starting member {store['member']} of cluster {store['cluster']} from its "
            f"datastore ({len(store['keys'])} keys); cluster-init and server ignored")
        return True
    if "server" in config:
        server = str(config["server"])
        answer = register(server, token, "/v1-k3s/server-bootstrap")
        if answer is None:
            return False
        say(f"joined {server} as a server: {answer.decode()}")
        cluster = json.loads(join(server, token, "/db/info"))
        # k3s refuses to add a member while another one has its node name (etcd.go `join`):
        # a server that lost its data joins once its old member is removed.
        if config["node-name"] in (name.rpartition("-")[0] for name in cluster["members"]):
            say("etcd: ETCD join failed: duplicate node name found, please use a unique name "
                "for this node")
            return False
        member = member_name(config)
        write_store({**cluster, "member": member, "members": [*cluster["members"], member]})
        say(f"etcd: member {member} joined cluster {cluster['cluster']} "
            f"({len(cluster['keys'])} keys)")
        return True
    if config.get("cluster-init") is True:
        say("etcd: cluster-init, starting a new cluster")
        member = member_name(config)
        store = {"cluster": uuid.uuid4().hex, "member": member, "members": [member], "keys": {}}
        write_store(store)
        say(f"etcd: cluster {store['cluster']} started by member {member}")
        if SQLITE.exists():
            say("Migrating content from sqlite to etcd")
            store["keys"] = kine_keys(SQLITE, MIGRATED)
            write_store(store)
            migrated = SQLITE.rename(SQLITE.with_name(SQLITE.name + ".migrated"))
            say(f"etcd: {len(store['keys'])} keys under {MIGRATED} migrated from {SQLITE}, "
                f"now {migrated}")
    return True


def agent(config: dict[str, Any]) -> int:
    server = str(config["server"])
    answer = register(server, str(config["token"]), "/v1-k3s/config")
    if answer is None:
        return 1
    say(f"joined {server}: {answer.decode()}")
    # k3s names the node after the host unless node-name says otherwise.
    name = str(config.get("node-name") or socket.gethostname())
    load_balancer(server)
    if not kubelet_credentials(server, str(config["token"]), name):
        return 1
    register_node(config, name)
    notify_ready()
    while True:
        time.sleep(3600)


def kubectl(config: dict[str, Any], arguments: list[str]) -> int:
    """`k3s kubectl`: with `--kubeconfig`, as that kubeconfig's user (`kubectl_as`); else
    refused while the server's API does not answer (as kubectl is), else done; what it was
    asked is logged."""
    if arguments[:1] == ["--kubeconfig"]:
        return kubectl_as(Path(arguments[1]), arguments[2:])
    address = (advertised(config), 6443)
    try:
        socket.create_connection(address, timeout=2).close()
    except OSError as error:
        say(f"kubectl: the connection to the server {address[0]}:6443 was refused: {error}")
        return 1
    say("kubectl " + " ".join(arguments) + ": done")
    return 0


# --- etcd restore (issue 23): the reset and the rejoin ------------------------------------
# What k3s does with its etcd data directory when raya restores a snapshot (k3s-io/k3s
# pkg/etcd/etcd.go, `Reset`, `Start`, `IsInitialized`; k3s-io/docs docs/cli/etcd-snapshot.md,
# "Restoring Snapshots"), reduced to what a test can read back: which snapshot the datastore
# was reset to (its sha256), and whether a server started from its own member data, as the
# reset member, or with none (a new member). The reset runs outside systemd (raya runs it
# over SSH): its lines go to the journal too, as k3s', so one log holds every step.

DB = Path("/var/lib/rancher/k3s/server/db")
ETCD = DB / "etcd"
RESET_FLAG = DB / "reset-flag"  # k3s' guard against a second reset; removed by a normal start
RESTORED = ETCD / "restored-from"  # the stand-in's mark: the snapshot's sha256


def record(text: str) -> None:
    """`say`, and the same line in the node's journal as k3s' (systemd's native protocol)."""
    say(text)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as journal:
        journal.sendto(
            f"MESSAGE={text}\nSYSLOG_IDENTIFIER=k3s\n".encode(), "/run/systemd/journal/socket"
        )


def _flags(arguments: list[str]) -> dict[str, str]:
    """`--name=value` and `--name` (true) flags, as urfave/cli reads them."""
    flags = {}
    for argument in arguments:
        name, equals, value = argument.removeprefix("--").partition("=")
        flags[name] = value if equals else "true"
    return flags


def _true(value: Any) -> bool:
    return str(value).lower() in ("true", "1")


def cluster_reset(arguments: list[str]) -> int:
    """`k3s server --cluster-reset [--cluster-reset-restore-path=P]`. A command-line flag wins
    over config.yaml's value (pkg/configfilearg: the file's values go before the command
    line's). A server URL set anywhere, config.yaml or a drop-in, refuses the reset before
    anything else (pkg/cli/server/server.go, `run`: "cannot perform cluster-reset while
    server URL is set"; k3s-io/k3s#8488). With `etcd-s3` true, P is a name in the bucket,
    fetched with the S3 settings of the command line; given only `etcd-s3-config-secret`, k3s
    cannot read the Secret during a reset (no API server: pkg/etcd/s3/s3.go `Start` keeps no
    core client under ClusterReset, config_secret.go `getConfigFromSecret` then fails) and
    the reset fails. Otherwise P is a local file, which must exist: the old data moves to
    `etcd-old-<time>`, the snapshot's datastore becomes a cluster of a new id with this
    server as its only member (etcd's snapshot restore), `reset-flag` is written and k3s
    exits. Before it exits, k3s reads its bootstrap data back from the restored datastore
    under the key of its own token (pkg/etcd/etcd.go, `Reset`, its `rebootstrap`:
    pkg/cluster/storage.go, `storageBootstrap`, `getBootstrapKeyFromStorage`; the key
    `/bootstrap/<keyHash>` of pkg/cluster/encrypt.go): a snapshot of a cluster with another
    token holds none, and k3s exits 1, "bootstrap data already found and encrypted with
    different token"."""
    record("k3s " + " ".join(arguments))
    config = load_config(record)
    flags = {**{k: str(v) for k, v in config.items()}, **_flags(arguments[1:])}
    if flags.get("server"):
        record("cannot perform cluster-reset while server URL is set - remove server from "
               "configuration before resetting")  # fmt: skip
        return 1
    address = (advertised(config), 6443)
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError:
            record(f"listen tcp {address[0]}:6443: bind: address already in use")
            return 1
    if RESET_FLAG.exists():
        record("cluster-reset was successfully performed, please remove the cluster-reset flag "
               f"and start k3s normally; to reset again, first delete {RESET_FLAG}")  # fmt: skip
        return 1
    path = flags.get("cluster-reset-restore-path", "")
    digest = ""
    if path and _true(flags.get("etcd-s3", "false")):
        given = [k for k in _flags(arguments[1:]) if k.startswith("etcd-s3-")]
        secret = flags.get("etcd-s3-config-secret")
        if secret and not given:
            record(f"failed to get config from etcd-s3-config-secret {secret!r}: failed to get "
                   "etcd S3 config secret: core not ready")  # fmt: skip
            return 1
        record("stand-in: fetching the snapshot from S3 is not modelled")
        return 2
    if path:
        snapshot = Path(path)
        if not snapshot.is_file():
            record(f"etcd: snapshot path does not exist or is not a file: {path}")
            return 1
        data = snapshot.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        record(f"etcd: restoring snapshot {path} (sha256 {digest})")
        if ETCD.exists():
            ETCD.rename(DB / f"etcd-old-{int(time.time())}")
        restored = json.loads(data)
        member = _new_member(str(config["node-name"]))
        write_store({"cluster": uuid.uuid4().hex, "member": member, "members": [member],
                     "keys": restored["keys"]})  # fmt: skip
        record(f"etcd: cluster {json.loads(STORE.read_text())['cluster']} restored with "
               f"{len(restored['keys'])} keys, member {member} alone")  # fmt: skip
        if restored["bootstrap"] != key_hash(str(config["token"])):
            record("starting kubernetes: preparing server: bootstrap data already found and "
                   "encrypted with different token")  # fmt: skip
            return 1
    else:
        _new_member(str(config["node-name"]))
    RESTORED.write_text(digest)
    RESET_FLAG.touch()
    record("Managed etcd cluster membership has been reset, restart without --cluster-reset "
           "flag now. Backup and delete ${datadir}/server/db on each peer etcd server and "
           "rejoin the nodes.")  # fmt: skip
    return 0


def key_hash(token: str) -> str:
    """Where k3s keeps its bootstrap data in the datastore, `/bootstrap/<keyHash>`: the
    first 12 hex digits of the sha256 of the token's secret (pkg/cluster/encrypt.go,
    `keyHash`; pkg/cluster/storage.go, `normalizeToken`: the secret of a full token)."""
    return hashlib.sha256(token.rpartition(":")[2].encode()).hexdigest()[:12]


def _new_member(node: str, started: bool = True) -> str:
    """A fresh member's data: its name (node name and 8 hex digits), written by k3s before
    etcd starts (`Register`, `setName`), and its WAL directory once etcd has `started`: a
    server whose join is refused has none (the datastore section writes it on a join)."""
    if started:
        (ETCD / "member" / "wal").mkdir(parents=True, exist_ok=True)
    ETCD.mkdir(parents=True, exist_ok=True)
    name = f"{node}-{os.urandom(4).hex()}"
    (ETCD / "name").write_text(name)
    return name


def etcd_start(config: dict[str, Any]) -> None:
    """What a starting server's etcd finds: the reset member (reset-flag, then removed, as a
    normal start does), its own member data (a WAL), or nothing: then a new member."""
    if RESET_FLAG.exists():
        RESET_FLAG.unlink()
        say(f"etcd: the reset member {(ETCD / 'name').read_text()}, restored from "
            f"{RESTORED.read_text() or 'no snapshot'}; reset-flag removed")  # fmt: skip
    elif (ETCD / "member" / "wal").is_dir():
        say(f"etcd: existing member data: restarting as {(ETCD / 'name').read_text()}")
    else:
        role = "a new cluster" if config.get("cluster-init") is True else "a new member"
        name = _new_member(str(config["node-name"]), started=False)
        say(f"etcd: no member data: starting as {role}, {name}")


def main(arguments: list[str]) -> int:
    if "--cluster-reset" in arguments:
        return cluster_reset(arguments)
    say("k3s " + " ".join(arguments))
    config = load_config()
    say(f"{PRIVATE_INTERFACE} addresses at start: {' '.join(private_addresses()) or 'none'}")
    if arguments[:1] == ["server"]:
        set_aside_removed()
        etcd_start(config)
        return serve(config)
    if arguments[:1] == ["agent"]:
        return agent(config)
    if arguments[:1] == ["kubectl"]:
        return kubectl(config, arguments[1:])
    say(f"unknown role {arguments!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
