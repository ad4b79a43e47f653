"""The one config of an autoscaled pool's nodes (issue 39, part 2): it fits every node the
autoscaler makes (no planned name, address, host key nor node password), keeps the hardening
of a planned agent, and stays under Hetzner's user_data limit."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from raya.errors import RenderError
from raya.model.fleet import Cluster, Fleet, Pool, build_cluster
from raya.nodes.identity import ClusterSecrets
from raya.nodes.render import RenderedNode, render_pool
from tests.nodes.tools import ignition_files, ignition_validate, nmcli_parse
from tests.support import require_tool

K3S_CONFIG = "/etc/rancher/k3s/config.yaml"
KEYFILE = "/etc/NetworkManager/system-connections/enp7s0.nmconnection"
ADDRESS_SCRIPT = "/usr/local/bin/raya-node-address"
# Hetzner's user_data limit, 32 KiB.
LIMIT = 32 * 1024
BURST = Pool(
    "burst",
    "cpx31",
    0,
    ipaddress.IPv4Network("10.0.16.0/24"),
    labels=(("tier", "burst"),),
    taints=("burst=yes:PreferNoSchedule",),
    min_size=0,
    max_size=8,
)


def with_pools(cluster: Cluster, *pools: Pool, agents: tuple[str, ...] = ("cx23",)) -> Cluster:
    return build_cluster(cluster.config, Fleet(agents=agents, pools=pools), "agents.json")


def files(ignition: bytes) -> dict[str, str]:
    return {path: data.decode() for path, data in ignition_files(ignition).items()}


def units(ignition: bytes) -> dict[str, str]:
    return {
        unit["name"]: unit.get("contents", "")
        for unit in json.loads(ignition)["systemd"]["units"]
    }


def test_one_config_fits_every_node_of_the_pool(
    cluster: Cluster, secrets: ClusterSecrets, tmp_path: Path
) -> None:
    fleet = with_pools(cluster, BURST)
    (pool,) = fleet.autoscaled
    rendered = render_pool(fleet, pool, secrets)
    assert rendered.group == "raya-burst"  # the example's clusterName, then the pool's
    size = len(rendered.ignition)
    assert size <= LIMIT, size
    path = tmp_path / "burst.ign"
    path.write_bytes(rendered.ignition)
    validated = ignition_validate(path)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    written = files(rendered.ignition)
    # Nothing of one node: no hostname, no host key, no node password, no address.
    for path_of_one_node in (
        "/etc/hostname",
        "/etc/ssh/ssh_host_ed25519_key",
        "/etc/ssh/ssh_host_ed25519_key.pub",
        "/etc/rancher/node/password",
    ):
        assert path_of_one_node not in written
    k3s = yaml.safe_load(written[K3S_CONFIG])
    assert "node-name" not in k3s and "node-ip" not in k3s
    assert k3s["node-label"] == ["tier=burst"]
    assert k3s["node-taint"] == ["burst=yes:PreferNoSchedule"]
    assert k3s["server"] == "https://10.0.1.10:6443"
    assert "10.0.16." not in rendered.butane
    # The fleet around it changes nothing of it: other agents, other pools.
    grown = with_pools(
        cluster,
        Pool("web", "cx33", 3, ipaddress.IPv4Network("10.0.1.64/28")),
        BURST,
        agents=("cx23", "cx33"),
    )
    assert render_pool(grown, BURST, secrets).ignition == rendered.ignition


def test_it_joins_with_the_agent_token_only(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    fleet = with_pools(cluster, BURST)
    pool_config = yaml.safe_load(files(render_pool(fleet, BURST, secrets).ignition)[K3S_CONFIG])
    planned = yaml.safe_load(files(rendered["agent-0"].ignition)[K3S_CONFIG])
    # K10<CA hash>::node:<agent secret>, the planned agents' token: never the server's.
    assert pool_config["token"] == planned["token"]
    assert "::node:" in pool_config["token"]
    assert secrets.join_secret not in render_pool(fleet, BURST, secrets).butane


def test_it_keeps_the_hardening_of_a_planned_agent(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    fleet = with_pools(cluster, BURST)
    ignition = render_pool(fleet, BURST, secrets).ignition
    planned = rendered["agent-0"].ignition
    pool_files, planned_files = files(ignition), files(planned)
    # The metadata guard, SELinux relabel of k3s, Zincati's drop-in, SSH keys fetched at
    # boot, the certificate check: the same files as a planned agent's, byte for byte.
    for path in (
        "/etc/nftables/raya-metadata-guard.nft",
        "/etc/tmpfiles.d/raya-k3s-selinux.conf",
        "/etc/zincati/config.d/90-raya-disable-auto-updates.toml",
        "/usr/local/bin/raya-ssh-keys",
        "/etc/raya/ssh-key-handles",
        "/usr/local/bin/raya-node-metadata",
        "/usr/local/bin/raya-k3s-certs",
    ):
        assert pool_files[path] == planned_files[path], path
    pool_units, planned_units = units(ignition), units(planned)
    for name in (
        "raya-metadata-guard.service",
        "raya-ssh-keys.timer",
        "raya-private-network.service",
        "raya-node-metadata.service",
    ):
        assert pool_units[name] == planned_units[name], name
    # k3s waits for the node's name and address as it waits for the metadata.
    k3s = pool_units["k3s-agent.service"].splitlines()
    assert {"Requires=raya-node-address.service", "After=raya-node-address.service"} <= set(k3s)
    assert "raya-node-address.service" not in planned_units


def test_its_private_interface_takes_the_address_hetzner_gives(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    """NetworkManager's own reading of the keyfile: DHCP on enp7s0 (Hetzner's private network
    serves one, a /32 per server), the MTU and the routes through the gateway of a planned
    node, never the default route."""
    fleet = with_pools(cluster, BURST)
    keyfile = files(render_pool(fleet, BURST, secrets).ignition)[KEYFILE]
    understood = nmcli_parse(keyfile)
    ipv4 = understood["ipv4"]
    assert ipv4["method"] == "auto"
    assert "address1" not in ipv4
    assert ipv4["never-default"] == "true"
    assert ipv4["ignore-auto-dns"] == "true"
    # No route from the lease: Hetzner's has offered the metadata service through the gateway.
    assert ipv4["ignore-auto-routes"] == "true"
    assert ipv4["may-fail"] == "false"
    assert ipv4["route1"] == "10.0.0.1/32"
    assert ipv4["route2"] == "10.0.0.0/8,10.0.0.1"
    assert understood["ethernet"]["mtu"] == "1450"


def test_the_node_takes_its_servers_name_and_the_address_on_its_private_interface(
    cluster: Cluster, secrets: ClusterSecrets, tmp_path: Path
) -> None:
    """The address script run in a network namespace of its own: `enp7s0` a real (veth)
    interface that gets its /32 only after the script's first try, as a lease that comes late,
    and a stand-in of Hetzner's metadata service serving `hostname` as a text body under
    /hetzner/v1/metadata (docs.hetzner.cloud, "Server metadata")."""
    require_tool("unshare")
    require_tool("ip")
    require_tool("curl")
    fleet = with_pools(cluster, BURST)
    ignition = render_pool(fleet, BURST, secrets).ignition
    exec_start = next(
        line.removeprefix("ExecStart=").split()
        for line in units(ignition)["raya-node-address.service"].splitlines()
        if line.startswith("ExecStart=")
    )
    script, url, interface, dropin = exec_start
    assert (script, url, interface) == (
        ADDRESS_SCRIPT,
        "http://169.254.169.254/hetzner/v1/metadata",
        "enp7s0",
    )
    assert dropin == "/etc/rancher/k3s/config.yaml.d/50-node-address.yaml"
    executable = tmp_path / "raya-node-address"
    executable.write_text(files(ignition)[ADDRESS_SCRIPT])
    executable.chmod(0o755)
    served = tmp_path / "metadata"
    (served / "hetzner/v1/metadata").mkdir(parents=True)
    # The autoscaler's name for the server: its node group and a random number in hex.
    (served / "hetzner/v1/metadata/hostname").write_text("raya-burst-5f1d2e3c4b5a6978")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    # A `sleep` that lets the lease arrive instead of waiting for it.
    (stubs / "sleep").write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path / "sleeps"}\n'
        "ip address add 10.0.16.7/32 dev enp7s0 2>/dev/null || true\n"
    )
    (stubs / "sleep").chmod(0o755)
    output = tmp_path / "50-node-address.yaml"
    namespace = (
        "set -e; ip link set lo up; ip link add enp7s0 type veth peer name peer0; "
        "ip link set enp7s0 up; "
        f"{sys.executable} -m http.server 8169 --bind 127.0.0.1 --directory {served} "
        ">/dev/null 2>&1 & server=$!; "
        "until curl -fsS -o /dev/null http://127.0.0.1:8169/hetzner/v1/metadata/hostname; do "
        "/bin/sleep 0.1; done; "
        f'PATH={stubs}:$PATH {executable} http://127.0.0.1:8169/hetzner/v1/metadata enp7s0 '
        f"{output}; status=$?; kill $server; exit $status"
    )
    result = subprocess.run(
        ["unshare", "-n", "sh", "-c", namespace],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("no IPv4 address on enp7s0 yet") == 1
    assert (tmp_path / "sleeps").read_text().split() == ["2"]
    assert yaml.safe_load(output.read_text()) == {
        "node-name": "raya-burst-5f1d2e3c4b5a6978",
        "node-ip": "10.0.16.7",
    }
    assert not output.with_name(output.name + ".tmp").exists()


def test_only_an_autoscaled_pool_of_the_cluster_renders(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    fleet = with_pools(cluster, BURST)
    other = dataclasses.replace(BURST, name="other")
    with pytest.raises(RenderError, match="other: not an autoscaled pool of cluster raya"):
        render_pool(fleet, other, secrets)


def test_the_node_publishes_its_own_host_key_with_its_kubelets_credentials(
    cluster: Cluster, secrets: ClusterSecrets, tmp_path: Path
) -> None:
    """The publishing script, run with a stand-in `k3s` that refuses once (the API not there
    yet) and records what it is asked; the key is a real one, from ssh-keygen, as
    sshd-keygen makes it."""
    ssh_keygen = require_tool("ssh-keygen")
    fleet = with_pools(cluster, BURST)
    ignition = render_pool(fleet, BURST, secrets).ignition
    unit = units(ignition)["raya-host-key-publish.service"]
    lines = unit.splitlines()
    assert "Wants=sshd-keygen@ed25519.service" in lines
    assert ("After=sshd-keygen@ed25519.service raya-node-address.service k3s-agent.service"
            in lines)  # fmt: skip
    assert "WantedBy=multi-user.target" in lines
    exec_start = next(
        line.removeprefix("ExecStart=").split() for line in lines if line.startswith("ExecStart=")
    )
    script, k3s, kubeconfig, dropin, public, annotation = exec_start
    assert (k3s, kubeconfig, dropin, public, annotation) == (
        "/usr/local/bin/k3s",
        "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",  # k3s' agent: the kubelet's own
        "/etc/rancher/k3s/config.yaml.d/50-node-address.yaml",
        "/etc/ssh/ssh_host_ed25519_key.pub",
        "raya.dev/ssh-host-key-ed25519",
    )
    executable = tmp_path / "publish"
    executable.write_text(files(ignition)[script])
    executable.chmod(0o755)
    key = tmp_path / "ssh_host_ed25519_key"
    subprocess.run([ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", "root@host", "-f",
                    str(key)], check=True)  # fmt: skip
    (tmp_path / "kubelet.kubeconfig").write_text("apiVersion: v1\n")
    (tmp_path / "50-node-address.yaml").write_text(
        'node-name: "raya-burst-5f1d2e3c4b5a6978"\nnode-ip: "10.0.16.7"\n'
    )
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    calls = tmp_path / "calls"
    (stubs / "k3s").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" >> {calls}\necho --- >> {calls}\n'
        f'[ "$(grep -c -- --- {calls})" -ge 2 ]\n'
    )
    (stubs / "sleep").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "sleeps"}\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    result = subprocess.run(
        [str(executable), str(stubs / "k3s"), str(tmp_path / "kubelet.kubeconfig"),
         str(tmp_path / "50-node-address.yaml"), f"{key}.pub", annotation],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": f"{stubs}:/usr/bin:/bin"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    algorithm, blob, _ = Path(f"{key}.pub").read_text().split()
    first, second, _ = calls.read_text().split("---\n")
    assert first == second
    assert first.splitlines() == [
        "kubectl", "--kubeconfig", str(tmp_path / "kubelet.kubeconfig"), "annotate",
        "--overwrite", "node", "raya-burst-5f1d2e3c4b5a6978",
        f"raya.dev/ssh-host-key-ed25519={algorithm} {blob}",
    ]  # fmt: skip
    assert (tmp_path / "sleeps").read_text().split() == ["5"]
