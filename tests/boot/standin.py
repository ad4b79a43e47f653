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
import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import uuid
from collections.abc import Callable
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
    names = [str(name) for name in config.get("tls-san", [])]
    serving = serving_certificate(ca, Path(tempfile.mkdtemp()), address, names)
    cacerts = (TLS / "server-ca.crt").read_bytes()
    # k3s keeps the secret of a full token as the cluster's (pkg/cluster/storage.go).
    secrets = token.rpartition(":")[2], str(config["agent-token"])
    name = str(config["node-name"])
    bodies = {"/db/info": db_info}
    with k3s_like_server(serving, cacerts, *secrets, (address, 6443), name, bodies) as url:
        say(f"serving {url}")
        notify_ready()
        while True:
            time.sleep(3600)


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
    notify_ready()
    while True:
        time.sleep(3600)


def kubectl(config: dict[str, Any], arguments: list[str]) -> int:
    """`k3s kubectl`: refused while the server's API does not answer (as kubectl is),
    else done; what it was asked is logged."""
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
