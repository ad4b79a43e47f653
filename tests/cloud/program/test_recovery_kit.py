"""A cluster that comes back from nothing: `raya destroy` driven through the engine model
(`engine.py`: what it keeps is what the engine keeps), then `raya up` of a stack built from the
recovery kit the first `raya up` wrote: the kept bucket imported, not created; the server token,
agent secret and CA pairs the kit's; the token hash the destroyed stack's."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from raya.cloud import kit as recovery
from raya.errors import ConfigError
from raya.model.config import BackupS3, load_stack_config
from raya.nodes.identity import agent_token, token_hash
from tests.cloud.program.engine import BUCKET_TYPE, Cloud, deployed_cloud
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.kits import example_kit
from tests.cloud.program.test_program import EXAMPLE, provider_mocks
from tests.runner import invoke

CP_CONFIG = "/etc/rancher/k3s/config.yaml"
BUCKET_URN = f"urn:pulumi:prod::raya::{BUCKET_TYPE}::backups"


@pytest.fixture
def cloud(project: Path, github: list[str], monkeypatch: pytest.MonkeyPatch) -> Cloud:
    """Stack `prod` deployed through the engine model, then `raya up` (which writes the kit)."""
    example = provider_mocks()
    cloud = deployed_cloud(project, monkeypatch, example.zones, example.snapshots)
    up = raya(cloud, "up")
    assert up.exit_code == 0, up.output
    return cloud


def raya(cloud: Cloud, *args: str) -> Any:
    return invoke([*args, "--root", str(cloud.root)], env={"COLUMNS": "200"})


def kit_file(cloud: Cloud) -> Path:
    return cloud.root / ".raya" / "prod.recovery-kit.json"


def set_setting(cloud: Cloud, key: str, value: str) -> None:
    path = cloud.root / "Pulumi.prod.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"][f"raya:{key}"] = value
    path.write_text(yaml.safe_dump(document))


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def node_config(cloud: Cloud, node: str) -> dict[str, Any]:
    server = cloud.engine.snapshot[f"urn:pulumi:prod::raya::hcloud:index/server:Server::{node}"]
    return dict(yaml.safe_load(ignition_files(server.inputs["userData"])[CP_CONFIG]))


def test_up_writes_the_kit_0600_with_the_stacks_identity(cloud: Cloud) -> None:
    path = kit_file(cloud)
    assert path.stat().st_mode & 0o777 == 0o600
    kit = recovery.load(path, load_stack_config(cloud.root / "Pulumi.prod.yaml"))
    state = cloud.engine.snapshot
    join = state["urn:pulumi:prod::raya::random:index/randomPassword:RandomPassword::join-secret"]
    ca = state["urn:pulumi:prod::raya::tls:index/selfSignedCert:SelfSignedCert::server-ca"]
    assert digest(kit.join_secret) == digest(join.outputs["result"])
    assert kit.server_ca.cert_pem == ca.outputs["certPem"]
    backups = cloud.engine.exported["backups"][0]
    assert (kit.backups.bucket, kit.backups.token_hash) == (backups["bucket"], backups["tokenHash"])
    assert (kit.backups.kind, kit.backups.location) == ("gcs", "EUROPE-WEST3")


def test_up_writes_the_kit_where_the_stack_says(cloud: Cloud) -> None:
    set_setting(cloud, "recoveryKit", "kits/lab.json")
    up = raya(cloud, "up")
    assert up.exit_code == 0, up.output
    chosen = cloud.root / "kits" / "lab.json"
    assert chosen.stat().st_mode & 0o777 == 0o600
    assert chosen.read_bytes() == kit_file(cloud).read_bytes()  # the same cluster's kit
    assert f"wrote the recovery kit {chosen} (mode 0600)" in up.output


def test_destroy_through_the_engine_leaves_the_bucket_alone(cloud: Cloud) -> None:
    state = dict(cloud.engine.snapshot)
    bucket = state[BUCKET_URN].id
    destroyed = raya(cloud, "destroy", "--yes")
    assert destroyed.exit_code == 0, destroyed.output
    # The engine deleted every resource of the state, the bucket in the state only.
    assert sorted(name for op, name in cloud.engine.steps if op == "delete") == sorted(
        r.name for r in state.values()
    )
    assert cloud.engine.snapshot == {}
    assert cloud.hetzner.servers == {} and cloud.hetzner.volumes == {}
    assert list(cloud.engine.storage.buckets) == [bucket]
    assert cloud.engine.storage.log == [f"create bucket {bucket}"]
    assert f"kept the recovery kit {kit_file(cloud)}" in destroyed.output
    assert kit_file(cloud).exists()


def test_destroy_with_delete_backups_deletes_the_bucket_through_the_engine(cloud: Cloud) -> None:
    bucket = cloud.engine.snapshot[BUCKET_URN].id
    destroyed = raya(cloud, "destroy", "--yes", "--delete-backups")
    assert destroyed.exit_code == 0, destroyed.output
    assert cloud.engine.storage.buckets == {}
    assert cloud.engine.storage.log[-1] == f"delete bucket {bucket}"
    assert f"kept the recovery kit {kit_file(cloud)}: its bucket is deleted" in destroyed.output


def test_up_after_destroy_without_the_kit_meets_the_kept_bucket(cloud: Cloud) -> None:
    """What the kit is for: a new stack's bucket of the same name is refused by GCS (409)."""
    bucket = cloud.engine.snapshot[BUCKET_URN].id
    assert raya(cloud, "destroy", "--yes").exit_code == 0
    again = raya(cloud, "up")
    assert again.exit_code == 1
    assert "Error 409" in again.output and f"(bucket {bucket})" in again.output
    assert list(cloud.engine.storage.buckets) == [bucket]


def test_up_from_the_kit_adopts_the_bucket_and_keeps_the_identity(cloud: Cloud) -> None:
    before = json.loads(kit_file(cloud).read_text())
    exported = cloud.engine.exported["backups"][0]
    bucket = cloud.engine.snapshot[BUCKET_URN].id
    assert raya(cloud, "destroy", "--yes").exit_code == 0
    set_setting(cloud, "fromRecoveryKit", ".raya/prod.recovery-kit.json")
    up = raya(cloud, "up")
    assert up.exit_code == 0, up.output
    steps = cloud.engine.steps
    # Imported, then updated in place to what the program declares (the importer reads
    # forceDestroy as false); never created: no second create reached Cloud Storage.
    assert [(op, n) for op, n in steps if n == "backups"] == [("import", "backups"),
                                                              ("update", "backups")]  # fmt: skip
    assert cloud.engine.storage.log == [f"create bucket {bucket}"]
    adopted = cloud.engine.snapshot[BUCKET_URN]
    assert adopted.id == bucket and adopted.protect and adopted.retain_on_delete
    assert adopted.inputs["forceDestroy"] is True
    # The identity is the kit's: no new random token nor CA in the state...
    names = {r.name for r in cloud.engine.snapshot.values()}
    assert not names & {"join-secret", "agent-secret", "server-ca", "client-ca"}
    # ...the token hash the destroyed stack's (the snapshots'), the join secrets the kit's...
    assert cloud.engine.exported["backups"][0]["tokenHash"] == exported["tokenHash"]
    assert before["backups"]["tokenHash"] == token_hash(before["joinSecret"])
    # (compared by digest: no secret in a failure's message)
    config = node_config(cloud, "control-plane")
    ca = before["serverCa"]["certPem"]
    assert digest(config["token"]) == digest(before["joinSecret"])  # the first server's
    assert digest(config["agent-token"]) == digest(before["agentSecret"])
    agent = node_config(cloud, "agent-0")["token"]
    assert digest(agent) == digest(agent_token(ca, before["agentSecret"]))
    # ...and the kit refreshed in place: the same identity, the new writer's key.
    after = json.loads(kit_file(cloud).read_text())
    for key in ("joinSecret", "agentSecret", "serverCa", "clientCa"):
        assert digest(json.dumps(after[key])) == digest(json.dumps(before[key]))
    assert digest(after["backups"]["secretKey"]) != digest(before["backups"]["secretKey"])
    # A second up imports nothing again: the state holds the import ID.
    assert raya(cloud, "up").exit_code == 0
    assert ("same", "backups") in cloud.engine.steps
    assert not [op for op, _ in cloud.engine.steps if op in ("import", "create")]


def test_a_living_stack_pointed_at_its_own_kit_imports_and_replaces_nothing(
    cloud: Cloud,
) -> None:
    """The bucket it made is in its state under the import ID (its name): no import, no
    replacement; the token and CAs the same values, now from the kit."""
    servers = {n: r.id for n, r in cloud.engine.snapshot.items() if "Server::" in n}
    set_setting(cloud, "fromRecoveryKit", ".raya/prod.recovery-kit.json")
    up = raya(cloud, "up")
    assert up.exit_code == 0, up.output
    assert ("same", "backups") in cloud.engine.steps
    assert not [s for s in cloud.engine.steps if s[0] in ("import", "create", "replace")]
    assert {n: r.id for n, r in cloud.engine.snapshot.items() if "Server::" in n} == servers
    # Only the generated secrets' own records leave the state (nothing of them in a cloud).
    assert sorted(n for op, n in cloud.engine.steps if op == "delete") == sorted(
        ["join-secret", "agent-secret", "server-ca", "server-ca-key", "client-ca",
         "client-ca-key"]
    )  # fmt: skip


def test_a_kit_of_another_cluster_is_refused_before_anything_changes(cloud: Cloud) -> None:
    other = cloud.root / "other.kit.json"
    other.write_bytes(recovery.encode(example_kit("lab")))
    assert raya(cloud, "destroy", "--yes").exit_code == 0
    set_setting(cloud, "fromRecoveryKit", "other.kit.json")
    refused = raya(cloud, "up")
    assert refused.exit_code == 1
    assert (
        f"{other}: clusterName is 'lab', another cluster's; accepted: 'raya'" in refused.output
    )
    assert cloud.engine.snapshot == {} and cloud.hetzner.servers == {}
    # Refused before Pulumi runs: no update was asked of the engine.
    assert [op for op, _ in cloud.stack.calls if op == "up"] == ["up", "up"]  # the 2 before


def test_up_never_overwrites_another_clusters_kit(cloud: Cloud) -> None:
    kit_file(cloud).write_bytes(recovery.encode(example_kit()))
    refused = raya(cloud, "up")
    assert refused.exit_code == 1
    assert f"{kit_file(cloud)}: backups.tokenHash is another cluster's" in refused.output


def kit_error(document: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        recovery.parse(document, "kit.json", "raya")
    return str(caught.value)


def test_a_kit_of_another_format_or_version_is_refused() -> None:
    document = recovery.document(example_kit())
    assert kit_error({**document, "version": 2}) == (
        "kit.json: version is 2; accepted: 1 (this raya's kit format)"
    )
    assert kit_error({**document, "format": "x"}) == (
        "kit.json: format is 'x'; accepted: 'raya-recovery-kit'"
    )
    assert kit_error({**document, "joinSecret": "abcdef.0123456789abcdef"}).startswith(
        "kit.json: joinSecret is not usable"
    )
    changed = {**document, "backups": {**document["backups"], "tokenHash": "0" * 12}}
    assert kit_error(changed) == (
        "kit.json: backups.tokenHash does not match joinSecret: the kit is not one `raya up` "
        "wrote whole"
    )
    other = example_kit()
    swapped = {**document, "serverCa": {**document["serverCa"], "keyPem": other.server_ca.key_pem}}
    assert kit_error(swapped) == "kit.json: serverCa.keyPem does not belong to serverCa.certPem"
    assert recovery.parse(document, "kit.json", "raya") == recovery.parse(
        json.loads(recovery.encode(recovery.parse(document, "kit.json", "raya"))), "x", "raya"
    )


def test_a_gcs_kit_is_refused_for_a_stack_with_an_existing_bucket(tmp_path: Path) -> None:
    path = tmp_path / "kit.json"
    path.write_bytes(recovery.encode(example_kit()))
    config = dataclasses.replace(
        EXAMPLE.config, backup_s3=BackupS3("minio.lab:9000", "lab", "us-east-1", "raya")
    )
    with pytest.raises(ConfigError) as caught:
        recovery.load(path, config)
    assert str(caught.value) == (
        f"{path}: backups.kind is 'gcs' (bucket raya-etcd-example, adopted by the new stack) "
        "but the stack sets raya:backupS3; accepted: no raya:backupS3"
    )


def test_the_engine_refuses_to_destroy_a_protected_resource(cloud: Cloud) -> None:
    """The double's own rule (`DeleteStep.Apply`): without raya's unprotecting first, the
    destroy stops at the first protected resource, the bucket kept with the rest."""
    with pytest.raises(auto.CommandError, match="refusing to delete protected resource"):
        cloud.stack.destroy()
    assert BUCKET_URN in cloud.engine.snapshot
