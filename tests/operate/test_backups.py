"""Backups against a real S3 implementation (moto's server, on 127.0.0.1 in the test), with
snapshots uploaded the way k3s uploads them (tests/operate/s3.py)."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import secrets
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.config import Config
from botocore.exceptions import ClientError

from raya.cloud.program.backups import BUCKET_ROLES
from raya.model.fleet import build_cluster
from raya.model.pins import load_chart_pins
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import generate_example_secrets, token_hash
from raya.nodes.render import render_cluster
from raya.operate import backups as bk
from raya.operate import status as st
from raya.operate.roll import Clock
from tests.cloud.program.mocks import Run, reveal
from tests.nodes.tools import ignition_files
from tests.operate.k3s_snapshots import Server, scheduled_run, snapshot
from tests.operate.s3 import (
    MIN_PART_SIZE,
    REGION,
    ObjectStorage,
    client,
    k3s_calls,
    k3s_upload,
    role_permissions,
)

JOIN_SECRET = "k3sJoinSecretOfThisCluster0123456789abcdefABCDEF"
OTHER_SECRET = "k3sJoinSecretOfAnotherCluster0123456789abcdefAB"
# 2026-11-30 00:00:00 UTC and later.
T0 = 1795996800
BUCKET_BINDING = "gcp:storage/bucketIAMMember:BucketIAMMember"


@pytest.fixture
def target(s3: ObjectStorage) -> bk.Target:
    """A bucket of the test's own (the server is shared), read with a key holding the
    writer's roles on it."""
    bucket = f"raya-etcd-{secrets.token_hex(4)}"
    s3.client().create_bucket(Bucket=bucket)
    access_key, secret_key = s3.writer(bucket, BUCKET_ROLES.values())
    return bk.Target(endpoint=s3.endpoint, bucket=bucket, folder="raya", region=REGION,
                     access_key=access_key, secret_key=secret_key,
                     token_hash=token_hash(JOIN_SECRET))  # fmt: skip


def upload(target: bk.Target, name: str, data: bytes, *, secret: str = JOIN_SECRET,
           folder: str | None = None) -> None:  # fmt: skip
    k3s_upload(target.endpoint, target.bucket, folder or target.folder, name, data, secret)


def test_k3s_token_hash_is_sha256s_first_12_hex_digits() -> None:
    assert token_hash("abc") == "ba7816bf8f01"  # sha256("abc") = ba7816bf8f01cfea...


def test_the_listing_is_every_snapshot_of_the_folder_newest_first(target: bk.Target) -> None:
    upload(target, f"etcd-snapshot-control-plane-{T0}", b"a" * 1000)
    upload(target, f"on-demand-control-plane-{T0 + 3600}", b"b" * 2000)
    upload(target, f"etcd-snapshot-control-plane-1-{T0 + 7200}.zip", b"c" * 3000)
    # Not snapshots of this cluster's folder: another folder, a stray object.
    upload(target, f"etcd-snapshot-control-plane-{T0 + 9000}", b"d", folder="other")
    client(target.endpoint).put_object(Bucket=target.bucket, Key="raya/README", Body=b"notes")
    found = bk.list_snapshots(target)
    assert [(s.name, s.node, s.size) for s in found] == [
        (f"etcd-snapshot-control-plane-1-{T0 + 7200}.zip", "control-plane-1", 3000),
        (f"on-demand-control-plane-{T0 + 3600}", "control-plane", 2000),
        (f"etcd-snapshot-control-plane-{T0}", "control-plane", 1000),
    ]
    assert found[-1].taken == datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC)


def test_an_empty_folder_lists_nothing(target: bk.Target) -> None:
    assert bk.list_snapshots(target) == []


def test_a_snapshot_is_checked_and_downloaded_byte_for_byte(
    target: bk.Target, tmp_path: Path
) -> None:
    data = secrets.token_bytes(3 * 2**20 + 17)  # several chunks of the download
    name = f"etcd-snapshot-control-plane-{T0}"
    upload(target, name, data)
    snapshot = bk.check_snapshot(target, name)
    assert (snapshot.node, snapshot.size) == ("control-plane", len(data))
    path = tmp_path / name
    assert bk.download(target, snapshot, path) == hashlib.sha256(data).hexdigest()
    assert path.read_bytes() == data
    assert path.stat().st_mode & 0o777 == 0o600


def test_another_clusters_snapshot_is_refused(target: bk.Target) -> None:
    name = f"etcd-snapshot-control-plane-{T0}"
    upload(target, name, b"x" * 10, secret=OTHER_SECRET)
    with pytest.raises(bk.BackupError, match=rf"another server token \(token hash "
                       rf"{token_hash(OTHER_SECRET)}, this cluster's {token_hash(JOIN_SECRET)}"):
        bk.check_snapshot(target, name)


def test_a_missing_snapshot_is_refused_by_name(target: bk.Target) -> None:
    with pytest.raises(bk.BackupError, match=rf"no snapshot on-demand-control-plane-{T0} in "
                       rf"s3://{target.bucket}/raya"):  # fmt: skip
        bk.check_snapshot(target, f"on-demand-control-plane-{T0}")
    with pytest.raises(bk.BackupError, match="'backup-1' is not a k3s snapshot name"):
        bk.check_snapshot(target, "backup-1")


def test_a_bucket_that_does_not_exist_is_named(target: bk.Target) -> None:
    gone = bk.Target(**{**target.__dict__, "bucket": "no-such-bucket-here"})
    with pytest.raises(bk.BackupError, match=r"s3://no-such-bucket-here/raya: cannot list the "
                       r"snapshots: NoSuchBucket"):  # fmt: skip
        bk.list_snapshots(gone)


def test_an_unreachable_endpoint_is_named(target: bk.Target) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = bk.Target(**{**target.__dict__, "endpoint": f"127.0.0.1:{port}"})
    with pytest.raises(bk.BackupError, match=rf"s3://{target.bucket}/raya: cannot list the "
                       r"snapshots: Could not connect"):  # fmt: skip
        bk.list_snapshots(closed)


def test_the_newest_snapshot_is_stale_past_twice_the_longest_gap() -> None:
    now = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.UTC)
    six_hours = datetime.timedelta(hours=6)

    def taken(hours_ago: float) -> bk.Snapshot:
        return bk.Snapshot("s", "control-plane", now - datetime.timedelta(hours=hours_ago), 1)

    assert bk.stale(taken(11.9), six_hours, now) is None
    assert bk.stale(taken(12.1), six_hours, now) == (
        "newest s is 12 h old, more than twice the schedule's 6 h"
    )
    assert bk.stale(None, six_hours, now) == (
        "none in the bucket: k3s on it is not uploading (a new control plane's first comes "
        "with the schedule's next run)"
    )


@pytest.mark.parametrize(
    ("minutes", "text"),
    [(0, "0 min"), (119, "119 min"), (120, "2 h"), (71 * 60 + 59, "71 h"), (72 * 60, "3 days"),
     (10 * 24 * 60 + 600, "10 days")],
)  # fmt: skip
def test_ages_read_in_minutes_hours_then_days(minutes: int, text: str) -> None:
    assert bk.age_text(datetime.timedelta(minutes=minutes)) == text


def test_snapshots_by_node_current_control_planes_first_then_former_ones() -> None:
    def snap(node: str, hour: int, kind: str = "etcd-snapshot") -> bk.Snapshot:
        taken = datetime.datetime(2026, 12, 1, hour, tzinfo=datetime.UTC)
        return bk.Snapshot(f"{kind}-{node}-{int(taken.timestamp())}", node, taken, 1)

    snapshots = [snap("control-plane", 6), snap("control-plane", 12, "on-demand"),
                 snap("control-plane-1", 6), snap("control-plane-3", 0),
                 snap("old-server", 9), snap("control-plane", 0)]  # fmt: skip
    grouped = bk.by_node(snapshots, ["control-plane", "control-plane-1", "control-plane-2"])
    assert [(node, [s.taken.hour for s in taken]) for node, taken in grouped] == [
        ("control-plane", [12, 6, 0]),
        ("control-plane-1", [6]),
        ("control-plane-2", []),  # a control plane with none is listed
        ("old-server", [9]),  # then nodes that are no longer control planes, newest first
        ("control-plane-3", [0]),
    ]


NOW = datetime.datetime.fromtimestamp(T0, datetime.UTC) + datetime.timedelta(days=1)


def hours_ago(hours: float) -> int:
    return int((NOW - datetime.timedelta(hours=hours)).timestamp())


def outputs_of(target: bk.Target) -> dict[str, object]:
    return {"endpoint": target.endpoint, "bucket": target.bucket, "folder": target.folder,
            "region": target.region, "accessKey": target.access_key,
            "secretKey": target.secret_key, "tokenHash": target.token_hash}  # fmt: skip


def test_one_control_planes_backups_against_a_six_hour_schedule(target: bk.Target) -> None:
    """Healthy while its newest is at most 12 h old (twice the 6 h gap), unhealthy past it."""
    six_hours = datetime.timedelta(hours=6)
    upload(target, f"etcd-snapshot-control-plane-{hours_ago(11)}", b"older")
    upload(target, f"etcd-snapshot-control-plane-{hours_ago(5)}", b"newest")
    assert bk.health(outputs_of(target), "prod", ["control-plane"], six_hours, NOW) == {
        "backups control-plane": st.ok(f"newest etcd-snapshot-control-plane-{hours_ago(5)}, "
                                       "5 h old"),
    }  # fmt: skip
    later = NOW + datetime.timedelta(hours=8)  # the newest now 13 h old: a run was missed
    assert bk.health(outputs_of(target), "prod", ["control-plane"], six_hours, later) == {
        "backups control-plane": st.bad(f"newest etcd-snapshot-control-plane-{hours_ago(5)} "
                                        "is 13 h old, more than twice the schedule's 6 h"),
    }  # fmt: skip


def test_three_control_planes_each_judged_by_its_own_newest(target: bk.Target) -> None:
    """control-plane-2 stopped uploading 14 h ago: it alone is unhealthy, though the bucket's
    newest snapshots are an hour old; a node that is no longer a control plane is not judged."""
    six_hours = datetime.timedelta(hours=6)
    for hours in (7, 1):
        upload(target, f"etcd-snapshot-control-plane-{hours_ago(hours)}", b"a")
        upload(target, f"etcd-snapshot-control-plane-1-{hours_ago(hours)}", b"b")
    upload(target, f"on-demand-control-plane-1-{hours_ago(0.5)}", b"raya backup")
    upload(target, f"etcd-snapshot-control-plane-2-{hours_ago(14)}", b"c")
    upload(target, f"etcd-snapshot-control-plane-3-{hours_ago(30)}", b"a former one")
    names = ["control-plane", "control-plane-1", "control-plane-2"]
    checks = bk.health(outputs_of(target), "prod", names, six_hours, NOW)
    assert checks == {
        "backups control-plane": st.ok(f"newest etcd-snapshot-control-plane-{hours_ago(1)}, "
                                       "60 min old"),
        "backups control-plane-1": st.ok(f"newest on-demand-control-plane-1-{hours_ago(0.5)}, "
                                         "30 min old"),
        "backups control-plane-2": st.bad(f"newest etcd-snapshot-control-plane-2-"
                                          f"{hours_ago(14)} is 14 h old, more than twice the "
                                          "schedule's 6 h"),
    }  # fmt: skip
    # A control plane with no snapshot at all is unhealthy too.
    grown = bk.health(outputs_of(target), "prod", [*names, "control-plane-4"], six_hours, NOW)
    assert grown["backups control-plane-4"].state == st.UNHEALTHY
    assert grown["backups control-plane-4"].text.startswith("none in the bucket")


def test_backups_are_unknown_when_the_bucket_cannot_be_read(target: bk.Target) -> None:
    gone = {**outputs_of(target), "bucket": "no-such-bucket-here"}
    assert bk.health(gone, "prod", ["control-plane"], datetime.timedelta(hours=6), NOW) == {
        "backups": st.unknown("s3://no-such-bucket-here/raya: cannot list the snapshots: "
                              "NoSuchBucket (The specified bucket does not exist)"),
    }  # fmt: skip
    assert bk.health(None, "prod", ["control-plane"], datetime.timedelta(hours=6), NOW) == {
        "backups": st.unknown("stack prod has no backup bucket in its outputs; run `raya up`"),
    }


def test_the_restore_plan_follows_k3s_documented_order() -> None:
    snapshot = bk.Snapshot(f"etcd-snapshot-control-plane-{T0}", "control-plane",
                           datetime.datetime.fromtimestamp(T0, datetime.UTC), 4096)  # fmt: skip
    path = f"/var/lib/rancher/k3s/server/db/snapshots/{snapshot.name}"
    steps = bk.restore_plan(["control-plane", "control-plane-1", "control-plane-2"],
                            snapshot, "ab" * 32)  # fmt: skip
    assert [(s.node, s.command[:2]) for s in steps] == [
        ("control-plane-2", ("systemctl", "stop")),
        ("control-plane-1", ("systemctl", "stop")),
        ("control-plane", ("systemctl", "stop")),
        ("control-plane", ("install", "-D")),
        ("control-plane", ("sh", "-c")),
        ("control-plane", ("rm", "-f")),
        ("control-plane", ("k3s", "server")),
        ("control-plane", ("systemctl", "start")),
        ("control-plane-1", ("rm", "-rf")),
        ("control-plane-1", ("systemctl", "start")),
        ("control-plane-2", ("rm", "-rf")),
        ("control-plane-2", ("systemctl", "start")),
    ]
    # The datastore guard's join drop-in goes before the reset: k3s refuses one while any
    # config file names a server (k3s-io/k3s#8488).
    assert steps[5].command == ("rm", "-f", "/etc/rancher/k3s/config.yaml.d/40-raya-join.yaml")
    reset = steps[6].command
    # A local file: S3 off for the reset, though config.yaml says `etcd-s3: true` (k3s' docs:
    # "To restore from a local snapshot file, where an etcd-s3 backup configuration is
    # present, add the argument --etcd-s3=false").
    assert reset == (
        "k3s", "server", "--cluster-reset", f"--cluster-reset-restore-path={path}",
        "--etcd-s3=false",
    )  # fmt: skip
    assert steps[3].upload and not any(s.upload for s in steps if s is not steps[3])
    assert f"{'ab' * 32}  {path}" in steps[4].command[2]
    assert steps[8].command == ("rm", "-rf", "/var/lib/rancher/k3s/server/db")
    single = bk.restore_plan(["control-plane"], snapshot, "ab" * 32)
    assert [s.node for s in single] == ["control-plane"] * 6


def test_the_wait_after_a_restore_lasts_until_every_node_is_ready() -> None:
    """Every 5 s the API is asked again, until each node is registered and Ready; after the
    timeout, what was last seen."""
    ready = st.NodeFacts(True, "v1.33.5+k3s1", "Fedora CoreOS", {})
    not_ready = dataclasses.replace(ready, ready=False)
    now = [0.0]
    clock = Clock(now=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    names = ["control-plane", "agent-0"]
    answers: Iterator[Mapping[str, st.NodeFacts] | str] = iter([
        "API https://10.0.1.10:6443 unreachable: connection refused",
        {"control-plane": ready},
        {"control-plane": ready, "agent-0": not_ready},
        {"control-plane": ready, "agent-0": ready},
    ])  # fmt: skip
    assert bk.wait_for_nodes(lambda: next(answers), names, 60, clock) is None
    assert now[0] == 15.0  # the fourth look
    now[0] = 0.0
    seen = bk.wait_for_nodes(lambda: {"control-plane": ready, "agent-0": not_ready}, names, 12,
                             clock)  # fmt: skip
    assert (seen, now[0]) == ("agent-0 NotReady", 15.0)
    now[0] = 0.0
    missing = bk.wait_for_nodes(lambda: {"control-plane": not_ready}, names, 0, clock)
    assert (missing, now[0]) == ("control-plane NotReady, agent-0 not registered", 0.0)


def test_the_wait_counts_a_rejoining_member_once_seen_learning_then_voting() -> None:
    """control-plane-1 rejoined as a new member: its node first keeps the voter condition of
    its old member (15 s until the leader's next tick), then shows the learner, then the
    voter. The wait ends only at the voter seen after the learner."""
    ready = st.NodeFacts(True, "v1.33.5+k3s1", "Fedora CoreOS", {})
    now = [0.0]
    clock = Clock(now=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    voter = st.ok("voter, Ready, member control-plane-1-0a1b2c3d")
    learner = st.bad("learner, Ready, member control-plane-1-9e8f7a6b: not promoted")
    first = st.ok("voter, Ready, member control-plane-4d5e6f70")
    answers = iter([voter, voter, learner, st.ok("voter, Ready, member control-plane-1-9e8f7a6b")])

    def members() -> dict[str, st.Check]:
        return {"etcd control-plane": first, "etcd control-plane-1": next(answers)}

    nodes = {"control-plane": ready, "control-plane-1": ready}
    assert bk.wait_for_nodes(lambda: nodes, list(nodes), 60, clock, members,
                             rejoining=["control-plane-1"]) is None  # fmt: skip
    assert now[0] == 15.0  # the fourth look
    now[0] = 0.0
    stale = bk.wait_for_nodes(lambda: nodes, list(nodes), 5, clock,
                              lambda: {"etcd control-plane": first, "etcd control-plane-1": voter},
                              rejoining=["control-plane-1"])  # fmt: skip
    assert stale == (
        "etcd control-plane-1: not yet seen rejoining (voter, Ready, member "
        "control-plane-1-0a1b2c3d, as before the restore)"
    )


def declared_roles(deployed: Run) -> list[str]:
    """The roles the program binds for its writer on its bucket, read from its resources."""
    member = deployed.resources["backups-writer"].outputs["member"]
    bucket = deployed.resources["backups"].outputs["name"]
    bindings = [reveal(b.inputs) for b in deployed.of_type(BUCKET_BINDING).values()]
    return sorted(b["role"] for b in bindings if (b["member"], b["bucket"]) == (member, bucket))


def test_the_declared_grant_lets_k3s_make_every_call_it_makes(
    s3: ObjectStorage, deployed: Run
) -> None:
    """BucketExists, a snapshot uploaded in 2 parts (16 MiB + 1 byte) and its metadata file,
    retention's list and two deletes, a download: all with the deployment's own key, holding
    on the bucket what the program binds, and nothing project-wide."""
    bucket = f"raya-etcd-{secrets.token_hex(4)}"
    s3.client().create_bucket(Bucket=bucket)
    old = f"etcd-snapshot-control-plane-{T0}"
    upload(bk.Target(s3.endpoint, bucket, "raya", REGION, "", "", ""), old, b"old")
    keys = deployed.outputs["backups"]
    s3.writer(bucket, declared_roles(deployed), keys["accessKey"], keys["secretKey"])
    refused_before = len(s3.refused)
    data = secrets.token_bytes(MIN_PART_SIZE + 1)
    name = f"etcd-snapshot-control-plane-{T0 + 3600}"
    k3s_calls(s3.endpoint, keys["accessKey"], keys["secretKey"], bucket, "raya", name, data, old)
    assert s3.refused[refused_before:] == []
    listed = s3.client().list_objects_v2(Bucket=bucket)["Contents"]
    assert sorted(item["Key"] for item in listed) == [f"raya/.metadata/{name}", f"raya/{name}"]


def test_object_admin_alone_is_refused_the_head_k3s_makes_first(s3: ObjectStorage) -> None:
    """roles/storage.objectAdmin, the grant raya made before: GCS answers k3s' BucketExists
    403, so k3s never builds a client and no snapshot leaves the node."""
    bucket = f"raya-etcd-{secrets.token_hex(4)}"
    s3.client().create_bucket(Bucket=bucket)
    access_key, secret_key = s3.writer(bucket, ["roles/storage.objectAdmin"])
    with pytest.raises(ClientError) as refused:
        k3s_calls(s3.endpoint, access_key, secret_key, bucket, "raya", "etcd-snapshot-x-1",
                  b"x", "etcd-snapshot-x-0")  # fmt: skip
    assert refused.value.response["Error"]["Code"] == "403"
    assert s3.refused[-1] == (f"HEAD /{bucket}", "AccessDenied")


class ProbeClock:
    """Time that moves only when the probe sleeps; IAM propagates the pending bindings once
    `propagation` seconds have passed (None: never)."""

    def __init__(self, s3: ObjectStorage, propagation: float | None) -> None:
        self.s3, self.propagation, self.now_s, self.sleeps = s3, propagation, 0.0, 0

    def now(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds
        self.sleeps += 1
        if self.propagation is not None and self.now_s >= self.propagation:
            self.s3.propagate()

    def clock(self) -> Clock:
        return Clock(now=self.now, sleep=self.sleep)


def new_writer(s3: ObjectStorage, roles: list[str]) -> bk.Target:
    """A bucket and a new key whose roles on it are bound but not yet in force."""
    bucket = f"raya-etcd-{secrets.token_hex(4)}"
    s3.client().create_bucket(Bucket=bucket)
    access_key, secret_key = s3.issue_key()
    s3.grant(access_key, bucket, role_permissions(roles))
    return bk.Target(endpoint=s3.endpoint, bucket=bucket, folder="raya", region=REGION,
                     access_key=access_key, secret_key=secret_key, token_hash="")  # fmt: skip


def test_the_probe_waits_for_iam_then_heads_puts_and_deletes(s3: ObjectStorage) -> None:
    """Bindings in force 120 s after `raya up` made them: the probe asks every 5 s and
    passes on the first look after; the object it put is gone again."""
    target = new_writer(s3, list(BUCKET_ROLES.values()))
    time = ProbeClock(s3, propagation=120)
    checked = bk.probe(target, time.clock())
    assert checked == (
        f"the writer's key can HEAD bucket {target.bucket} and put and delete raya/raya-probe "
        f"({s3.endpoint})"
    )
    assert (time.now_s, time.sleeps) == (120.0, 24)
    assert "Contents" not in s3.client().list_objects_v2(Bucket=target.bucket)


def test_the_probe_names_the_bucket_and_the_call_refused_past_its_time(
    s3: ObjectStorage,
) -> None:
    target = new_writer(s3, ["roles/storage.objectAdmin"])
    time = ProbeClock(s3, propagation=0)
    with pytest.raises(bk.BackupError) as refused:
        bk.probe(target, time.clock(), timeout=60)
    assert str(refused.value) == (
        f"s3://{target.bucket}/raya: the writer's key was refused HEAD bucket {target.bucket}: "
        "AccessDenied (the key's roles on the bucket lack the permission this call needs)"
    )
    assert time.now_s == 60.0  # asked until the timeout, then no more


def test_the_probe_does_not_wait_for_a_wrong_secret(s3: ObjectStorage) -> None:
    target = new_writer(s3, list(BUCKET_ROLES.values()))
    s3.propagate()
    wrong = dataclasses.replace(target, secret_key="not-the-secret-it-issued")
    time = ProbeClock(s3, propagation=None)
    with pytest.raises(bk.BackupError, match=r"refused HEAD bucket .*: SignatureDoesNotMatch"):
        bk.probe(wrong, time.clock())
    assert time.sleeps == 0
    # The HEAD's 403 has no body; the listing asked next says why.
    assert [code for _, code in s3.refused[-2:]] == ["SignatureDoesNotMatch"] * 2


def test_the_probe_puts_without_the_checksums_gcs_refuses(s3: ObjectStorage) -> None:
    """raya's client sends checksums only where an operation requires one: its PUT passes
    where botocore's default (CRC32 trailer, since 1.36) is refused."""
    target = new_writer(s3, list(BUCKET_ROLES.values()))
    s3.propagate()
    bk.probe(target, ProbeClock(s3, propagation=None).clock())
    default = boto3.client(
        "s3", endpoint_url=f"https://{s3.endpoint}", region_name=REGION,
        aws_access_key_id=target.access_key, aws_secret_access_key=target.secret_key,
        config=Config(s3={"addressing_style": "path"}),
    )  # fmt: skip
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        default.put_object(Bucket=target.bucket, Key="raya/raya-probe", Body=b"x")


def servers_as_rendered(control_planes: int, retention: int) -> list[Server]:
    """The control planes of the example with `control_planes` of them and raya:backupRetention
    `retention`, each with the two retentions its rendered config gives k3s: the local one
    from config.yaml, the bucket's from the Secret k3s reads its S3 settings from (and
    config.yaml's, which must say the same)."""
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    config = dataclasses.replace(example.config, control_planes=control_planes,
                                 backup_retention=retention)  # fmt: skip
    cluster = build_cluster(config, ("cx23",), "test fleet")
    nodes = render_cluster(
        cluster, generate_example_secrets(n.name for n in cluster.nodes),
        charts=load_chart_pins(EXAMPLE_ROOT),
        volume_id={node.name: str(7000 + k) for k, node in enumerate(cluster.control_planes)},
    )  # fmt: skip
    found = []
    for node in nodes[:control_planes]:
        files = ignition_files(node.ignition)
        k3s = yaml.safe_load(files["/etc/rancher/k3s/config.yaml"])
        secret = yaml.safe_load(files["/var/lib/raya/k3s-server-seed/manifests/raya-etcd-s3.yaml"])
        assert k3s["etcd-s3-retention"] == int(secret["stringData"]["etcd-s3-retention"])
        found.append(Server(node.node.name, k3s["etcd-snapshot-retention"],
                            int(secret["stringData"]["etcd-s3-retention"])))  # fmt: skip
    return found


def scheduled_in_bucket(target: bk.Target) -> list[bk.Snapshot]:
    return [s for s in bk.list_snapshots(target) if s.name.startswith("etcd-snapshot-")]


def held(target: bk.Target) -> set[str]:
    """The control planes with a scheduled snapshot in the bucket."""
    return {s.node for s in scheduled_in_bucket(target)}


SIX_HOURS = 6 * 3600


def test_one_control_plane_keeps_its_newest_runs_in_the_bucket_and_on_its_volume(
    target: bk.Target,
) -> None:
    """docs/backups.md: with one control plane, `backupRetention` (5 here) runs of the
    schedule stay in the bucket and on its volume; `raya backup`'s snapshot is not pruned."""
    (server,) = servers_as_rendered(1, 5)
    upload(target, f"on-demand-control-plane-{T0 - 60}", b"before the schedule")
    for run in range(7):
        scheduled_run(target.endpoint, target.bucket, target.folder, [server],
                      T0 + run * SIX_HOURS, JOIN_SECRET)  # fmt: skip
    newest_five = [f"etcd-snapshot-control-plane-{T0 + run * SIX_HOURS}" for run in (6, 5, 4, 3, 2)]
    assert [s.name for s in scheduled_in_bucket(target)] == newest_five
    assert sorted(server.directory, reverse=True) == newest_five
    assert f"on-demand-control-plane-{T0 - 60}" in [s.name for s in bk.list_snapshots(target)]


def test_three_control_planes_share_the_buckets_retention(target: bk.Target) -> None:
    """docs/backups.md: with 3 control planes and `backupRetention` 5, the bucket holds 5
    scheduled snapshots in all (k3s prunes every control plane's together), the newest run's
    3 among them, and every control plane keeps one there while each run uploads; each
    control plane keeps its own 5 on its volume."""
    servers = servers_as_rendered(3, 5)
    assert [(s.name, s.local_retention, s.s3_retention) for s in servers] == [
        ("control-plane", 5, 5), ("control-plane-1", 5, 5), ("control-plane-2", 5, 5),
    ]  # fmt: skip
    for run in range(7):
        # The jitter orders each run differently: here a rotation.
        order = servers[run % 3 :] + servers[: run % 3]
        for offset, server in enumerate(order):
            snapshot(target.endpoint, target.bucket, target.folder, server,
                     T0 + run * SIX_HOURS + offset, JOIN_SECRET)  # fmt: skip
            if run:
                assert held(target) == {s.name for s in servers}, (run, server.name)
    kept = [s.name for s in scheduled_in_bucket(target)]
    assert len(kept) == 5
    last = T0 + 6 * SIX_HOURS
    # The last run (control-plane, control-plane-1, control-plane-2 by the rotation), then
    # the two that uploaded last in the run before it (rotated to start at control-plane-2).
    assert kept == [
        f"etcd-snapshot-control-plane-2-{last + 2}",
        f"etcd-snapshot-control-plane-1-{last + 1}",
        f"etcd-snapshot-control-plane-{last}",
        f"etcd-snapshot-control-plane-1-{last - SIX_HOURS + 2}",
        f"etcd-snapshot-control-plane-{last - SIX_HOURS + 1}",
    ]
    for server in servers:
        assert len(server.directory) == 5
        assert all(f"-{server.name}-" in name for name in server.directory)


def test_a_retention_below_2n_minus_1_leaves_a_control_plane_without_a_snapshot(
    target: bk.Target,
) -> None:
    """Why raya refuses 4 with 3 control planes: the bucket holds the last run (3) and one of
    the run before; the next run's first upload prunes that one, its second the oldest of the
    last run, the only snapshot of a control plane yet to upload."""
    servers = [Server(name, 4, 4) for name in ("control-plane", "control-plane-1",
                                               "control-plane-2")]  # fmt: skip
    for run in range(2):
        scheduled_run(target.endpoint, target.bucket, target.folder, servers,
                      T0 + run * SIX_HOURS, JOIN_SECRET)  # fmt: skip
    first, late = servers[0], servers[1:]  # the next run's jitter puts control-plane last
    for offset, server in enumerate(late):
        snapshot(target.endpoint, target.bucket, target.folder, server,
                 T0 + 2 * SIX_HOURS + offset, JOIN_SECRET)  # fmt: skip
    assert held(target) == {"control-plane-1", "control-plane-2"}
    assert first.directory  # on its own volume it still has them


def test_an_endpoint_whose_name_does_not_resolve_is_asked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What getaddrinfo raises for a name no DNS knows (-2): asked of no resolver. botocore
    # retries a connection that failed (EndpointConnectionError), a name included.
    asked: list[str] = []

    def getaddrinfo(host: str, *args: object, **kwargs: object) -> list[object]:
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    nowhere = bk.Target(endpoint="storage.invalid", bucket="raya-etcd-00000000", folder="raya",
                        region=REGION, access_key="GOOG1EXAMPLE", secret_key="not-a-secret",
                        token_hash=token_hash(JOIN_SECRET))  # fmt: skip
    with pytest.raises(bk.BackupError) as caught:
        bk.list_snapshots(nowhere)
    assert str(caught.value) == (
        "s3://raya-etcd-00000000/raya: storage.invalid: cannot resolve its host ([Errno -2] "
        "Name or service not known), not retried: check this machine's network and DNS"
    )
    assert asked == ["storage.invalid"]
