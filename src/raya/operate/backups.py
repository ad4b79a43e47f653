"""Backups: k3s' etcd snapshots in object storage, listed, checked and fetched for a restore.

What k3s writes, read in its source (k3s-io/k3s):
- `pkg/etcd/snapshot.go`: a snapshot is named `<etcd-snapshot-name>-<node name>-<unix
  seconds>` (`etcd-snapshot` for the schedule, `on-demand` for `k3s etcd-snapshot save`),
  `.zip` added when compressed.
- `pkg/etcd/s3/s3.go` (`Upload`): the object's key is `<folder>/<name>`, its metadata file's
  `<folder>/.metadata/<name>`; the object carries user metadata `k3s-cluster-id`,
  `k3s-node-name` and `k3s-token-hash`.
- the token hash (`raya.nodes.identity.token_hash`): a snapshot restored with another token
  is unusable (k3s' backup and restore docs), so it is how raya tells its own snapshots from
  another cluster's.

Who takes them, and what retention keeps (pruning "regardless of the node name" since k3s
#8189, the S3 retention a setting of its own since #12669, v1.34.0+k3s1):
- every server runs the schedule itself (`setSnapshotFunction`, after a small random
  jitter): each run makes one snapshot per control plane, named with its node name, so the
  node in a name is the control plane that took it.
- `snapshot` prunes twice after each snapshot. Locally, `snapshotRetention(
  etcd-snapshot-retention, "etcd-snapshot", dir)`: the server's own directory, newest first
  by the time in the name: per control plane. In the bucket, after the upload,
  `s3.go` `SnapshotRetention(ctx, "etcd-snapshot")`: every object under
  `<folder>/etcd-snapshot` but `.metadata/`, whichever server uploaded it, newest first by
  LastModified, past `etcd-s3-retention` deleted: across the whole cluster, with the pruning
  server's retention (read from the config Secret's `etcd-s3-retention` when k3s uses the
  Secret, `config_secret.go`). Neither prefix matches `on-demand`: never pruned.
raya:backupRetention is both retentions (`raya.nodes.render`, docs/backups.md), so with n
control planes the bucket holds the newest runs' snapshots, about retention / n of each.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raya.errors import RayaError
from raya.nodes.identity import SnapshotStore
from raya.nodes.render import JOIN_DROPIN
from raya.operate.roll import POLL, Clock
from raya.operate.status import Check, NodeFacts, bad, ok, unknown

METADATA_DIR = ".metadata"
_NAME = re.compile(r"(?P<prefix>etcd-snapshot|on-demand)-(?P<node>.+)-(?P<unix>\d{9,11})(?:\.zip)?")


class BackupError(RayaError):
    """Object storage that cannot be read, or a snapshot that cannot be restored."""


@dataclass(frozen=True)
class Target(SnapshotStore):
    """Where a cluster's snapshots live, as k3s writes them (`SnapshotStore`), with what
    `raya restore` checks them against. `endpoint` is a host (and port), as k3s'
    `etcd-s3-endpoint` takes it; `insecure` means plain HTTP, as k3s' `etcd-s3-insecure`."""

    token_hash: str  # what k3s records of the cluster's server token on each snapshot
    insecure: bool = False

    @classmethod
    def from_outputs(cls, backups: Mapping[str, Any] | None, stack: str) -> Target:
        """The target the stack's `backups` output names (its keys in clear: never print)."""
        fields = ("endpoint", "bucket", "folder", "region", "accessKey", "secretKey", "tokenHash")
        if not backups or any(not isinstance(backups.get(f), str) for f in fields):
            raise BackupError(f"stack {stack} has no backup bucket in its outputs; run `raya up`")
        return cls(
            endpoint=backups["endpoint"],
            bucket=backups["bucket"],
            folder=backups["folder"],
            region=backups["region"],
            access_key=backups["accessKey"],
            secret_key=backups["secretKey"],
            token_hash=backups["tokenHash"],
            insecure=bool(backups.get("insecure", False)),
        )

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.folder}"


@dataclass(frozen=True)
class Snapshot:
    name: str
    node: str
    taken: datetime.datetime
    size: int  # bytes

    def age(self, now: datetime.datetime) -> datetime.timedelta:
        return now - self.taken


def parse_name(name: str) -> tuple[str, datetime.datetime] | None:
    """The node and time a k3s snapshot name carries, or None for another object."""
    match = _NAME.fullmatch(name)
    if not match:
        return None
    taken = datetime.datetime.fromtimestamp(int(match["unix"]), datetime.UTC)
    return match["node"], taken


def _client(target: Target) -> Any:
    import socket
    import urllib.parse

    import boto3
    from botocore.config import Config

    scheme = "http" if target.insecure else "https"
    # botocore retries a connection that failed, a name that does not resolve included, which
    # will not resolve on the next try either (a resolver that could not answer may).
    host = urllib.parse.urlsplit(f"{scheme}://{target.endpoint}").hostname or target.endpoint
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror as error:
        if error.errno != socket.EAI_AGAIN:
            raise BackupError(
                f"{target.where}: {target.endpoint}: cannot resolve its host ({error}), not "
                "retried: check this machine's network and DNS"
            ) from None
    return boto3.client(
        "s3",
        endpoint_url=f"{scheme}://{target.endpoint}",
        region_name=target.region,
        aws_access_key_id=target.access_key,
        aws_secret_access_key=target.secret_key,
        # Path-style, as k3s' minio client uses for endpoints other than AWS and Aliyun
        # (`bucketLookupType`); GCS and Hetzner Object Storage take both. Checksums only where
        # an operation requires one: botocore >= 1.36 adds CRC32 headers and an aws-chunked
        # body with a checksum trailer to every upload by default, which GCS' interop refuses
        # (SignatureDoesNotMatch: boto/boto3#4400; the clients of gramps-web-api#758,
        # posthog#40593 set these two to `when_required`).
        config=Config(s3={"addressing_style": "path"}, connect_timeout=10, read_timeout=60,
                      retries={"max_attempts": 3}, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"),
    )  # fmt: skip


class _Failing:
    """Turns botocore's failures into one line naming the bucket and what was being done."""

    def __init__(self, target: Target, doing: str, missing: str = "") -> None:
        self.target, self.doing, self.missing = target, doing, missing

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 _: object) -> None:  # fmt: skip
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(error, ClientError):
            answer = error.response.get("Error", {})
            code = str(answer.get("Code", "error"))
            if self.missing and code in ("404", "NoSuchKey"):
                raise BackupError(self.missing) from None
            message = f" ({answer['Message']})" if answer.get("Message") else ""
            raise BackupError(f"{self.target.where}: {self.doing}: {code}{message}") from None
        if isinstance(error, BotoCoreError):
            raise BackupError(f"{self.target.where}: {self.doing}: {error}") from None


# IAM applies a new binding within about 2 minutes, sometimes 7 or more (Google's "Access
# change propagation"); a new HMAC key takes effect in the same way.
PROBE_TIMEOUT = 600.0
PROBE_OBJECT = "raya-probe"
# What a binding or a key not yet in force answers; anything else will not pass by waiting.
_NOT_YET = ("AccessDenied", "InvalidAccessKeyId")
_WHY = {
    "AccessDenied": " (the key's roles on the bucket lack the permission this call needs)",
    "InvalidAccessKeyId": " (the object storage does not know the access key)",
    "SignatureDoesNotMatch": " (the secret key is not the access key's, or a header is refused)",
}


def _code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _listing_refused(client: Any, target: Target) -> str | None:
    """The code a listing of the cluster's folder is refused with, or None if it passes."""
    from botocore.exceptions import ClientError

    try:
        client.list_objects_v2(Bucket=target.bucket, Prefix=f"{target.folder}/", MaxKeys=1)
    except ClientError as error:
        return _code(error)
    return None


def probe(target: Target, clock: Clock, timeout: float = PROBE_TIMEOUT) -> str:
    """Make, with the writer's own key, the calls k3s' first snapshot needs: HEAD the bucket
    (k3s-io/k3s pkg/etcd/s3/s3.go, `GetClient`: `mc.BucketExists`, before any upload), put an
    object in the cluster's folder (`Upload`), delete it (retention). A refusal is asked
    again every POLL seconds until `timeout` (IAM propagation). Returns what was checked; a
    BackupError names the bucket and the call refused otherwise. The object is not a
    snapshot's name: neither `raya backups` nor k3s' retention (prefix `etcd-snapshot`)
    counts it."""
    client = _client(target)
    key = f"{target.folder}/{PROBE_OBJECT}"
    calls: list[tuple[str, Callable[[], object]]] = [
        (f"HEAD bucket {target.bucket}", lambda: client.head_bucket(Bucket=target.bucket)),
        (f"PUT object {key}", lambda: client.put_object(Bucket=target.bucket, Key=key,
                                                        Body=b"raya up: the writer can write")),
        (f"DELETE object {key}", lambda: client.delete_object(Bucket=target.bucket, Key=key)),
    ]  # fmt: skip
    from botocore.exceptions import ClientError

    deadline = clock.now() + timeout
    for call, make in calls:
        doing = f"the writer's key was refused {call}"
        while True:
            with _Failing(target, doing):
                try:
                    make()
                    break
                except ClientError as error:
                    code = _code(error)
                    if code == "403":  # a HEAD's refusal has no body: a listing tells why
                        code = _listing_refused(client, target) or "AccessDenied"
                    if code not in _NOT_YET or clock.now() >= deadline:
                        why = _WHY.get(code, "")
                        raise BackupError(f"{target.where}: {doing}: {code}{why}") from None
            clock.sleep(POLL)
    return (
        f"the writer's key can HEAD bucket {target.bucket} and put and delete "
        f"{key} ({target.endpoint})"
    )


def list_snapshots(target: Target) -> list[Snapshot]:
    """Every snapshot in the cluster's folder, newest first (metadata files and objects
    that are not snapshots left out)."""
    client = _client(target)
    found: list[Snapshot] = []
    with _Failing(target, "cannot list the snapshots"):
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=target.bucket, Prefix=f"{target.folder}/"
        )
        for page in pages:
            for item in page.get("Contents", []):
                key = str(item["Key"])
                relative = key.removeprefix(f"{target.folder}/")
                parsed = parse_name(relative) if "/" not in relative else None
                if parsed:
                    found.append(Snapshot(relative, parsed[0], parsed[1], int(item["Size"])))
    return sorted(found, key=lambda s: (s.taken, s.name), reverse=True)


def check_snapshot(target: Target, name: str) -> Snapshot:
    """Snapshot `name` of this cluster, or a BackupError saying why it cannot be restored:
    not in the bucket, not a k3s snapshot, or taken by a cluster with another token."""
    parsed = parse_name(name)
    if parsed is None:
        raise BackupError(
            f"{name!r} is not a k3s snapshot name (<etcd-snapshot|on-demand>-<node>-<time>); "
            "`raya backups` lists them"
        )
    missing = f"no snapshot {name} in {target.where}; `raya backups` lists them"
    with _Failing(target, f"cannot read snapshot {name}", missing):
        head = _client(target).head_object(Bucket=target.bucket, Key=f"{target.folder}/{name}")
    recorded = head.get("Metadata", {}).get("k3s-token-hash", "")
    if recorded != target.token_hash:
        raise BackupError(
            f"{target.where}/{name} was taken by a cluster with another server token "
            f"(token hash {recorded or 'missing'}, this cluster's {target.token_hash}): "
            "k3s cannot restore it here"
        )
    return Snapshot(name, parsed[0], parsed[1], int(head["ContentLength"]))


def download(target: Target, snapshot: Snapshot, path: Path) -> str:
    """Fetch the snapshot into `path` (0600); returns its sha256, checked against its size."""
    client = _client(target)
    digest = hashlib.sha256()
    size = 0
    with _Failing(target, f"cannot download snapshot {snapshot.name}"):
        body = client.get_object(Bucket=target.bucket, Key=f"{target.folder}/{snapshot.name}")
        with path.open("wb") as file:
            path.chmod(0o600)
            for chunk in body["Body"].iter_chunks(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                file.write(chunk)
    if size != snapshot.size:
        raise BackupError(
            f"{target.where}/{snapshot.name}: downloaded {size:,} bytes of {snapshot.size:,}"
        )
    return digest.hexdigest()


def stale(newest: Snapshot | None, longest_gap: datetime.timedelta,
          now: datetime.datetime) -> str | None:  # fmt: skip
    """Why a control plane's snapshots need attention, given its newest in the bucket: none,
    or the newest older than twice the longest gap between two runs of the schedule (one run
    missed, with room for k3s' jitter and the upload); or None."""
    if newest is None:
        return (
            "none in the bucket: k3s on it is not uploading (a new control plane's first "
            "comes with the schedule's next run)"
        )
    if newest.age(now) > 2 * longest_gap:
        return (
            f"newest {newest.name} is {age_text(newest.age(now))} old, more than twice the "
            f"schedule's {age_text(longest_gap)}"
        )
    return None


def age_text(delta: datetime.timedelta) -> str:
    """A duration as a person reads an age: minutes up to 2 hours, hours up to 3 days."""
    minutes = int(delta.total_seconds() // 60)
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes // 60
    return f"{hours} h" if hours < 72 else f"{hours // 24} days"


def by_node(snapshots: Sequence[Snapshot], control_planes: Sequence[str]) -> list[
    tuple[str, list[Snapshot]]
]:  # fmt: skip
    """The snapshots by the node that took them, each node's newest first: every control
    plane of `control_planes` in its order (with none, an empty list), then the nodes that
    are no longer control planes, the one with the newest snapshot first."""
    taken: dict[str, list[Snapshot]] = {name: [] for name in control_planes}
    for snapshot in sorted(snapshots, key=lambda s: (s.taken, s.name), reverse=True):
        taken.setdefault(snapshot.node, []).append(snapshot)
    return list(taken.items())


# Where k3s keeps local snapshots (`etcd-snapshot-dir`'s default, `${data-dir}/server/db/
# snapshots`), on the control plane's volume; `server/db` is what a rejoining server drops.
K3S_DB = "/var/lib/rancher/k3s/server/db"
SNAPSHOT_DIR = f"{K3S_DB}/snapshots"


@dataclass(frozen=True)
class Step:
    """One command of a restore, run as root on `node`; `upload` is sent on its stdin."""

    node: str
    what: str
    command: tuple[str, ...]
    upload: bool = False


def restore_plan(control_planes: list[str], snapshot: Snapshot, digest: str) -> list[Step]:
    """k3s' restore with embedded etcd (k3s-io/docs, docs/cli/etcd-snapshot.md, "Snapshot
    Restore Steps", multiple servers): every server's k3s stopped; the first reset from the
    snapshot (`--cluster-reset --cluster-reset-restore-path`, which exits when done) and
    started; each other server's etcd data removed, then started, rejoining as a new member.
    Agents keep running.

    The first control plane resets, whichever state it came back in: from its volume, or
    blank or tombstoned and joined to a peer by its datastore guard, which then wrote
    `server:` into a drop-in (`JOIN_DROPIN`). k3s refuses `--cluster-reset` while a server
    URL is set, drop-ins included (k3s-io/k3s pkg/cli/server/server.go, `run`: "cannot
    perform cluster-reset while server URL is set"; pkg/configfilearg/parser.go merges
    config.yaml.d/*.yaml into the flags), so the drop-in goes before the reset; the guard
    removes it too at the next start of a volume holding a datastore. The others keep their
    `server:` (the registration address): they join the reset member through it.

    The snapshot travels from raya over SSH and is checked by its sha256 on the node, then
    restored as a local file with `--etcd-s3=false`: the servers' config says `etcd-s3: true`,
    and with it k3s would fetch the name from S3 with the keys of its config Secret, which it
    cannot read during a reset (no API server: k3s-io/k3s pkg/etcd/s3/config_secret.go,
    `getConfigFromSecret`, core not ready; the docs: "The S3 config Secret cannot be used when
    restoring a snapshot"). Fetching from S3 on the node would need the keys on its command
    line or config; this way no object storage key reaches the node."""
    first, others = control_planes[0], control_planes[1:]
    path = f"{SNAPSHOT_DIR}/{snapshot.name}"
    return [
        *(Step(node, "stop k3s", ("systemctl", "stop", "k3s")) for node in reversed(others)),
        Step(first, "stop k3s", ("systemctl", "stop", "k3s")),
        Step(first, f"copy {snapshot.name} ({snapshot.size:,} bytes) to {path}",
             ("install", "-D", "-m", "0600", "/dev/stdin", path), upload=True),
        Step(first, "check the copy's sha256",
             ("sh", "-c", f"echo '{digest}  {path}' | sha256sum --check --quiet")),
        Step(first, f"remove the join drop-in {JOIN_DROPIN} if there (k3s refuses a reset "
             "while a config file names a server)", ("rm", "-f", JOIN_DROPIN)),
        Step(first, "reset etcd to the snapshot (one member: this server)",
             ("k3s", "server", "--cluster-reset", f"--cluster-reset-restore-path={path}",
              "--etcd-s3=false")),
        Step(first, "start k3s", ("systemctl", "start", "k3s")),
        *(
            step
            for node in others
            for step in (
                Step(node, f"remove its etcd data ({K3S_DB})", ("rm", "-rf", K3S_DB)),
                Step(node, "start k3s: it rejoins as a new member", ("systemctl", "start", "k3s")),
            )
        ),
    ]  # fmt: skip


def wait_for_nodes(
    ask: Callable[[], Mapping[str, NodeFacts] | str], names: Sequence[str], timeout: float,
    clock: Clock, members: Callable[[], Mapping[str, Check]] = dict,
    rejoining: Sequence[str] = (),
) -> str | None:  # fmt: skip
    """Ask the API (`ask`: the nodes, or why it could not be asked) until every node of
    `names` is registered and Ready, and then every etcd member of `members` (its checks
    by "etcd <node>", as `raya status` shows them) healthy: None then; after `timeout`
    seconds, what it last saw.

    The control planes `rejoining` come back as new members: learners until the etcd leader
    promotes them, and until its next tick (15 s, k3s `manageLearners`) their nodes keep the
    `EtcdIsVoter` condition of the member they were before (restored from the snapshot, or
    left from before the restore). So each counts only once it has been seen not voting
    since the restore, then voting."""
    deadline = clock.now() + timeout
    unseen = {f"etcd {name}" for name in rejoining}
    while True:
        nodes = ask()
        if isinstance(nodes, str):
            seen = nodes
        else:
            waiting = [name for name in names if not (name in nodes and nodes[name].ready)]
            seen = ", ".join(
                f"{name} {'NotReady' if name in nodes else 'not registered'}" for name in waiting
            )
            if not waiting:
                checks = members()
                unseen -= {key for key, check in checks.items() if not check.healthy}
                seen = "; ".join(
                    f"{key}: {check.text}" if not check.healthy
                    else f"{key}: not yet seen rejoining ({check.text}, as before the restore)"
                    for key, check in checks.items()
                    if not check.healthy or key in unseen
                )  # fmt: skip
                if not seen:
                    return None
        if clock.now() >= deadline:
            return seen
        clock.sleep(POLL)


def health(
    backups: Mapping[str, Any] | None, stack: str, control_planes: Sequence[str],
    longest_gap: datetime.timedelta, now: datetime.datetime,
) -> dict[str, Check]:  # fmt: skip
    """`raya status`'s backups lines: one per control plane (`backups <node>`), its newest
    snapshot in the bucket and its age, judged against the schedule (`stale`); one unknown
    line `backups` when the bucket cannot be read."""
    try:
        snapshots = list_snapshots(Target.from_outputs(backups, stack))
    except BackupError as error:
        return {"backups": unknown(str(error))}
    checks: dict[str, Check] = {}
    for node, taken in by_node(snapshots, control_planes)[: len(control_planes)]:
        newest = taken[0] if taken else None
        problem = stale(newest, longest_gap, now)
        if problem is not None:
            checks[f"backups {node}"] = bad(problem)
        else:
            assert newest is not None  # stale() finds a problem in none
            checks[f"backups {node}"] = ok(
                f"newest {newest.name}, {age_text(newest.age(now))} old"
            )
    return checks
