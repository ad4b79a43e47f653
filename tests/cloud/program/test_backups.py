"""The snapshots' bucket: a GCS bucket of the cluster's own (versioned, private, protected,
kept by a destroy), a writer with two roles on it alone, and its HMAC key, which reaches the
control plane's k3s through a Secret and nobody else; or an existing S3 bucket."""

from __future__ import annotations

import dataclasses
import hashlib
import re

import pulumi
import pytest
import yaml

from raya.cloud import kit as recovery
from raya.errors import DeployError
from raya.model.config import BackupS3
from raya.nodes.identity import agent_token
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.kits import example_kit
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
    # Nothing on the project nor anywhere else: no other binding names it, and no custom role
    # is bound to it (the DNS accounts' are theirs, tests/cloud/program/test_dns_access.py).
    others = [
        reveal(r.inputs)
        for r in result.resources.values()
        if r.typ != "gcp:storage/bucketIAMMember:BucketIAMMember" and "member" in r.inputs
    ]
    assert others and account.outputs["member"] not in {inputs["member"] for inputs in others}
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
        # The bucket's retention for the whole cluster, read from the Secret it uses.
        "etcd-s3-retention": "28",
    }
    config = yaml.safe_load(files["control-plane"][CP_CONFIG])
    assert config["etcd-s3"] is True
    assert config["etcd-s3-config-secret"] == "raya-etcd-s3"
    assert config["etcd-snapshot-schedule-cron"] == "0 */6 * * *"
    assert config["etcd-snapshot-retention"] == config["etcd-s3-retention"] == 28
    # No S3 setting but the Secret's name and the retention in k3s' own config: k3s reads a
    # Secret only while its config holds no other S3 setting, the retention excepted
    # (pkg/etcd/s3/s3.go, GetClient: "also ignore retention").
    assert [k for k in config if k.startswith("etcd-s3-")] == [
        "etcd-s3-config-secret", "etcd-s3-retention"
    ]
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
        "etcd-s3-retention": "28",
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


def test_a_stack_from_a_kit_imports_its_bucket_and_takes_its_identity() -> None:
    """Under Pulumi's mocks, what the program asks of the engine: the kit's bucket by import
    ID (its project and name), protected and retained as one raya made, the writer new and
    bound on it; no random token nor CA generated; the kit's CA trusted by every node."""
    kit = example_kit()
    mocks = provider_mocks()
    result = run(mocks, kit=kit)
    options = mocks.options["backups"]
    assert options.import_id == "raya-etcd-example"
    assert options.protect and options.retain_on_delete
    inputs = reveal(result.resources["backups"].inputs)
    assert (inputs["name"], inputs["location"]) == ("raya-etcd-example", "EUROPE-WEST3")
    assert not result.of_type("random:index/randomPassword:RandomPassword")
    assert not result.of_type("tls:index/selfSignedCert:SelfSignedCert")
    bindings = result.of_type("gcp:storage/bucketIAMMember:BucketIAMMember").values()
    assert [reveal(b.inputs)["bucket"] for b in bindings] == ["raya-etcd-example"] * 2
    assert result.outputs["backups"]["tokenHash"] == kit.backups.token_hash
    # Every node's join token is the kit's: its CA's hash, its secret (booleans: no secret in
    # a failure's message).
    tokens = {
        node: yaml.safe_load(ignition_files(data)[CP_CONFIG])["token"]
        for node, data in user_data(result).items()
    }
    agents = agent_token(kit.server_ca.cert_pem, kit.agent_secret)
    expected = {node: agents for node in tokens} | {"control-plane": kit.join_secret}
    assert {node: tokens[node] == expected[node] for node in tokens} == dict.fromkeys(
        tokens, True
    )
    # The kit the stack exports (and `raya up` writes) is the same identity and bucket, with
    # the new writer's key.
    exported = recovery.parse(result.outputs["recoveryKit"], "output", "raya")
    same = [
        getattr(exported, part) == getattr(kit, part)
        for part in ("join_secret", "agent_secret", "server_ca", "client_ca")
    ]
    assert same == [True] * 4
    assert (exported.backups.bucket, exported.backups.token_hash) == (
        kit.backups.bucket, kit.backups.token_hash,
    )  # fmt: skip
