"""Where k3s' etcd snapshots go: a Google Cloud Storage bucket of the cluster's own, or the
existing S3-compatible bucket `raya:backupS3` names.

GCS speaks the S3 API at storage.googleapis.com with HMAC keys (Google's "Cloud Storage
interoperability" docs), which k3s' S3 client (minio-go) signs like any S3 endpoint. The
bucket keeps every object's earlier versions, so a deleted or overwritten snapshot can be
brought back; the deployment protects it (`protect`: no update deletes or replaces it) and
keeps it on `raya destroy` (`retain_on_delete`) unless `--delete-backups` is given.

Its service account holds two predefined roles on the bucket alone, no project-wide role: an
HMAC key leaked from the control plane reads and writes snapshots, and nothing else. Together
they grant exactly what k3s and raya call, by Google's "IAM permissions for XML methods"
(cloud.google.com/storage/docs/access-control/iam-xml):
- HEAD bucket, storage.buckets.get: every S3 client k3s builds checks the bucket first
  (k3s-io/k3s pkg/etcd/s3/s3.go, `(*Controller).GetClient`, `mc.BucketExists`), and so does
  the probe that ends `raya up`; without it k3s logs "failed to test for existence of
  bucket" and keeps every snapshot on the node alone;
- GET bucket, storage.objects.list: k3s' retention and `raya backups`;
- PUT object and multipart uploads, storage.objects.create, storage.multipartUploads.*:
  k3s' `Upload` (minio-go uploads a large snapshot in parts);
- GET/HEAD object, storage.objects.get: `raya restore`;
- DELETE object, storage.objects.delete: k3s' retention, and a replaced object.
`roles/storage.legacyBucketWriter` holds all but the last read (storage.buckets.get,
storage.objects.create/delete/list, storage.multipartUploads.*), `roles/storage.
legacyObjectReader` storage.objects.get alone ("IAM roles for Cloud Storage",
cloud.google.com/storage/docs/access-control/iam-roles); both can only be bound on a bucket.
`roles/storage.objectAdmin` would not do: it lacks storage.buckets.get. A custom role would
be a project resource, needs `roles/iam.roleAdmin` for the deploy identity, and its ID stays
reserved up to 37 days after a delete (IAM "Create and manage custom roles"), which a
destroy then up of the same stack would run into.

A stack built from a recovery kit adopts the bucket the kit names (the kept bucket of a
destroyed stack) with Pulumi's `import` option: the engine reads the existing bucket into the
state instead of creating one (GCS would answer 409 to a create of a taken name), then updates
it in place to the declared settings (pulumi/pulumi `pkg/resource/deploy/step_generator.go`,
`generateSteps`: an import step, then the steps of a normal diff against what was read). The
adopted bucket is protected and retained like one raya made. Its writer (the service account,
its roles, its HMAC key) is new: `raya destroy` deleted the old one with the stack.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from raya.cloud.kit import KitBackups, RecoveryKit
from raya.cloud.program.secrets import account_id
from raya.cloud.snapshots import GCS_REGION, bucket_name
from raya.errors import DeployError
from raya.model.config import GCS_ENDPOINT, NAMESPACE, StackConfig
from raya.nodes.identity import SnapshotStore, token_hash

# The writer's roles on the bucket alone (the module's docstring: exactly k3s' and raya's
# calls), by the name of their binding.
BUCKET_ROLES = {
    "backups-writer-bucket": "roles/storage.legacyBucketWriter",
    "backups-writer-objects": "roles/storage.legacyObjectReader",
}
# Hetzner's network zones -> the nearest Google Cloud region: snapshots stay on the continent.
GCS_LOCATIONS = {
    "eu-central": "EUROPE-WEST3",  # Frankfurt
    "us-east": "US-EAST4",  # Northern Virginia (Hetzner: Ashburn)
    "us-west": "US-WEST1",  # Oregon (Hetzner: Hillsboro)
    "ap-southeast": "ASIA-SOUTHEAST1",  # Singapore
}
# Earlier versions of a snapshot are kept this long after k3s prunes or replaces it.
NONCURRENT_DAYS = 30


@dataclass(frozen=True)
class BackupTarget:
    """What k3s and `raya backups` need: the S3 endpoint, bucket, folder, keys (secrets)."""

    endpoint: str
    bucket: pulumi.Output[str]
    folder: str
    region: str
    access_key: pulumi.Output[str]
    secret_key: pulumi.Output[str]
    kind: str = "s3"  # raya.cloud.kit.KINDS: "gcs" for a bucket raya made (or adopted)
    location: pulumi.Input[str] = ""  # a GCS bucket's
    project: pulumi.Input[str] = ""  # a GCS bucket's

    def kit(self, join_secret: pulumi.Output[str]) -> pulumi.Output[KitBackups]:
        """The recovery kit's share: where the snapshots are, with which keys, and the token
        hash they carry."""
        values = pulumi.Output.all(
            self.bucket, self.access_key, self.secret_key, join_secret, self.location,
            self.project,
        )  # fmt: skip
        return pulumi.Output.secret(
            values.apply(
                lambda v: KitBackups(
                    kind=self.kind,
                    endpoint=self.endpoint,
                    bucket=v[0],
                    folder=self.folder,
                    region=self.region,
                    location=v[4],
                    project=v[5],
                    token_hash=token_hash(v[3]),
                    access_key=v[1],
                    secret_key=v[2],
                )
            )
        )

    def store(self) -> pulumi.Output[SnapshotStore]:
        """The control plane's share: the same values, as k3s' config Secret holds them."""
        return pulumi.Output.secret(
            pulumi.Output.all(self.bucket, self.access_key, self.secret_key).apply(
                lambda v: SnapshotStore(
                    endpoint=self.endpoint,
                    bucket=v[0],
                    folder=self.folder,
                    region=self.region,
                    access_key=v[1],
                    secret_key=v[2],
                )
            )
        )

    def outputs(self, join_secret: pulumi.Output[str]) -> pulumi.Output[dict[str, str]]:
        """What `raya backups` and `raya restore` read: where, with which keys, and the hash
        k3s records of the server token on each snapshot, which tells this cluster's
        snapshots from another's without the token itself."""
        values = pulumi.Output.all(self.bucket, self.access_key, self.secret_key, join_secret)
        return pulumi.Output.secret(
            values.apply(
                lambda v: {
                    "endpoint": self.endpoint,
                    "bucket": v[0],
                    "folder": self.folder,
                    "region": self.region,
                    "accessKey": v[1],
                    "secretKey": v[2],
                    "tokenHash": token_hash(v[3]),
                }
            )
        )


def _bucket(config: StackConfig, kit: RecoveryKit | None) -> gcp.storage.Bucket:
    """The bucket raya made, or with `kit` the one it names, adopted as it is (its name and
    location are the kit's; its project is whichever holds it, as the import reads it)."""
    labels = {"managed_by": config.cluster_name}
    adopted = kit.backups if kit is not None else None
    return gcp.storage.Bucket(
        "backups",
        name=adopted.bucket if adopted else bucket_name(config),
        location=adopted.location if adopted else GCS_LOCATIONS[config.network_zone],
        uniform_bucket_level_access=True,
        public_access_prevention="enforced",
        versioning=gcp.storage.BucketVersioningArgs(enabled=True),
        lifecycle_rules=[
            gcp.storage.BucketLifecycleRuleArgs(
                action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                    days_since_noncurrent_time=NONCURRENT_DAYS, with_state="ARCHIVED"
                ),
            )
        ],
        # Used only by `raya destroy --delete-backups`, which lifts retain_on_delete in the
        # state: every other destroy leaves the bucket, and no update may delete it.
        force_destroy=True,
        labels=labels,
        opts=pulumi.ResourceOptions(
            protect=True,
            retain_on_delete=True,
            # Decided at creation: a later change of the zone or of the network zone (either
            # would re-create a bucket) leaves the bucket and its snapshots where they are.
            ignore_changes=["name", "location"],
            # By its name, its id in the state: a stack that made the bucket itself and is
            # then pointed at its own kit has it in the state under that id, which is no
            # import (step_generator.go: an import is a goal ID other than the old one).
            import_=adopted.bucket if adopted else None,
        ),
    )


def define_backups(config: StackConfig, kit: RecoveryKit | None = None) -> BackupTarget:
    """The snapshots' bucket and the keys k3s writes with; with `kit`, the kit's bucket."""
    if config.backup_s3:
        return _existing(config)
    bucket = _bucket(config, kit)
    account = gcp.serviceaccount.Account(
        "backups-writer",
        account_id=account_id(config.cluster_name, "backups"),
        display_name=f"{config.cluster_name} backups",
        description=f"k3s of the {config.cluster_name} cluster: writes its etcd snapshots",
    )
    for binding, role in BUCKET_ROLES.items():
        gcp.storage.BucketIAMMember(binding, bucket=bucket.name, role=role, member=account.member)
    key = gcp.storage.HmacKey(
        "backups-writer-hmac",
        service_account_email=account.email,
        opts=pulumi.ResourceOptions(additional_secret_outputs=["secret"]),
    )
    return BackupTarget(
        endpoint=GCS_ENDPOINT,
        bucket=bucket.name,
        folder=config.cluster_name,
        region=GCS_REGION,
        access_key=pulumi.Output.secret(key.access_id),
        secret_key=pulumi.Output.secret(key.secret),
        kind="gcs",
        location=bucket.location,
        project=bucket.project,
    )


def _existing(config: StackConfig) -> BackupTarget:
    store = config.backup_s3
    assert store is not None
    settings = pulumi.Config(NAMESPACE)

    def key(name: str) -> pulumi.Output[str]:
        value = settings.get_secret(name)
        if value is None:
            raise DeployError(
                f"{NAMESPACE}:backupS3 names bucket {store.bucket} but "
                f"{NAMESPACE}:{name} is not set; set it with "
                f"`pulumi config set --secret {NAMESPACE}:{name}`"
            )
        return pulumi.Output.secret(value)

    return BackupTarget(
        endpoint=store.endpoint,
        bucket=pulumi.Output.from_input(store.bucket),
        folder=store.folder,
        region=store.region,
        access_key=key("backupS3AccessKey"),
        secret_key=key("backupS3SecretKey"),
    )
