"""Where a stack's etcd snapshots go, from its config alone: the bucket the Pulumi program
declares (`raya.cloud.program.backups`) and the one the offline `raya render` shows, without
loading Pulumi."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from raya.model.config import GCS_ENDPOINT, StackConfig

# GCS takes `auto` as the signing region of the S3 API (Google's V4 signing docs).
GCS_REGION = "auto"
_BUCKET_NAME_MAX = 63


@dataclass(frozen=True)
class Place:
    """An S3 endpoint, bucket, the cluster's folder in it and the signing region."""

    endpoint: str
    bucket: str
    folder: str
    region: str
    made: bool  # True: a GCS bucket the deployment makes (or adopts from a kit)


def bucket_name(config: StackConfig) -> str:
    """A GCS bucket name (globally unique, 3-63 characters) for this cluster: its name and a
    digest of its zone, which no other deployment of raya shares."""
    digest = hashlib.sha256(config.zone_dns_name.encode()).hexdigest()[:8]
    prefix = config.cluster_name[: _BUCKET_NAME_MAX - len("-etcd-") - len(digest)]
    return f"{prefix}-etcd-{digest}"


def place(config: StackConfig, kit_bucket: str | None = None) -> Place:
    """Where the snapshots of `config`'s cluster go: `raya:backupS3`, else the GCS bucket the
    deployment makes, or `kit_bucket`, the one a recovery kit names and the stack adopts."""
    if config.backup_s3 is not None:
        s3 = config.backup_s3
        return Place(s3.endpoint, s3.bucket, s3.folder, s3.region, made=False)
    bucket = kit_bucket or bucket_name(config)
    return Place(GCS_ENDPOINT, bucket, config.cluster_name, GCS_REGION, made=True)
