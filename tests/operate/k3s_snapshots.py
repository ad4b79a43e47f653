"""k3s' scheduled snapshots and their retention, as k3s applies them, over a real S3 server.

Read in k3s-io/k3s (pruning "regardless of the node name" since #8189, 2023; the S3
retention a setting of its own, `etcd-s3-retention`, since #12669, v1.34.0+k3s1, before the
pinned v1.36.5+k3s1):
- `pkg/etcd/snapshot.go`, `setSnapshotFunction`: every server runs the schedule itself
  (`etcd-snapshot-schedule-cron`), each run after a small random jitter, so each run of the
  schedule makes one snapshot per server.
- `pkg/etcd/snapshot.go`, `snapshot`: the name is `<etcd-snapshot-name>-<node name>-<unix
  seconds>` (`etcd-snapshot` for the schedule); the file is saved in the server's own
  snapshot directory, then pruned there (`snapshotRetention`), then uploaded (`s3.go`,
  `Upload`), then the bucket pruned (`SnapshotRetention`), in that order.
- `snapshotRetention(retention, "etcd-snapshot", dir)`: the server's own directory, files
  whose name starts with the prefix, newest first by the time in the name, all past
  `etcd-snapshot-retention` removed: per server.
- `pkg/etcd/s3/s3.go`, `SnapshotRetention(ctx, "etcd-snapshot")`: every object listed
  (recursive) under `path.Join(folder, "etcd-snapshot")` but the `.metadata/` ones, whichever
  server uploaded it, sorted newest first by LastModified, all past the retention deleted
  with their metadata file (`DeleteSnapshot`): across the whole cluster, with the pruning
  server's retention (`etcd-s3-retention`; when k3s uses the config Secret, the Secret's key
  of that name, `config_secret.go`, `getConfigFromSecret` since #12669, as rancher/k3k's
  port of it reads it too).
- on-demand snapshots (`on-demand-...`) match neither prefix: the schedule's retention never
  counts or removes them.

k3s sorts by LastModified alone (Go's `sort.Slice`, leaving equal times in no set order).
Real runs are the schedule's gap apart; a test's uploads fall within a second or two, so
equal times are ordered by the time in the name, the order in which k3s took them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from raya.operate.backups import parse_name
from tests.operate.s3 import client, k3s_upload

SCHEDULED = "etcd-snapshot"  # k3s' etcd-snapshot-name default: what both retentions match
METADATA = ".metadata"


@dataclass
class Server:
    """One k3s server: its node name, its two retentions as its config gives them, and its
    snapshot directory's file names."""

    name: str
    local_retention: int
    s3_retention: int
    directory: list[str] = field(default_factory=list)


def _taken(name: str) -> int:
    parsed = parse_name(name)
    assert parsed is not None, name
    return int(parsed[1].timestamp())


def local_retention(server: Server) -> None:
    """`snapshotRetention`: the server's own scheduled files past its retention removed."""
    scheduled = sorted((n for n in server.directory if n.startswith(SCHEDULED)), key=_taken,
                       reverse=True)  # fmt: skip
    for name in scheduled[server.local_retention :]:
        server.directory.remove(name)


def s3_retention(endpoint: str, bucket: str, folder: str, retention: int) -> list[str]:
    """`SnapshotRetention`: every server's scheduled snapshots of the folder, newest first,
    all past `retention` deleted with their metadata; returns the names deleted."""
    s3 = client(endpoint)
    found: list[tuple[object, int, str]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{folder}/{SCHEDULED}"
    ):
        for item in page.get("Contents", []):
            key = str(item["Key"])
            if key.rsplit("/", 2)[-2] == METADATA:
                continue
            name = key.rsplit("/", 1)[1]
            found.append((item["LastModified"], _taken(name), name))
    found.sort(reverse=True)
    deleted = [name for _, _, name in found[retention:]]
    for name in deleted:
        s3.delete_object(Bucket=bucket, Key=f"{folder}/{name}")
        s3.delete_object(Bucket=bucket, Key=f"{folder}/{METADATA}/{name}")
    return deleted


def snapshot(endpoint: str, bucket: str, folder: str, server: Server, unix: int,
             join_secret: str) -> None:  # fmt: skip
    """One server's scheduled snapshot: taken, its directory pruned, uploaded, the bucket
    pruned with its own retention."""
    name = f"{SCHEDULED}-{server.name}-{unix}"
    server.directory.append(name)
    local_retention(server)
    k3s_upload(endpoint, bucket, folder, name, b"etcd", join_secret)
    s3_retention(endpoint, bucket, folder, server.s3_retention)


def scheduled_run(endpoint: str, bucket: str, folder: str, servers: Sequence[Server],
                  unix: int, join_secret: str) -> None:  # fmt: skip
    """One run of the schedule: each server in turn, in the order its jitter gave, a second
    apart."""
    for offset, server in enumerate(servers):
        snapshot(endpoint, bucket, folder, server, unix + offset, join_secret)
