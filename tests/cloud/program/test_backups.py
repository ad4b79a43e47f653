"""The snapshots' bucket: a GCS bucket of the cluster's own (versioned, private, protected,
kept by a destroy), a writer with two roles on it alone, and its HMAC key, which reaches the
control plane's k3s through a Secret and nobody else; or an existing S3 bucket."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

import pulumi
import pytest
import yaml
from pulumi import automation as auto

from raya.cloud import deploy
from raya.errors import DeployError
from raya.model.config import BackupS3
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import is_secret, reveal
from tests.cloud.program.test_program import EXAMPLE, provider_mocks, run, user_data

BUCKET = "gcp:storage/bucket:Bucket"
# Written to the seed on the root disk, copied onto the volume's manifests at boot.
SECRET_FILE = "/var/lib/raya/k3s-server-seed/manifests/raya-etcd-s3.yaml"
CP_CONFIG = "/etc/rancher/k3s/config.yaml"


def test_the_bucket_is_private_versioned_protected_and_kept_by_a_destroy() -> None:
    mocks = provider_mocks()
    result = run(mocks)
    (bucket,) = result.of_type(BUCKET).values()
    inputs = reveal(bucket.inputs)
    # Globally unique: the cluster's name and a digest of its zone.
    assert re.fullmatch(r"raya-etcd-[0-9a-f]{8}", inputs["name"])
    assert inputs["location"] == "EUROPE-WEST3"  # eu-central's nearest: Frankfurt
    assert inputs["versioning"] == {"enabled": True}
    assert inputs["uniformBucketLevelAccess"] is True
    assert inputs["publicAccessPrevention"] == "enforced"
    # Old versions of pruned snapshots go after 30 days.
    (rule,) = inputs["lifecycleRules"]
    assert rule["action"] == {"type": "Delete"}
    assert rule["condition"]["daysSinceNoncurrentTime"] == 30
    assert mocks.options["backups"].protect
    assert mocks.options["backups"].retain_on_delete


def test_the_bucket_stays_when_the_zone_changes() -> None:
    mocks = provider_mocks()
    before = run(mocks)
    moved = dataclasses.replace(EXAMPLE.config, managed_subdomain="k8s")
    after = run(mocks, dataclasses.replace(EXAMPLE, config=moved))
    assert "backups" not in after.replaced and "primary" in after.replaced
    assert after.resources["backups"].id == before.resources["backups"].id


def test_the_writer_holds_two_legacy_roles_on_the_bucket_and_no_project_role() -> None:
    """What they grant together is checked against k3s' calls on the object storage
    stand-in (tests/operate/test_backups.py); here, where they are bound."""
    mocks = provider_mocks()
    result = run(mocks)
    account = result.resources["backups-writer"]
    bindings = result.of_type("gcp:storage/bucketIAMMember:BucketIAMMember").values()
    assert sorted((reveal(b.inputs) for b in bindings), key=lambda b: b["role"]) == [
        {
            "bucket": result.resources["backups"].outputs["name"],
            "role": role,
            "member": account.outputs["member"],
        }
        for role in ("roles/storage.legacyBucketWriter", "roles/storage.legacyObjectReader")
    ]
    # Nothing on the project: no project binding, no custom role (a project resource).
    assert not result.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")
    project_roles = result.of_type("gcp:projects/iAMMember:IAMMember").values()
    assert account.outputs["member"] not in {reveal(r.inputs)["member"] for r in project_roles}
    (key,) = result.of_type("gcp:storage/hmacKey:HmacKey").values()
    assert reveal(key.inputs)["serviceAccountEmail"] == account.outputs["email"]
    assert "secret" in key.secret_outputs


def test_the_control_plane_alone_gets_the_keys_through_a_secret() -> None:
    result = run(provider_mocks())
    (key,) = result.of_type("gcp:storage/hmacKey:HmacKey").values()
    files = {node: ignition_files(data) for node, data in user_data(result).items()}
    secret = yaml.safe_load(files["control-plane"][SECRET_FILE])
    assert secret["metadata"] == {
        "name": "raya-etcd-s3",
        "namespace": "kube-system",
        "labels": {"app.kubernetes.io/managed-by": "raya"},
    }
    assert secret["stringData"] == {
        "etcd-s3-endpoint": "storage.googleapis.com",
        "etcd-s3-bucket": result.resources["backups"].outputs["name"],
        "etcd-s3-folder": "raya",
        "etcd-s3-region": "auto",
        "etcd-s3-access-key": key.outputs["accessId"],
        "etcd-s3-secret-key": key.outputs["secret"],
    }
    config = yaml.safe_load(files["control-plane"][CP_CONFIG])
    assert config["etcd-s3"] is True
    assert config["etcd-s3-config-secret"] == "raya-etcd-s3"
    assert config["etcd-snapshot-schedule-cron"] == "0 */6 * * *"
    assert config["etcd-snapshot-retention"] == 28
    # No S3 setting but the Secret's name in k3s' own config: k3s reads a Secret only while
    # its config holds no other S3 setting (pkg/etcd/s3/s3.go, GetClient).
    assert not [k for k in config if k.startswith("etcd-s3-") and k != "etcd-s3-config-secret"]
    for node, node_files in files.items():
        if node != "control-plane":
            assert not any(key.outputs["secret"].encode() in data for data in node_files.values())


def test_the_output_is_a_secret_with_what_raya_backups_reads() -> None:
    result = run(provider_mocks())
    (key,) = result.of_type("gcp:storage/hmacKey:HmacKey").values()
    join_secret = result.resources["join-secret"].outputs["result"]
    backups = result.outputs["backups"]
    assert backups == {
        "endpoint": "storage.googleapis.com",
        "bucket": result.resources["backups"].outputs["name"],
        "folder": "raya",
        "region": "auto",
        "accessKey": key.outputs["accessId"],
        "secretKey": key.outputs["secret"],
        # k3s' token hash: sha256 of the server token's secret, its first 12 hex digits.
        "tokenHash": hashlib.sha256(join_secret.encode()).hexdigest()[:12],
    }
    assert join_secret not in str(backups)


def test_an_existing_bucket_takes_the_keys_from_secret_settings() -> None:
    store = BackupS3("fsn1.your-objectstorage.com", "team-backups", "fsn1", "raya-prod")
    cluster = dataclasses.replace(
        EXAMPLE, config=dataclasses.replace(EXAMPLE.config, backup_s3=store)
    )
    pulumi.runtime.set_all_config(
        {"raya:backupS3AccessKey": "AK-TEST-1234", "raya:backupS3SecretKey": "sk-test-5678"},
        secret_keys=["raya:backupS3AccessKey", "raya:backupS3SecretKey"],
    )
    try:
        result = run(provider_mocks(), cluster)
    finally:
        pulumi.runtime.set_all_config({})
    assert not result.of_type(BUCKET)
    assert not result.of_type("gcp:storage/hmacKey:HmacKey")
    secret = yaml.safe_load(ignition_files(user_data(result)["control-plane"])[SECRET_FILE])
    assert secret["stringData"] == {
        "etcd-s3-endpoint": "fsn1.your-objectstorage.com",
        "etcd-s3-bucket": "team-backups",
        "etcd-s3-folder": "raya-prod",
        "etcd-s3-region": "fsn1",
        "etcd-s3-access-key": "AK-TEST-1234",
        "etcd-s3-secret-key": "sk-test-5678",
    }


def test_an_existing_bucket_without_its_keys_is_refused() -> None:
    store = BackupS3("fsn1.your-objectstorage.com", "team-backups", "fsn1", "raya-prod")
    cluster = dataclasses.replace(
        EXAMPLE, config=dataclasses.replace(EXAMPLE.config, backup_s3=store)
    )
    pulumi.runtime.set_all_config({})
    with pytest.raises(DeployError, match=r"raya:backupS3AccessKey is not set"):
        run(provider_mocks(), cluster)


def test_user_data_stays_secret_with_the_keys_in_it() -> None:
    result = run(provider_mocks())
    control_plane = result.resources["control-plane"]
    assert is_secret(control_plane.inputs["userData"])


class _State:
    """What `deploy._unprotect` needs of an Automation API stack: export and import."""

    def __init__(self) -> None:
        self.resources = [
            {"urn": "urn:pulumi:prod::raya::gcp:storage/bucket:Bucket::backups",
             "protect": True, "retainOnDelete": True},
            {"urn": "urn:pulumi:prod::raya::hcloud:index/server:Server::control-plane",
             "protect": True},
        ]  # fmt: skip
        self.imported: list[Any] = []

    def export_stack(self) -> Any:
        return auto.Deployment(version=3, deployment={"resources": self.resources})

    def import_stack(self, state: Any) -> None:
        self.imported.append(state.deployment["resources"])


@pytest.mark.parametrize("delete_backups", [False, True])
def test_a_destroy_keeps_the_bucket_unless_asked(delete_backups: bool) -> None:
    stack = _State()
    deploy._unprotect(stack, None, release_retained=delete_backups)  # type: ignore[arg-type]
    ((bucket, server),) = stack.imported
    assert not bucket["protect"] and not server["protect"]
    # Kept in the state, a destroy leaves the bucket where it is (Pulumi's retainOnDelete).
    assert bucket["retainOnDelete"] is not delete_backups
