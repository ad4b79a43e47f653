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
from botocore.config import Config
from botocore.exceptions import ClientError

from raya.cloud.program.backups import BUCKET_ROLES
from raya.nodes.identity import token_hash
from raya.operate import backups as bk
from raya.operate import status as st
from raya.operate.roll import Clock
from tests.cloud.program.mocks import Run, reveal
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
        "the newest snapshot is 12 h old, more than twice the schedule's 6 h"
    )
    assert bk.stale(None, six_hours, now) == "no snapshot in the bucket yet"


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
        ("control-plane", ("k3s", "server")),
        ("control-plane", ("systemctl", "start")),
        ("control-plane-1", ("rm", "-rf")),
        ("control-plane-1", ("systemctl", "start")),
        ("control-plane-2", ("rm", "-rf")),
        ("control-plane-2", ("systemctl", "start")),
    ]
    reset = steps[5].command
    # A local file: S3 off for the reset, though config.yaml says `etcd-s3: true` (k3s' docs:
    # "To restore from a local snapshot file, where an etcd-s3 backup configuration is
    # present, add the argument --etcd-s3=false").
    assert reset == (
        "k3s", "server", "--cluster-reset", f"--cluster-reset-restore-path={path}",
        "--etcd-s3=false",
    )  # fmt: skip
    assert steps[3].upload and not any(s.upload for s in steps if s is not steps[3])
    assert f"{'ab' * 32}  {path}" in steps[4].command[2]
    assert steps[7].command == ("rm", "-rf", "/var/lib/rancher/k3s/server/db")
    single = bk.restore_plan(["control-plane"], snapshot, "ab" * 32)
    assert [s.node for s in single] == ["control-plane"] * 5


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
