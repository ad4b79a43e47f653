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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from raya.cloud import deploy
from raya.commands import backups as commands
from raya.errors import RayaError
from raya.operate import backups as bk
from raya.operate import status as st
from tests.cloud.program import fakes
from tests.cloud.program.engine import deployed_cloud
from tests.cloud.program.mocks import Run
from tests.cloud.program.test_program import provider_mocks, run
from tests.operate import kube_api as ka
from tests.operate.s3 import client, k3s_upload
from tests.operate.test_status import LABELS, VERSION, addons_installed
from tests.runner import invoke
from tests.support import http_server, routes

SNAPSHOTS = "/var/lib/rancher/k3s/server/db/snapshots"
DB = "/var/lib/rancher/k3s/server/db"


@dataclass
class K3sServer:
    """k3s on one server, as its documentation and source describe what raya asks of it:
    - `k3s etcd-snapshot save` needs the running server (it asks its etcd) and uploads
      `on-demand-<node>-<unix seconds>` with the token hash (pkg/etcd/snapshot.go, s3.go);
    - `k3s server --cluster-reset` refuses while k3s runs on the node (its etcd holds the data
      directory), restores the named local file and exits (docs: "Restoring a snapshot");
      the servers' config says `etcd-s3: true`, so unless `--etcd-s3=false` is given k3s
      takes the path for a name in the bucket and reads the S3 settings from the config
      Secret, which fails during a reset (k3s-io/docs docs/cli/etcd-snapshot.md, "The S3
      config Secret cannot be used when restoring a snapshot"; pkg/etcd/s3/config_secret.go);
    - a server that rejoins after another was reset must have removed its `server/db`, or
      its old etcd member data conflicts with the reset cluster (docs: "remove the db dir").
    """

    s3: str
    bucket: str
    folder: str
    join_secret: str
    running: bool = True
    files: dict[str, bytes] = field(default_factory=dict)
    db: str = "original"  # what its etcd holds
    log: list[str] = field(default_factory=list)
    # The API it serves: while k3s is stopped nothing answers on its address, as when its
    # server is gone; started, its kubelet registers again (tests/operate/kube_api.py).
    api: ka.Cluster | None = None


@dataclass
class Stand:
    servers: dict[str, K3sServer]
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    reset_from: str | None = None

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
            name = f"on-demand-{node}-{int(time.time())}"
            k3s_upload(server.s3, server.bucket, server.folder, name, server.db.encode() * 64,
                       server.join_secret)  # fmt: skip
            return 0, f"Snapshot {name} saved."
        if argv[:2] == ("systemctl", "stop"):
            server.running = False
            if server.api:
                server.api.server_deleted(node)
            return 0, ""
        if argv[:2] == ("systemctl", "start"):
            if self.reset_from and node != next(iter(self.servers)) and server.db == "original":
                return 1, "etcd: member has already been bootstrapped (cluster ID mismatch)"
            server.running = True
            if server.api:
                server.api.server_created(node, VERSION)
            if server.db == "removed":
                server.db = self.servers[next(iter(self.servers))].db  # joined as a new member
            return 0, ""
        if argv[:3] == ("install", "-D", "-m") and stdin is not None:
            server.files[argv[-1]] = stdin.read()
            return 0, ""
        if argv[:2] == ("sh", "-c"):
            digest, path = shlex.split(argv[2].split("|")[0].removeprefix("echo "))[0].split("  ")
            ok = hashlib.sha256(server.files.get(path, b"")).hexdigest() == digest
            return (0, "") if ok else (1, f"{path}: FAILED")
        if argv[:3] == ("k3s", "server", "--cluster-reset"):
            if server.running:
                return 1, "etcd: data directory is in use by the running k3s"
            if "--etcd-s3=false" not in argv:
                return 1, ('failed to get config from etcd-s3-config-secret "raya-etcd-s3": '
                           "failed to get etcd S3 config secret: core not ready")  # fmt: skip
            path = argv[3].removeprefix("--cluster-reset-restore-path=")
            if path not in server.files:
                return 1, f"open {path}: no such file or directory"
            server.db = f"restored from {hashlib.sha256(server.files[path]).hexdigest()}"
            self.reset_from = path
            return 0, "Managed etcd cluster membership has been reset, restart without it"
        if argv == ("rm", "-rf", DB):
            server.db = "removed"
            return 0, ""
        return 127, f"stand-in: unexpected command {argv}"


@pytest.fixture
def deployed() -> Run:
    return run(provider_mocks())


@pytest.fixture
def setup(deployed: Run, s3: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Stand, dict[str, Any]]:
    # A bucket of each test's own: the S3 server is shared by the session.
    bucket = f"commands-{secrets.token_hex(4)}"
    backups = {**deployed.outputs["backups"], "endpoint": s3, "insecure": True, "bucket": bucket}
    client(s3).create_bucket(Bucket=backups["bucket"])
    # The stand-in finds the node by the entry raya hands the runner.
    servers = {n: {**entry, "_node": n} for n, entry in deployed.outputs["servers"].items()}
    outputs = {**deployed.outputs, "backups": backups, "servers": servers}
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: outputs)
    join_secret = deployed.resources["join-secret"].outputs["result"]
    stand = Stand({"control-plane": K3sServer(s3, backups["bucket"], "raya", join_secret)})
    monkeypatch.setattr(commands, "remote", stand)
    return stand, outputs


@pytest.fixture
def api(
    deployed: Run, setup: tuple[Stand, dict[str, Any]], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[ka.Cluster]:  # fmt: skip
    """What `raya status` asks, answering for a healthy cluster: Hetzner's API, the zone's
    name servers, and the Kubernetes API (its nodes Ready, the add-ons installed), which the
    control plane's k3s serves (Stand)."""
    stand, outputs = setup
    servers = outputs["servers"]
    hetzner = {
        f"/v1/servers/{entry['serverId']}": json.dumps(
            {"server": fakes.hetzner_server(int(entry["serverId"]), name, "running", LABELS)}
        ).encode()
        for name, entry in servers.items()
    }
    # k3s back from a start registers its node at once (the clock is the real one).
    nodes = {
        name: ka.node_object(name, VERSION, server=int(entry["serverId"]))
        for name, entry in servers.items()
    }
    state = ka.Cluster(nodes=nodes, clock=time.monotonic, boot=0.5)
    addons_installed(state)
    ka.Etcd.of(state, {"control-plane": servers["control-plane"]["privateIp"]})
    stand.servers["control-plane"].api = state
    records = {entry["dnsName"]: [entry["ipv4"]] for entry in servers.values()}
    delegations = {"raya.example.com.": list(deployed.outputs["nameServers"])}
    monkeypatch.setattr(st, "system_address_of", lambda name: ["127.0.0.1"])
    monkeypatch.setattr(st, "parent_name_servers", lambda zone: ["ns1.example.com."])
    monkeypatch.setattr(bk, "POLL", 0.1)
    monkeypatch.setenv("HCLOUD_TOKEN", "token")
    with (
        http_server(routes(hetzner)) as hcloud_url,
        fakes.dns_server(records, delegations) as (port, _),
        ka.deployment_api(state, deployed.resources, tmp_path) as api_url,
    ):  # fmt: skip
        monkeypatch.setenv("HCLOUD_ENDPOINT", f"{hcloud_url}/v1")
        monkeypatch.setattr(st, "DNS_PORT", port)
        for source in ("kubernetes_nodes", "kubernetes_control_planes", "kubernetes_addons",
                       "api_certificate"):
            monkeypatch.setattr(st, source, functools.partial(getattr(st, source), server=api_url))
        yield state


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
    assert name.startswith("on-demand-control-plane-") and size == "512"
    assert stand.calls == [("control-plane", ("k3s", "etcd-snapshot", "save"))]
    listed = raya(project, "backups")
    assert listed.exit_code == 0 and name in listed.stdout and "512 B" in listed.stdout
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


def test_restore_checks_asks_then_resets_from_the_bytes_of_the_snapshot(
    project: Path, setup: tuple[Stand, dict[str, Any]], deployed: Run, api: ka.Cluster
) -> None:
    stand, outputs = setup
    backups = outputs["backups"]
    data = b"etcd snapshot bytes " * 5000
    name = f"etcd-snapshot-control-plane-{int(time.time()) - 7200}"
    k3s_upload(backups["endpoint"], backups["bucket"], "raya", name, data,
               deployed.resources["join-secret"].outputs["result"])  # fmt: skip
    declined = raya(project, "restore", name, input="n\n")
    assert declined.exit_code == 1 and stand.calls == []
    assert "1. control-plane: stop k3s" in declined.output
    restored = raya(project, "restore", name, "--yes")
    assert restored.exit_code == 0, restored.output
    server = stand.servers["control-plane"]
    assert server.db == f"restored from {hashlib.sha256(data).hexdigest()}"
    assert server.running
    assert [argv[:2] for _, argv in stand.calls] == [
        ("systemctl", "stop"), ("install", "-D"), ("sh", "-c"), ("k3s", "server"),
        ("systemctl", "start"),
    ]
    # No object storage key on any command line.
    assert not any(backups["secretKey"] in " ".join(argv) for _, argv in stand.calls)
    # It ends with the cluster's state as `raya status` shows it, once the API answered
    # with every node Ready: the control plane's kubelet came back from k3s' restart.
    assert [e for _, e in api.events if not e.startswith("etcd: ")] == [
        "control-plane: server deleted", "control-plane: server created",
        f"control-plane: registered, boot {api.machines['control-plane'].boot_id}",
    ]  # fmt: skip
    lines = restored.stdout.splitlines()
    for node in outputs["servers"]:
        assert [line for line in lines if f" {node} " in line and f"Ready {VERSION}" in line]
    assert "backups control-plane: newest " in restored.stdout
    assert lines[-2:] == [
        "healthy", f"restored {name} (taken {datetime_of(name)} UTC on control-plane)"
    ]


def test_restore_says_which_nodes_are_not_ready_in_time(
    project: Path, setup: tuple[Stand, dict[str, Any]], deployed: Run, api: ka.Cluster
) -> None:
    """The control plane's k3s restarted but never serves the API again: after the timeout,
    what was last seen, the state anyway, exit 1."""
    stand, outputs = setup
    name = f"etcd-snapshot-control-plane-{int(time.time()) - 60}"
    k3s_upload(outputs["backups"]["endpoint"], outputs["backups"]["bucket"], "raya", name,
               b"etcd" * 64, deployed.resources["join-secret"].outputs["result"])  # fmt: skip
    api.boot = 3600.0
    restored = raya(project, "restore", name, "--yes", "--ready-timeout", "1")
    assert restored.exit_code == 1, restored.output
    assert stand.servers["control-plane"].running
    assert "not every node Ready 1 s after the restore: API https://127.0.0.1:" in (
        restored.output
    )
    assert f"restored {name}" in restored.stdout and "not healthy" in restored.stdout


def datetime_of(name: str) -> str:
    taken = bk.parse_name(name)
    assert taken is not None
    return f"{taken[1]:%Y-%m-%d %H:%M}"


@pytest.mark.parametrize("case", ["another cluster", "missing", "unreachable"])
def test_restore_refuses_before_anything_stops(
    project: Path, setup: tuple[Stand, dict[str, Any]], case: str,
    monkeypatch: pytest.MonkeyPatch,
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
        k3s_upload(backups["endpoint"], backups["bucket"], "raya", name, b"x", "not-our-token-0")
    if case == "unreachable":
        outputs["backups"] = {**backups, "endpoint": "127.0.0.1:9"}
    refused = raya(project, "restore", name, "--yes")
    assert isinstance(refused.exception, RayaError)
    assert expected in str(refused.exception)
    assert stand.calls == []


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
    project: Path, github: list[str], s3: str, monkeypatch: pytest.MonkeyPatch
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
    with contextlib.suppress(client(s3).exceptions.BucketAlreadyOwnedByYou):
        client(s3).create_bucket(Bucket=bucket)
    name = f"etcd-snapshot-control-plane-{int(time.time()) - 3600}"
    k3s_upload(s3, bucket, "raya", name, b"etcd before the destroy" * 100, first)

    assert raya(project, "destroy", "--yes").exit_code == 0
    stack_file = project / "Pulumi.prod.yaml"
    stack_file.write_text(
        stack_file.read_text() + "  raya:fromRecoveryKit: .raya/prod.recovery-kit.json\n"
    )
    up = raya(project, "up")
    assert up.exit_code == 0, up.output
    assert ("import", "backups") in cloud.engine.steps

    read = deploy.stack_outputs  # the new stack's own outputs, its bucket served by S3 here

    def outputs(root: Path, stack: str) -> dict[str, Any]:
        found = read(root, stack)
        backups = {**found["backups"], "endpoint": s3, "insecure": True}
        servers = {n: {**entry, "_node": n} for n, entry in found["servers"].items()}
        return {**found, "backups": backups, "servers": servers}

    monkeypatch.setattr(deploy, "stack_outputs", outputs)
    stand = Stand({"control-plane": K3sServer(s3, bucket, "raya", first)})
    monkeypatch.setattr(commands, "remote", stand)
    offered = raya(project, "restore", name, input="n\n")
    # Checked (folder, k3s metadata, token hash), downloaded, its steps shown: then declined.
    assert offered.exit_code == 1, offered.output
    assert "1. control-plane: stop k3s" in offered.output
    assert "another server token" not in offered.output
    assert stand.calls == []
