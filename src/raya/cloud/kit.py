"""The recovery kit: what a cluster needs to come back after its stack is gone, kept outside it.

`raya destroy` deletes the stack's state, and with it the random server token and the CA pairs
Pulumi generated. k3s records a hash of the server token on every snapshot it uploads and
refuses (so does `raya restore`) a snapshot taken with another token; agents and users trust
the CAs. The kit holds those (the server token, the agent secret, the server and client CA
pairs), where the snapshots are (endpoint, bucket, folder, region, for a bucket raya made its
Google location and project) and the token hash the snapshots carry. `raya up` writes it from
the stack's `recoveryKit` output; a stack with `raya:fromRecoveryKit` is built from one.

Everything in it is equal to cluster-admin: whoever holds the CA keys issues any identity.
The format is versioned; `parse` refuses another format, version or cluster, naming the file
and the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raya.errors import ConfigError, RenderError
from raya.model.config import NAMESPACE, StackConfig
from raya.model.jsonfile import check_keys, read_json
from raya.nodes.identity import (
    CertificateAuthority,
    check_certificate_authority,
    check_join_secret,
    token_hash,
)

FORMAT = "raya-recovery-kit"
VERSION = 1
# Where `raya up` writes a stack's kit without `raya:recoveryKit`: in the project folder,
# which `.gitignore` keeps out of the repository.
DEFAULT_FOLDER = ".raya"
# A bucket raya made in Google Cloud Storage (adopted by a stack built from the kit), or an
# existing S3 bucket named by `raya:backupS3` (which that stack names again).
KINDS = ("gcs", "s3")
_FIELDS = (
    "format",
    "version",
    "clusterName",
    "joinSecret",
    "agentSecret",
    "serverCa",
    "clientCa",
    "backups",
)
_CA_FIELDS = ("certPem", "keyPem")
_BACKUP_FIELDS = (
    "kind",
    "endpoint",
    "bucket",
    "folder",
    "region",
    "location",
    "project",
    "tokenHash",
    "accessKey",
    "secretKey",
)


@dataclass(frozen=True)
class KitBackups:
    kind: str  # one of KINDS
    endpoint: str
    bucket: str
    folder: str
    region: str
    location: str  # the GCS bucket's location; "" for an existing bucket
    project: str  # the GCP project holding the GCS bucket; "" for an existing bucket
    token_hash: str  # what k3s recorded on every snapshot of this cluster
    # The stack's writer key: usable until `raya destroy` deletes it with the stack.
    access_key: str
    secret_key: str


@dataclass(frozen=True)
class RecoveryKit:
    cluster_name: str
    join_secret: str  # k3s' server token
    agent_secret: str
    server_ca: CertificateAuthority
    client_ca: CertificateAuthority
    backups: KitBackups

    def __repr__(self) -> str:  # never the secrets, not even in a traceback
        return f"RecoveryKit(cluster_name={self.cluster_name!r}, bucket={self.backups.bucket!r})"


def path(root: Path, stack: str, setting: str | None) -> Path:
    """Where stack `stack` writes its kit: `raya:recoveryKit`, else
    `.raya/<stack>.recovery-kit.json` in the project folder `root`."""
    if setting is None:
        return root / DEFAULT_FOLDER / f"{stack}.recovery-kit.json"
    return resolve(root, setting)


def resolve(root: Path, setting: str) -> Path:
    """A kit setting's path: relative to the project folder `root`, or absolute."""
    return (root / Path(setting).expanduser()).resolve()


def document(kit: RecoveryKit) -> dict[str, Any]:
    """The kit as its file holds it (JSON)."""
    backups = kit.backups
    return {
        "format": FORMAT,
        "version": VERSION,
        "clusterName": kit.cluster_name,
        "joinSecret": kit.join_secret,
        "agentSecret": kit.agent_secret,
        "serverCa": {"certPem": kit.server_ca.cert_pem, "keyPem": kit.server_ca.key_pem},
        "clientCa": {"certPem": kit.client_ca.cert_pem, "keyPem": kit.client_ca.key_pem},
        "backups": {
            "kind": backups.kind,
            "endpoint": backups.endpoint,
            "bucket": backups.bucket,
            "folder": backups.folder,
            "region": backups.region,
            "location": backups.location,
            "project": backups.project,
            "tokenHash": backups.token_hash,
            "accessKey": backups.access_key,
            "secretKey": backups.secret_key,
        },
    }


def encode(kit: RecoveryKit) -> bytes:
    """The file's bytes: the same kit, the same bytes."""
    return (json.dumps(document(kit), indent=2, sort_keys=True) + "\n").encode()


def load(file: Path, config: StackConfig) -> RecoveryKit:
    """The kit in `file` for a stack of `config`: of this format and version, of the same
    cluster, its snapshots where the stack keeps them; anything else a ConfigError naming the
    file and the field."""
    hint = f" ({NAMESPACE}:fromRecoveryKit names it)"
    kit = parse(read_json(file, "recovery kit", ConfigError, hint), str(file), config.cluster_name)
    backups, store = kit.backups, config.backup_s3
    if backups.kind == "gcs" and store is not None:
        raise ConfigError(
            f"{file}: backups.kind is 'gcs' (bucket {backups.bucket}, adopted by the new stack) "
            f"but the stack sets {NAMESPACE}:backupS3; accepted: no {NAMESPACE}:backupS3"
        )
    where = (backups.endpoint, backups.bucket, backups.folder)
    if backups.kind == "s3" and (store is None or (store.endpoint, store.bucket, store.folder)
                                 != where):  # fmt: skip
        raise ConfigError(
            f"{file}: backups is {backups.endpoint}/{backups.bucket}/{backups.folder}; "
            f"accepted: a stack whose {NAMESPACE}:backupS3 names that endpoint, bucket and "
            "folder, where the kit's snapshots are"
        )
    return kit


def parse(value: object, source: str, cluster_name: str) -> RecoveryKit:
    def fail(field: str, problem: str) -> ConfigError:
        return ConfigError(f"{source}: {field} {problem}")

    if not isinstance(value, dict):
        raise ConfigError(f"{source}: not a recovery kit (a JSON object, format {FORMAT})")
    if value.get("format") != FORMAT:
        raise fail("format", f"is {value.get('format')!r}; accepted: {FORMAT!r}")
    if value.get("version") != VERSION:
        raise fail(
            "version",
            f"is {value.get('version')!r}; accepted: {VERSION} (this raya's kit format)",
        )
    check_keys(value, _FIELDS, _FIELDS, fail, "a field of the kit")
    name = _text(value, "clusterName", fail)
    if name != cluster_name:
        raise fail(
            "clusterName",
            f"is {name!r}, another cluster's; accepted: {cluster_name!r} "
            f"({NAMESPACE}:clusterName of this stack)",
        )
    join_secret = _secret(value, "joinSecret", source, fail)
    agent_secret = _secret(value, "agentSecret", source, fail)
    backups = _backups(value["backups"], fail)
    if backups.token_hash != token_hash(join_secret):
        raise fail(
            "backups.tokenHash",
            "does not match joinSecret: the kit is not one `raya up` wrote whole",
        )
    return RecoveryKit(
        cluster_name=name,
        join_secret=join_secret,
        agent_secret=agent_secret,
        server_ca=_authority(value["serverCa"], "serverCa", source, fail),
        client_ca=_authority(value["clientCa"], "clientCa", source, fail),
        backups=backups,
    )


Fail = Callable[[str, str], ConfigError]


def _text(mapping: Mapping[str, Any], field: str, fail: Fail, prefix: str = "") -> str:
    value = mapping[field]
    if not isinstance(value, str):
        raise fail(f"{prefix}{field}", f"is a {type(value).__name__}; accepted: text")
    return value


def _checked(source: str, error: RenderError) -> ConfigError:
    """A check of `raya.nodes.identity` in the kit's terms: its file and field names (the
    checks name fields, never values)."""
    words = str(error).removeprefix("secrets: ")
    return ConfigError(
        f"{source}: " + words.replace(".cert_pem", ".certPem").replace(".key_pem", ".keyPem")
    )


def _secret(mapping: Mapping[str, Any], field: str, source: str, fail: Fail) -> str:
    value = _text(mapping, field, fail)
    try:
        check_join_secret(field, value)
    except RenderError as error:
        raise _checked(source, error) from None
    return value


def _authority(value: object, field: str, source: str, fail: Fail) -> CertificateAuthority:
    if not isinstance(value, dict):
        raise fail(field, "is not an object; accepted: certPem and keyPem")
    check_keys(value, _CA_FIELDS, _CA_FIELDS, lambda k, p: fail(f"{field}.{k}", p), "a field")
    ca = CertificateAuthority(
        cert_pem=_text(value, "certPem", fail, f"{field}."),
        key_pem=_text(value, "keyPem", fail, f"{field}."),
    )
    try:
        check_certificate_authority(field, ca)
    except RenderError as error:
        raise _checked(source, error) from None
    return ca


def _backups(value: object, fail: Fail) -> KitBackups:
    if not isinstance(value, dict):
        raise fail("backups", "is not an object")
    check_keys(value, _BACKUP_FIELDS, _BACKUP_FIELDS, lambda k, p: fail(f"backups.{k}", p),
               "a field")  # fmt: skip
    texts = {key: _text(value, key, fail, "backups.") for key in _BACKUP_FIELDS}
    if texts["kind"] not in KINDS:
        raise fail("backups.kind", f"is {texts['kind']!r}; accepted: {', '.join(KINDS)}")
    for key in ("endpoint", "bucket", "folder", "region", "tokenHash"):
        if not texts[key]:
            raise fail(f"backups.{key}", "is empty")
    if texts["kind"] == "gcs" and not (texts["location"] and texts["project"]):
        raise fail("backups.location", "and backups.project are required for a GCS bucket")
    return KitBackups(
        kind=texts["kind"],
        endpoint=texts["endpoint"],
        bucket=texts["bucket"],
        folder=texts["folder"],
        region=texts["region"],
        location=texts["location"],
        project=texts["project"],
        token_hash=texts["tokenHash"],
        access_key=texts["accessKey"],
        secret_key=texts["secretKey"],
    )
