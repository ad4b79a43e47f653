"""`raya up` ends by checking the writer's access to the backups' bucket, with the writer's own
key from the stack's outputs: end to end through the engine model running the real program
(tests/cloud/program/engine.py), the bucket and key on the object storage stand-in
(tests/operate/s3.py), whose IAM applies the program's bindings only when the test's clock
says they have propagated."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from raya.commands import deploy as commands
from raya.operate import backups as bk
from raya.operate import roll as rl
from tests.cloud.program.engine import Cloud, deployed_cloud
from tests.cloud.program.test_program import provider_mocks
from tests.operate.s3 import ObjectStorage, role_permissions
from tests.runner import invoke

# Before the suite's fixture points it at a bucket of its own (tests/conftest.py).
STACK_TARGET = commands.backup_target
CLOCK = rl.Clock  # the class, before a test replaces it with its time
BINDING = "gcp:storage/bucketIAMMember:BucketIAMMember"


@pytest.fixture
def cloud(project: Path, github: list[str], monkeypatch: pytest.MonkeyPatch) -> Cloud:
    example = provider_mocks()
    return deployed_cloud(project, monkeypatch, example.zones, example.snapshots)


def on_the_stand_in(cloud: Cloud, s3: ObjectStorage, monkeypatch: pytest.MonkeyPatch,
                    roles: list[str] | None = None) -> bk.Target:  # fmt: skip
    """The stack's bucket made on the stand-in and its HMAC key issued there; the program's
    bindings for the writer on it (or `roles`) made, not yet in force. `raya up` reaches the
    stand-in with the target its outputs name."""

    def target(root: Path, stack: str) -> bk.Target:
        return dataclasses.replace(STACK_TARGET(root, stack), endpoint=s3.endpoint)

    monkeypatch.setattr(commands, "backup_target", target)
    found = target(cloud.root, "prod")
    if found.bucket not in {b["Name"] for b in s3.client().list_buckets()["Buckets"]}:
        s3.client().create_bucket(Bucket=found.bucket)
    s3.issue_key(found.access_key, found.secret_key)
    state = cloud.engine.snapshot.values()
    member = next(r.outputs["member"] for r in state if r.name == "backups-writer")
    declared = [r.inputs["role"] for r in state
                if r.typ == BINDING and r.inputs["member"] == member]  # fmt: skip
    s3.grant(found.access_key, found.bucket, role_permissions(roles or declared))
    return found


class Propagating:
    """Time for `raya up` that moves only when it sleeps; IAM propagates after 90 s."""

    def __init__(self, s3: ObjectStorage) -> None:
        self.s3, self.t = s3, 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        if self.t >= 90:
            self.s3.propagate()

    def clock(self) -> rl.Clock:
        return CLOCK(now=self.now, sleep=self.sleep)


def test_up_ends_by_checking_the_writers_access(
    cloud: Cloud, s3: ObjectStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = on_the_stand_in(cloud, s3, monkeypatch)
    time = Propagating(s3)
    monkeypatch.setattr(rl, "Clock", lambda: time.clock())
    result = invoke(["up", "--root", str(cloud.root)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        f"backups: the writer's key can HEAD bucket {target.bucket} and put and delete "
        f"raya/raya-probe ({s3.endpoint})"
    )
    assert time.t == 90.0  # asked every 5 s until IAM had propagated
    assert target.secret_key not in result.output and target.access_key not in result.output


def test_up_fails_naming_the_bucket_and_the_refused_call(
    cloud: Cloud, s3: ObjectStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grant raya made before (objectAdmin, without storage.buckets.get): the deployment
    is done, `raya up` says the writer cannot HEAD the bucket, and exits 1."""
    target = on_the_stand_in(cloud, s3, monkeypatch, roles=["roles/storage.objectAdmin"])
    time = Propagating(s3)
    monkeypatch.setattr(rl, "Clock", lambda: time.clock())
    result = invoke(["up", "--root", str(cloud.root)])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        f"error: backups: s3://{target.bucket}/raya: the writer's key was refused HEAD bucket "
        f"{target.bucket}: AccessDenied (the key's roles on the bucket lack the permission this "
        "call needs); k3s cannot store snapshots there. The deployment itself is done: fix the "
        "writer's access to the bucket and run `raya up` again"
    )
    assert time.t == bk.PROBE_TIMEOUT  # 600 s: IAM's propagation, and then some
