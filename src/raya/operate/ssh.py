"""`raya ssh`: reach a node as `core`, trusting only the host key the deployment gave it.

Pure: the node's entry in the stack outputs, its known_hosts line and the ssh command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from raya.errors import DeployError

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
