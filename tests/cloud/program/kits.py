"""Recovery kits for tests: a throwaway identity (raya.nodes.identity's example secrets) and a
GCS bucket, in the format `raya up` writes."""

from __future__ import annotations

from raya.cloud.kit import KitBackups, RecoveryKit
from raya.nodes.identity import generate_example_secrets, token_hash


def example_kit(cluster_name: str = "raya") -> RecoveryKit:
    made = generate_example_secrets(["control-plane"])
    store = made.snapshot_store
    assert store is not None
    return RecoveryKit(
        cluster_name=cluster_name,
        join_secret=made.join_secret,
        agent_secret=made.agent_secret,
        server_ca=made.server_ca,
        client_ca=made.client_ca,
        backups=KitBackups(
            kind="gcs",
            endpoint=store.endpoint,
            bucket=store.bucket,
            folder=cluster_name,
            region=store.region,
            location="EUROPE-WEST3",
            project="raya-example",
            token_hash=token_hash(made.join_secret),
            access_key=store.access_key,
            secret_key=store.secret_key,
        ),
    )
