"""`raya backups`, `raya backup` and `raya restore` end to end: the deployment's outputs, a
real S3 implementation on 127.0.0.1, and a stand-in for k3s on the control plane reached
through raya's remote runner."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import secrets
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from raya.cloud import deploy
from raya.cloud.kubeconfig import api_client
from raya.cloud.program.backups import BUCKET_ROLES
from raya.commands import backups as commands
from raya.errors import RayaError
from raya.model.project import load_cluster
from raya.operate import backups as bk
from raya.operate import status as st
from tests.cloud.program import fakes
from tests.cloud.program.engine import deployed_cloud
from tests.cloud.program.mocks import Run, reveal
from tests.cloud.program.test_program import SERVER, provider_mocks, run
from tests.nodes.tools import ignition_files
from tests.operate import kube_api as ka
from tests.operate.s3 import ObjectStorage, k3s_upload
from tests.operate.test_status import LABELS, VERSION, addons_installed, cluster_list, listing
from tests.runner import invoke
from tests.support import http_server

SNAPSHOTS = "/var/lib/rancher/k3s/server/db/snapshots"
DB = "/var/lib/rancher/k3s/server/db"
CONFIG = "/etc/rancher/k3s/config.yaml"
JOIN_CONFIG = "/etc/rancher/k3s/raya-join.yaml"  # what the first's guard joins with
# The ConfigMaps the drills write before the snapshot, and after it.
BEFORE, AFTER = 120, 30


def key_hash(token: str) -> str:
    """k3s' key for its bootstrap data in the datastore, `/bootstrap/<keyHash>`: the first
    12 hex digits of the sha256 of the token's secret (k3s-io/k3s pkg/cluster/encrypt.go,
    `storageKey`, `keyHash`; pkg/cluster/storage.go, `normalizeToken`: the secret of a full
    `K10<ca hash>::server:<secret>` token)."""
    return hashlib.sha256(token.rpartition(":")[2].encode()).hexdigest()[:12]


def snapshot_bytes(join_secret: str, objects: Mapping[str, Any]) -> bytes:
    """An etcd snapshot as the stand-in reads it: the datastore's keys, k3s' bootstrap data
    stored under the key of the token it was encrypted with, and the API's objects."""
    return json.dumps({"bootstrap": key_hash(join_secret), "objects": dict(objects)},
                      sort_keys=True).encode()  # fmt: skip


@dataclass
class K3sServer:
    """k3s on one server, its files as k3s reads them (config.yaml from the node's rendered
    Ignition, the drop-ins of config.yaml.d) and its etcd data (`member`: the id of the
    cluster its member data belongs to; None: no data, as on a blank volume)."""

    name: str
    address: str
    config: dict[str, Any]
    server_id: int = 0  # its Hetzner server's: the provider ID its kubelet registers with
    dropins: dict[str, dict[str, Any]] = field(default_factory=dict)  # file name -> values
    running: bool = True
    member: str | None = "original"
    tombstone: bool = False
    files: dict[str, bytes] = field(default_factory=dict)

    def merged(self, flags: Mapping[str, str] | None = None) -> dict[str, Any]:
        """config.yaml, then the drop-ins in name order (`.yaml` and `.yml`), then the
        command line: a later value replaces an earlier one (k3s-io/k3s
        pkg/configfilearg/parser.go, `readConfigFile`, `dotDFiles`; `Parse` puts the file's
        flags before the command line's)."""
        merged = dict(self.config)
        for name in sorted(self.dropins):
            if name.lower().endswith((".yaml", ".yml")):
                merged.update(self.dropins[name])
        return {**merged, **(flags or {})}


@dataclass
class Stand:
    """k3s on every control plane, as raya's restore drives it over SSH, written from k3s'
    source (k3s-io/k3s) and docs:
    - `k3s etcd-snapshot save` needs the running server (it asks its etcd) and uploads
      `on-demand-<node>-<unix seconds>` with the token hash (pkg/etcd/snapshot.go, s3.go);
      the snapshot holds the datastore: the API's objects and k3s' bootstrap data under the
      key of the token (pkg/cluster/storage.go, `Save`).
    - `k3s server --cluster-reset`: refused while k3s runs on the node (its etcd holds the
      data directory); refused while a server URL is set in the merged config, drop-ins
      included (pkg/cli/server/server.go, `run`: "cannot perform cluster-reset while server
      URL is set - remove server from configuration before resetting"); with `etcd-s3` true
      (the servers' config) and no `--etcd-s3=false`, the S3 settings come from the config
      Secret, which fails during a reset (pkg/etcd/s3/config_secret.go, docs "The S3 config
      Secret cannot be used when restoring a snapshot"); the restore path must be a file
      (pkg/etcd/etcd.go, `Reset`). Restored, etcd runs as a one-member cluster of a new id and
      k3s reconciles its bootstrap data with this server's token (`Reset`'s `rebootstrap`,
      pkg/cluster/storage.go `storageBootstrap`, `getBootstrapKeyFromStorage`): a snapshot
      whose bootstrap key is another token's fails, "bootstrap data already found and
      encrypted with different token", and k3s exits 1 (logrus.Fatal).
    - `systemctl start k3s` (a Type=notify unit: it returns once k3s is ready): a tombstone
      moves the etcd data aside first (pkg/etcd/etcd.go, `Register`); member data (a WAL)
      starts that member whatever `server` and `cluster-init` say (pkg/cluster/bootstrap.go,
      `shouldBootstrapLoad`), and fails against a cluster reset meanwhile (its peers hold
      another cluster id); none, with `server`, joins the cluster served at that URL with the
      token's secret, as a new member (pkg/etcd/etcd.go, `join`: `MemberAddAsLearner`; the
      etcd leader promotes it later, tests/operate/kube_api.py, section "etcd"); none and
      `cluster-init` alone starts a second, empty cluster (recorded in `split`).
    - `rm -rf <data dir>/server/db` removes the member data (docs: "delete ${datadir}/
      server/db on each peer etcd server and rejoin the nodes").
    The kubelet of a started server registers later (the API stand-in's `boot`)."""

    servers: dict[str, K3sServer]
    registration: str  # the registration address (the balancer's with several)
    token: str  # the cluster's token secret, its bootstrap data's key
    cluster: str = "original"  # the id of the cluster the members run
    api: ka.Cluster | None = None
    s3: tuple[str, str, str] = ("", "", "")  # endpoint, bucket, folder
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    split: list[str] = field(default_factory=list)

    def serving(self, url: str) -> K3sServer | None:
        """The running member of the cluster that answers at `url`."""
        address = url.removeprefix("https://").rsplit(":", 1)[0]
        candidates = (
            list(self.servers.values())
            if address == self.registration
            else [s for s in self.servers.values() if s.address == address]
        )
        return next((s for s in candidates if s.running and s.member == self.cluster), None)

    def __call__(
        self, entry: Mapping[str, Any], command: Sequence[str], stdin: IO[bytes] | None
    ) -> tuple[int, str]:
        node = str(entry["_node"])
        server = self.servers[node]
        argv = tuple(command)
        self.calls.append((node, argv))
        if argv == ("k3s", "etcd-snapshot", "save"):
            if not server.running:
                return 1, "etcd-snapshot: failed to get etcd status: connection refused"
            name = self.snapshot(server, "on-demand")
            return 0, f"Snapshot {name} saved."
        if argv == ("systemctl", "stop", "k3s"):
            if server.running and self.api:
                self.api.server_deleted(node)
            server.running = False
            return 0, ""
        if argv == ("systemctl", "start", "k3s"):
            return self.start(server)
        if argv[:3] == ("install", "-D", "-m") and stdin is not None:
            server.files[argv[-1]] = stdin.read()
            return 0, ""
        if argv[:2] == ("sh", "-c"):
            digest, path = shlex.split(argv[2].split("|")[0].removeprefix("echo "))[0].split("  ")
            ok = hashlib.sha256(server.files.get(path, b"")).hexdigest() == digest
            return (0, "") if ok else (1, f"{path}: FAILED")
        if argv[:3] == ("k3s", "server", "--cluster-reset"):
            return self.reset(server, argv[3:])
        if argv == ("rm", "-rf", DB):
            server.member, server.tombstone = None, False
            return 0, ""
        if argv[:2] == ("rm", "-f") and argv[2].startswith(f"{CONFIG}.d/"):
            server.dropins.pop(argv[2].rsplit("/", 1)[1], None)
            return 0, ""
        return 127, f"stand-in: unexpected command {argv}"

    def snapshot(self, server: K3sServer, prefix: str) -> str:
        """`server`'s snapshot of the datastore, uploaded as k3s names and uploads it."""
        name = f"{prefix}-{server.name}-{int(time.time())}"
        objects = self.api.objects if self.api else {}
        k3s_upload(*self.s3, name, snapshot_bytes(self.token, objects), self.token)
        return name

    def scheduled_run(self) -> None:
        """The schedule's run: every running server takes its own snapshot and uploads it
        (pkg/etcd/snapshot.go, the cron job each server runs)."""
        for server in self.servers.values():
            if server.running:
                self.snapshot(server, "etcd-snapshot")

    def start(self, server: K3sServer) -> tuple[int, str]:
        if server.running:
            return 0, ""
        config = server.merged()
        if server.tombstone:
            server.member, server.tombstone = None, False  # etcd-old-<time>
        if server.member is not None and server.member != self.cluster:
            return 1, "etcd: request cluster ID mismatch: member has already been bootstrapped"
        if server.member is None and "server" in config:
            joined = self.serving(str(config["server"]))
            if joined is None:
                return 1, f"failed to get CA certs: {config['server']}: connection refused"
            if str(config["token"]).rpartition(":")[2] != self.token:
                return 1, "failed to validate token: invalid token"
            server.member = self.cluster
            if self.api and self.api.etcd:
                self.api.etcd.members.pop(server.name, None)  # back as a new member
        elif server.member is None:
            server.member = f"split-{server.name}"
            self.split.append(server.name)  # a cluster of its own, which no one else sees
            return 0, ""
        server.running = True
        if self.api:  # the kubelet of this server, back: it registers after the API's `boot`
            self.api.server_created(server.name, VERSION, server=server.server_id)
        return 0, ""

    def reset(self, server: K3sServer, arguments: tuple[str, ...]) -> tuple[int, str]:
        flags = dict(argument.removeprefix("--").partition("=")[::2] for argument in arguments)
        config = server.merged(flags)
        if server.running:
            return 1, "etcd: data directory is in use by the running k3s"
        if config.get("server"):
            return 1, ("cannot perform cluster-reset while server URL is set - remove server "
                       "from configuration before resetting")  # fmt: skip
        if str(config.get("etcd-s3")).lower() == "true":
            return 1, ('failed to get config from etcd-s3-config-secret "raya-etcd-s3": '
                       "failed to get etcd S3 config secret: core not ready")  # fmt: skip
        path = flags.get("cluster-reset-restore-path", "")
        if path not in server.files:
            return 1, f"etcd: snapshot path does not exist: {path}"
        snapshot = json.loads(server.files[path])
        if snapshot["bootstrap"] != key_hash(str(config["token"])):
            return 1, ("starting kubernetes: preparing server: bootstrap data already found and "
                       "encrypted with different token")  # fmt: skip
        self.cluster = f"restored-{secrets.token_hex(4)}"
        server.member, server.tombstone = self.cluster, False
        if self.api:
            self.api.objects = dict(snapshot["objects"])
            if self.api.etcd:
                etcd = self.api.etcd
                etcd.members = {server.name: etcd.members.get(server.name)
                                or ka.Member(f"{server.name}-{secrets.token_hex(4)}")}  # fmt: skip
        return 0, ("Managed etcd cluster membership has been reset, restart without "
                   "--cluster-reset flag now")  # fmt: skip


def rendered_config(deployed: Run, name: str, path: str = CONFIG) -> dict[str, Any]:
    """A file of the node's Ignition, as deployed, read as YAML."""
    files = ignition_files(reveal(deployed.of_type(SERVER)[name].inputs["userData"]).encode())
    loaded = yaml.safe_load(files[path])
    assert isinstance(loaded, dict)
    return loaded


def stand_for(deployed: Run, s3: tuple[str, str, str]) -> Stand:
    """Every control plane of the deployment running its cluster from its volume."""
    servers = deployed.outputs["servers"]
    control_planes = sorted((name for name in servers if name.startswith("control-plane")),
                            key=lambda name: (len(name), name))  # fmt: skip
    config = rendered_config(deployed, control_planes[0])
    registration = str(rendered_config(deployed, "agent-0")["server"])
    return Stand(
        {name: K3sServer(name, servers[name]["privateIp"], rendered_config(deployed, name),
                         int(servers[name]["serverId"]))
         for name in control_planes},
        registration.removeprefix("https://").rsplit(":", 1)[0],
        str(config["token"]).rpartition(":")[2],
        s3=s3,
    )  # fmt: skip


@pytest.fixture
def control_planes() -> int:
    """How many control planes the deployment has; tests parametrize it."""
    return 1


@pytest.fixture
def deployed(project: Path, control_planes: int) -> Run:
    if control_planes > 1:
        config = project / "Pulumi.prod.yaml"
        config.write_text(config.read_text() + f"  raya:controlPlanes: {control_planes}\n")
    return run(provider_mocks(), load_cluster(project, "prod"))


@pytest.fixture
def setup(
    deployed: Run, s3: ObjectStorage, monkeypatch: pytest.MonkeyPatch
) -> tuple[Stand, dict[str, Any]]:
    # A bucket of each test's own: the S3 server is shared by the session. The deployment's
    # key holds the writer's roles on it.
    bucket = f"commands-{secrets.token_hex(4)}"
    backups = {**deployed.outputs["backups"], "endpoint": s3.endpoint, "bucket": bucket}
    s3.client().create_bucket(Bucket=backups["bucket"])
    s3.writer(bucket, BUCKET_ROLES.values(), backups["accessKey"], backups["secretKey"])
    # The stand-in finds the node by the entry raya hands the runner.
    servers = {n: {**entry, "_node": n} for n, entry in deployed.outputs["servers"].items()}
    outputs = {**deployed.outputs, "backups": backups, "servers": servers}
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: outputs)
    stand = stand_for(deployed, (s3.endpoint, bucket, "raya"))
    monkeypatch.setattr(commands, "remote", stand)
    return stand, outputs


# The API stand-in's clock runs 20 times faster than the real one: a started server's kubelet
# registers after 30 simulated seconds, etcd's leader promotes a new member on its 15 s tick
# once it caught up (20 s), all within a few seconds of the test's time; a learner stays
# one tick (0.75 s here) at least, longer than raya's look at the API takes here.
PACE = 20.0


@pytest.fixture
def api(
    deployed: Run, setup: tuple[Stand, dict[str, Any]], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[ka.Cluster, str]]:  # fmt: skip
    """What `raya status` asks, answering for a healthy cluster: Hetzner's API, the zone's
    name servers, and the Kubernetes API (its nodes Ready, the add-ons installed, etcd's
    members), which the control planes' k3s serves (Stand); with the API's address."""
    stand, outputs = setup
    servers = outputs["servers"]
    listed = {
        name: fakes.hetzner_server(int(entry["serverId"]), name, "running", LABELS)
        for name, entry in servers.items()
    }
    hetzner = cluster_list(
        {
            f"/v1/servers/{entry['serverId']}": json.dumps({"server": listed[name]}).encode()
            for name, entry in servers.items()
        },
        listing(*listed.values()),
    )
    started = time.monotonic()
    nodes = {
        name: ka.node_object(name, VERSION, server=int(entry["serverId"]))
        for name, entry in servers.items()
    }
    state = ka.Cluster(nodes=nodes, clock=lambda: (time.monotonic() - started) * PACE,
                       boot=30.0)  # fmt: skip
    addons_installed(state)
    ka.Etcd.of(state, {name: server.address for name, server in stand.servers.items()})
    stand.api = state
    records = {entry["dnsName"]: [entry["ipv4"]] for entry in servers.values()}
    first = servers[next(iter(stand.servers))]
    records[first["dnsName"]] = [servers[name]["ipv4"] for name in stand.servers]
    delegations = {"raya.example.com.": list(deployed.outputs["nameServers"])}
    monkeypatch.setattr(st, "system_address_of", lambda name: ["127.0.0.1"])
    monkeypatch.setattr(st, "parent_name_servers", lambda zone: ["ns1.example.com."])
    monkeypatch.setattr(bk, "POLL", 0.1)
    monkeypatch.setenv("HCLOUD_TOKEN", "token")
    with (
        http_server(hetzner) as hcloud_url,
        fakes.dns_server(records, delegations) as (port, _),
        ka.deployment_api(state, deployed.resources, tmp_path) as api_url,
    ):  # fmt: skip
        monkeypatch.setenv("HCLOUD_ENDPOINT", f"{hcloud_url}/v1")
        monkeypatch.setattr(st, "DNS_PORT", port)
        for source in ("kubernetes_nodes", "kubernetes_control_planes", "kubernetes_addons",
                       "api_certificate"):
            monkeypatch.setattr(st, source, functools.partial(getattr(st, source), server=api_url))
        yield state, api_url


def configmaps(count: int, start: int = 0) -> dict[str, Any]:
    """ConfigMaps cm-<start>... as the API serves them, by path."""
    return {
        f"/api/v1/namespaces/default/configmaps/cm-{i}": {
            "kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": f"cm-{i}", "namespace": "default"}, "data": {"i": str(i)},
        }
        for i in range(start, start + count)
    }  # fmt: skip


def served(outputs: Mapping[str, Any], url: str, names: Sequence[str]) -> list[str]:
    """Which of the ConfigMaps `names` the API serves (read one by one, over its TLS, with the
    stack's kubeconfig)."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    api = api_client(outputs["kubeconfig"], url)
    found = []
    try:
        for name in names:
            try:
                k8s.CoreV1Api(api).read_namespaced_config_map(name, "default")
            except ApiException as error:
                assert error.status == 404, error
                continue
            found.append(name)
    finally:
        api.close()
    return found


def raya(project: Path, *args: str, input: str | None = None) -> Any:
    return invoke([*args, "--root", str(project)], input=input,
                              env={"COLUMNS": "200"})  # fmt: skip


def test_backup_then_backups_lists_it(project: Path, setup: tuple[Stand, dict[str, Any]]) -> None:
    stand, outputs = setup
    empty = raya(project, "backups")
    assert empty.exit_code == 0 and "no snapshot in s3://" in empty.output
    taken = raya(project, "backup")
    assert taken.exit_code == 0, taken.output
    name, size = taken.stdout.split()[:2]
    # What the stand-in uploaded: an empty datastore's keys, 44 bytes.
    assert name.startswith("on-demand-control-plane-") and size == "44"
    assert stand.calls == [("control-plane", ("k3s", "etcd-snapshot", "save"))]
    listed = raya(project, "backups")
    assert listed.exit_code == 0 and name in listed.stdout and "44 B" in listed.stdout
    assert outputs["backups"]["secretKey"] not in listed.output + taken.output


def test_backups_lists_by_control_plane_with_each_ones_newest_first(
    project: Path, setup: tuple[Stand, dict[str, Any]], deployed: Run
) -> None:
    """Three control planes: each one's snapshots together, its newest first with its age; one
    with none says so; a node that is no longer a control plane comes last, still listed."""
    with (project / "Pulumi.prod.yaml").open("a") as stack_file:
        stack_file.write('  raya:controlPlanes: "3"\n')
    _, outputs = setup
    backups = outputs["backups"]
    now = int(time.time())

    def put(name: str) -> None:
        k3s_upload(backups["endpoint"], backups["bucket"], "raya", name, b"etcd" * 100,
                   deployed.resources["join-secret"].outputs["result"])  # fmt: skip

    put(f"etcd-snapshot-control-plane-5-{now - 30 * 3600}")  # since removed from the cluster
    put(f"etcd-snapshot-control-plane-{now - 7 * 3600}")
    put(f"etcd-snapshot-control-plane-1-{now - 3600 - 20}")
    put(f"etcd-snapshot-control-plane-{now - 3600 - 10}")
    put(f"on-demand-control-plane-{now - 10 * 60}")
    listed = raya(project, "backups")
    assert listed.exit_code == 0, listed.output
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in listed.stdout.splitlines()
        if line.startswith("│")  # the rows: the header's bars are heavy (┃)
    ]
    assert [(row[0], row[1].rsplit("-", 1)[0], row[4]) for row in rows] == [
        ("control-plane", "on-demand-control-plane", "10 min"),
        ("", "etcd-snapshot-control-plane", "60 min"),
        ("", "etcd-snapshot-control-plane", "7 h"),
        ("control-plane-1", "etcd-snapshot-control-plane-1", "60 min"),
        ("control-plane-2", "none in the bucket", ""),
        ("control-plane-5 (no longer a control plane)", "etcd-snapshot-control-plane-5", "30 h"),
    ]
    assert "5 snapshots in s3://" in listed.stderr


def test_a_snapshot_that_never_reaches_the_bucket_fails(
    project: Path, setup: tuple[Stand, dict[str, Any]]
) -> None:
    stand, _ = setup
    stand.servers["control-plane"].running = False
    failed = raya(project, "backup")
    assert isinstance(failed.exception, RayaError)
    assert str(failed.exception) == (
        "control-plane: k3s etcd-snapshot save failed (1): etcd-snapshot: failed to get etcd "
        "status: connection refused"
    )


def drill(
    project: Path, setup: tuple[Stand, dict[str, Any]], api: tuple[ka.Cluster, str],
    *extra: str, then: Callable[[], None] = lambda: None,
) -> tuple[str, Any]:  # fmt: skip
    """BEFORE ConfigMaps written, `raya backup`, AFTER more written, `then`, then `raya
    restore` of that snapshot: the snapshot's name and what the restore printed."""
    stand, _ = setup
    state, _ = api
    state.objects.update(configmaps(BEFORE))
    stand.scheduled_run()
    taken = raya(project, "backup")
    assert taken.exit_code == 0, taken.output
    name = taken.stdout.split()[0]
    state.objects.update(configmaps(AFTER, start=BEFORE))
    then()
    stand.calls.clear()
    return name, raya(project, "restore", name, "--yes", "--ready-timeout", "120", *extra)


def steps_run(stand: Stand) -> list[tuple[str, tuple[str, ...]]]:
    return [(node, argv[:2]) for node, argv in stand.calls]


def restored_by_k3s(control_planes: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The commands of k3s' documented restore (the first's drop-in removed before its
    reset), in raya's order."""
    first, others = control_planes[0], control_planes[1:]
    return [
        *((node, ("systemctl", "stop")) for node in reversed(others)),
        (first, ("systemctl", "stop")), (first, ("install", "-D")), (first, ("sh", "-c")),
        (first, ("rm", "-f")), (first, ("k3s", "server")), (first, ("systemctl", "start")),
        *(step for node in others
          for step in ((node, ("rm", "-rf")), (node, ("systemctl", "start")))),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("control_planes", "first_state"),
    [(1, "volume"), (3, "volume"), (5, "volume"), (3, "blank"), (5, "blank"),
     (3, "tombstoned")],
    ids=["1", "3", "5", "3, the first blank and joined", "5, the first blank and joined",
         "3, the first tombstoned"],
)  # fmt: skip
def test_restore_brings_back_the_objects_of_the_snapshot(
    project: Path, deployed: Run, setup: tuple[Stand, dict[str, Any]],
    api: tuple[ka.Cluster, str], control_planes: int, first_state: str,
) -> None:  # fmt: skip
    """The drill at 1, 3 and 5 control planes: 120 ConfigMaps, a snapshot, 30 more, the
    restore. The first control plane runs from its volume, or came back on a blank volume
    ("blank") and its datastore guard joined it to control-plane-1: its volume holds a member
    of the cluster, and the drop-in the guard wrote (its join config and `server:` naming that
    peer) is still there, as until k3s' next start; or ("tombstoned") its member was removed
    from the cluster after the snapshot (its node object deleted): etcd wrote its tombstone
    and k3s stopped, the guard not run again yet. After the restore the API serves the 120
    and none of the 30, every control plane is a voting member of one cluster, and the
    restore says so."""
    stand, outputs = setup
    state, url = api
    names = list(stand.servers)
    first = stand.servers[names[0]]
    assert state.etcd is not None
    etcd = state.etcd
    if first_state == "blank":
        peer = stand.servers[names[1]]
        first.dropins["40-raya-join.yaml"] = {
            **rendered_config(deployed, names[0], JOIN_CONFIG),
            "server": f"https://{peer.address}:6443",
        }
        etcd.members[names[0]] = ka.Member(f"{names[0]}-{secrets.token_hex(4)}")

    def removed() -> None:
        if first_state == "tombstoned":
            etcd.delete_node(state, names[0])
            state.server_deleted(names[0])
            first.running, first.tombstone = False, True

    name, restored = drill(project, setup, api, then=removed)
    assert restored.exit_code == 0, restored.output
    assert steps_run(stand) == restored_by_k3s(names)
    assert "40-raya-join.yaml" not in first.dropins
    assert not stand.split
    assert {server.member for server in stand.servers.values()} == {stand.cluster}
    assert stand.cluster.startswith("restored-")
    cms = [f"cm-{i}" for i in range(BEFORE + AFTER)]
    assert len(served(outputs, url, cms)) == BEFORE == 120
    assert served(outputs, url, cms[BEFORE:]) == []
    # No object storage key on any command line.
    assert not any(outputs["backups"]["secretKey"] in " ".join(argv) for _, argv in stand.calls)
    lines = restored.stdout.splitlines()
    for node in outputs["servers"]:
        assert [line for line in lines if f" {node} " in line and f"Ready {VERSION}" in line]
    for node in names:
        (line,) = [line for line in lines if line.startswith(f"etcd {node}: ")]
        assert line.startswith(f"etcd {node}: voter, Ready, member {node}-"), line
    assert f"backups {names[0]}: newest " in restored.stdout
    assert lines[-2:] == [
        "healthy",
        f"restored {name} (taken {datetime_of(name)} UTC on {names[0]}); etcd: "
        f"{control_planes} of {control_planes} members voting ({', '.join(names)}); "
        f"{control_planes + 3} of {control_planes + 3} nodes Ready",
    ]


@pytest.mark.parametrize("control_planes", [3])
def test_a_restore_that_leaves_the_join_drop_in_cannot_reset(
    project: Path, setup: tuple[Stand, dict[str, Any]], api: tuple[ka.Cluster, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """What the restore was before: without its step removing the drop-in, k3s refuses the
    reset on a first control plane that joined a peer, with every k3s already stopped."""
    stand, _ = setup
    first = next(iter(stand.servers.values()))
    first.dropins["40-raya-join.yaml"] = {"server": "https://10.0.1.11:6443"}
    plan = bk.restore_plan
    monkeypatch.setattr(bk, "restore_plan", lambda *args: [
        step for step in plan(*args) if step.command[:2] != ("rm", "-f")])  # fmt: skip
    _, restored = drill(project, setup, api)
    assert isinstance(restored.exception, RayaError)
    assert str(restored.exception).startswith(
        "restore stopped at step 6 (control-plane: reset etcd to the snapshot (one member: this "
        "server)), exit 1: cannot perform cluster-reset while server URL is set"
    )
    assert not any(server.running for server in stand.servers.values())


def test_dry_run_prints_every_step_and_changes_nothing(
    project: Path, setup: tuple[Stand, dict[str, Any]], deployed: Run,
) -> None:  # fmt: skip
    stand, outputs = setup
    backups = outputs["backups"]
    name = f"etcd-snapshot-control-plane-{int(time.time()) - 600}"
    data = snapshot_bytes(stand.token, configmaps(3))
    k3s_upload(backups["endpoint"], backups["bucket"], "raya", name, data, stand.token)
    shown = raya(project, "restore", name, "--dry-run")
    assert shown.exit_code == 0, shown.output
    assert stand.calls == []
    assert "Go on?" not in shown.output
    path = f"{SNAPSHOTS}/{name}"
    digest = hashlib.sha256(data).hexdigest()
    assert shown.stdout.splitlines() == [
        f"restore {name} (taken {datetime_of(name)} UTC on control-plane, sha256 "
        f"{digest[:16]}...):",
        "  1. control-plane: stop k3s",
        "       $ sudo systemctl stop k3s",
        f"  2. control-plane: copy {name} ({len(data):,} bytes) to {path}",
        f"       $ sudo install -D -m 0600 /dev/stdin {path} < {name}",
        "  3. control-plane: check the copy's sha256",
        f"       $ sudo sh -c 'echo '\"'\"'{digest}  {path}'\"'\"' | sha256sum --check --quiet'",
        "  4. control-plane: remove the join drop-in /etc/rancher/k3s/config.yaml.d/"
        "40-raya-join.yaml if there (k3s refuses a reset while a config file names a server)",
        "       $ sudo rm -f /etc/rancher/k3s/config.yaml.d/40-raya-join.yaml",
        "  5. control-plane: reset etcd to the snapshot (one member: this server)",
        f"       $ sudo k3s server --cluster-reset --cluster-reset-restore-path={path} "
        "--etcd-s3=false",
        "  6. control-plane: start k3s",
        "       $ sudo systemctl start k3s",
    ]
    assert "dry run: nothing done" in shown.output
    refused = raya(project, "restore", "on-demand-control-plane-1700000000", "--dry-run")
    assert isinstance(refused.exception, RayaError) and stand.calls == []


@pytest.mark.parametrize("control_planes", [3])
def test_dry_run_lists_each_node_in_the_order_the_restore_runs(
    project: Path, setup: tuple[Stand, dict[str, Any]],
) -> None:  # fmt: skip
    stand, outputs = setup
    backups = outputs["backups"]
    name = f"etcd-snapshot-control-plane-{int(time.time()) - 600}"
    k3s_upload(backups["endpoint"], backups["bucket"], "raya", name,
               snapshot_bytes(stand.token, {}), stand.token)  # fmt: skip
    shown = raya(project, "restore", name, "--dry-run")
    assert shown.exit_code == 0, shown.output
    steps = [line.split(": ", 1) for line in shown.stdout.splitlines()
             if line.startswith("  ") and not line.startswith("       $")]  # fmt: skip
    assert [(node.split(". ")[1], what.split(" ")[0]) for node, what in steps] == [
        ("control-plane-2", "stop"), ("control-plane-1", "stop"), ("control-plane", "stop"),
        ("control-plane", "copy"), ("control-plane", "check"), ("control-plane", "remove"),
        ("control-plane", "reset"), ("control-plane", "start"),
        ("control-plane-1", "remove"), ("control-plane-1", "start"),
        ("control-plane-2", "remove"), ("control-plane-2", "start"),
    ]
    assert stand.calls == []


def test_restore_says_which_nodes_are_not_ready_in_time(
    project: Path, setup: tuple[Stand, dict[str, Any]], api: tuple[ka.Cluster, str]
) -> None:
    """The control plane's k3s restarted but never serves the API again: after the timeout,
    what was last seen, the state anyway, exit 1."""
    stand, _ = setup
    state, _ = api
    state.boot = 3600.0 * PACE
    name, restored = drill(project, setup, api, "--ready-timeout", "1")
    assert restored.exit_code == 1, restored.output
    assert stand.servers["control-plane"].running
    assert ("not every node Ready and etcd member voting 1 s after the restore: API "
            "https://127.0.0.1:") in restored.output  # fmt: skip
    assert f"restored {name}" in restored.stdout and "not healthy" in restored.stdout


def datetime_of(name: str) -> str:
    taken = bk.parse_name(name)
    assert taken is not None
    return f"{taken[1]:%Y-%m-%d %H:%M}"


@pytest.mark.parametrize("case", ["another cluster", "missing", "unreachable"])
def test_restore_refuses_before_anything_stops(
    project: Path, setup: tuple[Stand, dict[str, Any]], case: str,
) -> None:  # fmt: skip
    stand, outputs = setup
    backups = outputs["backups"]
    name = f"etcd-snapshot-control-plane-{int(time.time()) - 60}"
    expected = {
        "another cluster": "was taken by a cluster with another server token",
        "missing": f"no snapshot {name} in s3://{backups['bucket']}/raya",
        "unreachable": "cannot read snapshot",
    }[case]
    if case == "another cluster":
        other = "not-our-token-0"
        k3s_upload(backups["endpoint"], backups["bucket"], "raya", name,
                   snapshot_bytes(other, configmaps(3)), other)  # fmt: skip
    if case == "unreachable":
        outputs["backups"] = {**backups, "endpoint": "127.0.0.1:9"}
    refused = raya(project, "restore", name, "--yes")
    assert isinstance(refused.exception, RayaError)
    assert expected in str(refused.exception)
    assert stand.calls == []


def test_k3s_refuses_a_snapshot_of_another_token_at_the_reset(
    project: Path, setup: tuple[Stand, dict[str, Any]]
) -> None:
    """The double's rule under raya's check: a snapshot labelled with this cluster's token
    hash whose datastore holds bootstrap data of another token (a label rewritten by hand):
    k3s' reset fails on it, and the restore stops there, saying so."""
    stand, outputs = setup
    backups = outputs["backups"]
    name = f"etcd-snapshot-control-plane-{int(time.time()) - 60}"
    k3s_upload(backups["endpoint"], backups["bucket"], "raya", name,
               snapshot_bytes("not-our-token-0", configmaps(3)), stand.token)  # fmt: skip
    refused = raya(project, "restore", name, "--yes", "--ready-timeout", "5")
    assert isinstance(refused.exception, RayaError)
    assert str(refused.exception).startswith(
        "restore stopped at step 5 (control-plane: reset etcd to the snapshot (one member: this "
        "server)), exit 1: starting kubernetes: preparing server: bootstrap data already found "
        "and encrypted with different token"
    )
    assert stand.cluster == "original"


def test_destroy_keeps_the_bucket_unless_asked(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[bool] = []

    def destroy(action: str, root: Path, stack: str, on_output: Any, **options: Any) -> Any:
        asked.append(options["delete_backups"])
        return deploy.Result(changes={"delete": 1}, outputs={})

    monkeypatch.setattr(deploy, "run", destroy)
    kept = raya(project, "destroy", "--yes")
    assert kept.exit_code == 0 and "kept the backups' bucket and its snapshots" in kept.output
    deleted = raya(project, "destroy", "--yes", "--delete-backups")
    assert deleted.exit_code == 0 and "deleted the backups' bucket" in deleted.output
    assert asked == [False, True]


def test_restore_after_destroy_and_up_from_the_kit_passes_the_token_check(
    project: Path, github: list[str], s3: ObjectStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Destroy -> up from the kit -> restore, every step through the engine model
    (tests/cloud/program/engine.py): a snapshot the first stack's k3s uploaded is this
    cluster's for `raya restore` of the stack built from the kit, as it is for k3s (the same
    token hash), and is checked, downloaded and offered for restore."""
    example = provider_mocks()
    cloud = deployed_cloud(project, monkeypatch, example.zones, example.snapshots)
    assert raya(project, "up").exit_code == 0  # writes the kit
    kit = json.loads((project / ".raya" / "prod.recovery-kit.json").read_text())
    bucket, first = kit["backups"]["bucket"], kit["joinSecret"]
    with contextlib.suppress(s3.client().exceptions.BucketAlreadyOwnedByYou):
        s3.client().create_bucket(Bucket=bucket)
    name = f"etcd-snapshot-control-plane-{int(time.time()) - 3600}"
    k3s_upload(s3.endpoint, bucket, "raya", name, b"etcd before the destroy" * 100, first)

    assert raya(project, "destroy", "--yes").exit_code == 0
    stack_file = project / "Pulumi.prod.yaml"
    stack_file.write_text(
        stack_file.read_text() + "  raya:fromRecoveryKit: .raya/prod.recovery-kit.json\n"
    )
    up = raya(project, "up")
    assert up.exit_code == 0, up.output
    assert ("import", "backups") in cloud.engine.steps

    read = deploy.stack_outputs  # the new stack's own outputs, its bucket served by S3 here
    new = read(project, "prod")["backups"]  # the new writer: its key, the roles it is granted
    s3.writer(bucket, BUCKET_ROLES.values(), new["accessKey"], new["secretKey"])

    def outputs(root: Path, stack: str) -> dict[str, Any]:
        found = read(root, stack)
        backups = {**found["backups"], "endpoint": s3.endpoint}
        servers = {n: {**entry, "_node": n} for n, entry in found["servers"].items()}
        return {**found, "backups": backups, "servers": servers}

    monkeypatch.setattr(deploy, "stack_outputs", outputs)
    # Never asked to act (the restore is declined): one control plane, its token.
    stand = Stand({"control-plane": K3sServer("control-plane", "10.0.1.10", {"token": first})},
                  "10.0.1.10", first, s3=(s3.endpoint, bucket, "raya"))  # fmt: skip
    monkeypatch.setattr(commands, "remote", stand)
    offered = raya(project, "restore", name, input="n\n")
    # Checked (folder, k3s metadata, token hash), downloaded, its steps shown: then declined.
    assert offered.exit_code == 1, offered.output
    assert "1. control-plane: stop k3s" in offered.output
    assert "another server token" not in offered.output
    assert stand.calls == []


@pytest.mark.parametrize("control_planes", [3])
def test_restore_says_each_step_done_with_what_is_left_and_the_time_elapsed(
    project: Path, setup: tuple[Stand, dict[str, Any]], api: tuple[ka.Cluster, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Each of the restore's steps on three control planes (12) takes 20 s on the clock the
    restore reads: each line says how many are done, left, and the time since the first."""
    stand, outputs = setup
    seconds = [1000.0]

    def slow(entry: Mapping[str, Any], command: Sequence[str], stdin: IO[bytes] | None) -> (
        tuple[int, str]
    ):
        seconds[0] += 20
        return stand(entry, command, stdin)

    monkeypatch.setattr(commands, "remote", slow)
    monkeypatch.setattr(commands, "clock", lambda: seconds[0])
    _, restored = drill(project, setup, api)
    assert restored.exit_code == 0, restored.output
    lines = [line for line in restored.output.splitlines() if line.startswith("[")]
    assert [line.split("] ")[0] + "]" for line in lines] == [
        f"[{n}/12 done, 0:{20 * n // 60:02d}:{20 * n % 60:02d} elapsed, {12 - n} left]"
        for n in range(1, 13)
    ]
    assert lines[0].endswith("] control-plane-2: stop k3s")
    assert lines[-1].endswith("] control-plane-2: start k3s: it rejoins as a new member")
    assert outputs["backups"]["secretKey"] not in restored.output
