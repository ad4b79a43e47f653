"""The admin kubeconfig: built from the deployment's own PKI, merged without touching others.

The deployment holds the client CA, so it issues the admin's client certificate itself; the
server CA it generated is what the kubeconfig trusts. Nobody copies `/etc/rancher/k3s/k3s.yaml`
over SSH, and nobody trusts the API endpoint on first use.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from raya.errors import RayaError
from raya.model.jsonfile import DuplicateKey, loads_yaml

# Kubernetes reads the certificate's organisations as the user's groups: this one is bound to
# cluster-admin by every cluster (k3s included) out of the box.
ADMIN_GROUP = "system:masters"
ADMIN_USER = "raya-admin"
API_PORT = 6443
_SECTIONS = ("clusters", "users", "contexts")


class KubeconfigError(RayaError):
    """A kubeconfig that cannot be read or written."""


def api_server_url(zone_dns_name: str) -> str:
    """The API's address: the control plane's record, a name the server certificate holds."""
    return f"https://cp.{zone_dns_name.rstrip('.')}:{API_PORT}"


def build(context: str, server: str, server_ca_pem: str, cert_pem: str, key_pem: str) -> str:
    """A kubeconfig with one cluster, one user and one context, all named `context`."""

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {"server": server, "certificate-authority-data": b64(server_ca_pem)},
            }
        ],
        "users": [
            {
                "name": context,
                "user": {
                    "client-certificate-data": b64(cert_pem),
                    "client-key-data": b64(key_pem),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(document, sort_keys=False)


def merge(existing: dict[str, Any], new: dict[str, Any], source: str) -> dict[str, Any]:
    """`existing` with `new`'s cluster, user and context added, replacing entries of the same
    name only; other entries and the current context stay (set only when there is none)."""
    merged = dict(existing)
    for section in _SECTIONS:
        entries = existing.get(section) or []
        if not isinstance(entries, list) or not all(
            isinstance(entry, dict) and "name" in entry for entry in entries
        ):
            raise KubeconfigError(f"{source}: '{section}' is not a list of named entries")
        names = {entry["name"] for entry in new[section]}
        merged[section] = [e for e in entries if e["name"] not in names] + list(new[section])
    merged.setdefault("apiVersion", "v1")
    merged.setdefault("kind", "Config")
    if not merged.get("current-context"):
        merged["current-context"] = new["current-context"]
    return merged


def read(path: Path) -> dict[str, Any]:
    """The kubeconfig at `path`, or an empty one if there is no such file."""
    try:
        document = loads_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except DuplicateKey as error:  # which of the two to keep is not for a merge to guess
        raise KubeconfigError(f"{path}: {error}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise KubeconfigError(f"{path}: not a readable kubeconfig: {error}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping)")
    return document


def api_client(text: str, server: str | None = None) -> Any:
    """An API client (the official `kubernetes` one) trusting only the kubeconfig's CA;
    `server` replaces its address (a tunnel, a test)."""
    from kubernetes import config as k8s_config

    document = yaml.safe_load(text)
    if server:
        document["clusters"][0]["cluster"]["server"] = server
    try:
        api = k8s_config.new_client_from_config_dict(document)  # type: ignore[no-untyped-call]
    except (k8s_config.ConfigException, ValueError, KeyError, TypeError) as error:
        raise KubeconfigError(f"the stack's kubeconfig is unusable: {error}") from None
    api.configuration.retries = False  # one answer per question: the callers retry, or report
    return api


def reason(error: BaseException) -> str:
    """One line saying why the API did not answer, from whatever its client raised: urllib3
    wraps the cause (`MaxRetryError.reason`, a `ProtocolError`'s last argument)."""
    while True:
        inner = getattr(error, "reason", None)
        if not isinstance(inner, BaseException) and error.args:
            inner = error.args[-1]
        if not isinstance(inner, BaseException) or inner is error:
            break
        error = inner
    text = str(getattr(error, "reason", None) or error)
    return text.splitlines()[0][:200] if text else type(error).__name__
