"""`raya ssh`: reach a node as `core`, trusting only the host key the deployment gave it.

Pure: the node's entry in the stack outputs, its known_hosts line and the ssh command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from raya.errors import DeployError
from raya.nodes.render import HOST_KEY_ANNOTATION

USER = "core"


def find_node(servers: Mapping[str, Any], wanted: str) -> tuple[str, Mapping[str, Any]]:
    """The node called `wanted`: by name (`agent-1`), DNS label (`a1`) or DNS name."""
    for name, entry in sorted(servers.items()):
        dns_name = str(entry.get("dnsName", ""))
        if wanted in (name, dns_name, dns_name.rstrip("."), dns_name.split(".", 1)[0]):
            return name, entry
    raise DeployError(
        f"no node {wanted!r} in the stack; accepted: {', '.join(sorted(servers)) or 'none'} "
        "(or their DNS labels)"
    )


def published_entry(node: Mapping[str, Any]) -> dict[str, str]:
    """An autoscaled node's entry, as `known_hosts` and `ssh_command` take it, from its Node
    object read over the API trusting only the cluster's CA: its name, its public address
    (ExternalIP, which Hetzner's cloud controller sets) and the host key it published with its
    kubelet's credentials (annotation `HOST_KEY_ANNOTATION`). No key published, no entry:
    never trust on first use."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    key = (meta.get("annotations") or {}).get(HOST_KEY_ANNOTATION)
    if not key:
        raise DeployError(
            f"node {name} has published no SSH host key yet (annotation {HOST_KEY_ANNOTATION}, "
            "written by its raya-host-key-publish.service once k3s has joined); raya ssh "
            "trusts no other: try again once the node is Ready"
        )
    addresses = {
        a.get("type"): a.get("address") for a in (node.get("status") or {}).get("addresses") or []
    }
    address = addresses.get("ExternalIP")
    if not address:
        raise DeployError(f"node {name} has no ExternalIP yet (the cloud controller sets it)")
    return {"dnsName": name, "ipv4": str(address), "hostKey": str(key)}


def known_hosts(entry: Mapping[str, Any]) -> str:
    """The node's one known_hosts line: its DNS name and address, its deployed host key."""
    key = str(entry.get("hostKey", "")).split()
    if len(key) < 2 or key[0] != "ssh-ed25519":
        raise DeployError(
            f"{entry.get('dnsName', 'the node')} has no host key in the stack outputs; "
            "run `raya up` to deploy one"
        )
    names = [str(entry["dnsName"]).rstrip("."), str(entry["ipv4"])]
    return f"{','.join(names)} {key[0]} {key[1]}\n"


def ssh_command(
    entry: Mapping[str, Any], known_hosts_file: Path, command: Sequence[str]
) -> list[str]:
    """ssh to the node's address as core, refusing any host key but the known one."""
    return [
        "ssh",
        "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts_file}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        # The node also makes rsa/ecdsa keys of its own; only the deployed one is trusted.
        "-o", "HostKeyAlgorithms=ssh-ed25519",
        f"{USER}@{entry['ipv4']}",
        *(["--", *command] if command else []),
    ]  # fmt: skip
