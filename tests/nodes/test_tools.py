"""The rendered configs under the real tools: ignition-validate, the Ignition binary itself
applying them to a scratch root, NetworkManager's keyfile reader, systemd-analyze and
systemd-tmpfiles, and the public address script against a local metadata server."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from raya.fleet import Cluster
from raya.github_keys import UserKeys, authorized_keys
from raya.identity import ClusterSecrets
from raya.render import RenderedNode, render_cluster
from tests.nodes.conftest import CHARTS
from tests.nodes.fakes import many_users, with_users
from tests.nodes.tools import (
    IgnitionFailed,
    apply_ignition,
    ignition_files,
    ignition_validate,
    nmcli_parse,
    prepare_for_systemd,
    scratch_root,
    systemd_verify,
)
from tests.support import http_server, require_tool, routes

pytestmark = pytest.mark.tools

KEYFILE = "/etc/NetworkManager/system-connections/enp7s0.nmconnection"
KEY_DIR = "/home/core/.ssh/authorized_keys.d"
# What the image itself provides to the units (k3s is put there by Packer).
IMAGE_EXECUTABLES = ["/var/usrlocal/bin/k3s", "/sbin/modprobe"]


def _apply(node: RenderedNode, stack: contextlib.ExitStack) -> Path:
    root = stack.enter_context(scratch_root())
    apply_ignition(node.ignition, root)
    return root


@pytest.fixture(scope="module")
def applied(rendered: dict[str, RenderedNode]) -> Iterator[dict[str, Path]]:
    """Each example node's config applied by the real Ignition to its own scratch root."""
    with contextlib.ExitStack() as stack:
        yield {name: _apply(node, stack) for name, node in rendered.items()}


def test_ignition_validate_accepts_every_config(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    for name, node in rendered.items():
        path = tmp_path / f"{name}.ign"
        path.write_bytes(node.ignition)
        result = ignition_validate(path)
        assert result.returncode == 0, (name, result.stdout + result.stderr)


def test_ignition_validate_rejects_a_broken_config(tmp_path: Path) -> None:
    path = tmp_path / "broken.ign"
    path.write_text('{"ignition":{"version":"3.3.0"},"storage":{"files":[{"path":"relative"}]}}')
    assert ignition_validate(path).returncode != 0


def _owner(root: Path, path: Path) -> tuple[str, str]:
    """User and group names of `path`, looked up in the scratch root's own databases."""

    def names(database: str) -> dict[int, str]:
        lines = (root / "etc" / database).read_text().splitlines()
        return {int(line.split(":")[2]): line.split(":")[0] for line in lines}

    status = path.lstat()
    return names("passwd")[status.st_uid], names("group")[status.st_gid]


def _expected_files(node: RenderedNode) -> dict[str, tuple[int, str]]:
    config = json.loads(node.ignition)
    return {
        entry["path"]: (entry["mode"], entry.get("user", {}).get("name", "root"))
        for entry in config["storage"]["files"]
    }


def _check_applied_files(node: RenderedNode, root: Path) -> None:
    contents = ignition_files(node.ignition)
    for path, (mode, owner) in _expected_files(node).items():
        on_disk = root / path.lstrip("/")
        assert on_disk.is_file(), path
        assert on_disk.stat().st_mode & 0o7777 == mode, path
        assert _owner(root, on_disk) == (owner, owner), path
        if path in contents:
            assert on_disk.read_bytes() == contents[path], path
    for entry in json.loads(node.ignition)["storage"]["directories"]:
        on_disk = root / entry["path"].lstrip("/")
        assert on_disk.is_dir(), entry["path"]
        assert on_disk.stat().st_mode & 0o7777 == entry["mode"], entry["path"]
        owner = entry.get("user", {}).get("name", "root")
        assert _owner(root, on_disk) == (owner, owner), entry["path"]
    preset = _preset(root)
    for unit in json.loads(node.ignition)["systemd"]["units"]:
        on_disk = root / "etc/systemd/system" / unit["name"]
        assert on_disk.read_text() == unit["contents"]
        assert f"{'enable' if unit['enabled'] else 'disable'} {unit['name']}" in preset


def _preset(root: Path) -> list[str]:
    return (root / "etc/systemd/system-preset/20-ignition.preset").read_text().splitlines()


def test_ignition_applies_the_control_plane(
    rendered: dict[str, RenderedNode], applied: dict[str, Path], users: tuple[UserKeys, ...]
) -> None:
    node, root = rendered["control-plane"], applied["control-plane"]
    _check_applied_files(node, root)
    tls = root / "var/lib/rancher/k3s/server/tls"
    assert {p.name: p.stat().st_mode & 0o777 for p in tls.iterdir()} == {
        "server-ca.crt": 0o644,
        "server-ca.key": 0o600,
        "client-ca.crt": 0o644,
        "client-ca.key": 0o600,
    }
    assert tls.stat().st_mode & 0o777 == 0o700
    manifests = root / "var/lib/rancher/k3s/server/manifests"
    assert manifests.stat().st_mode & 0o777 == 0o700
    # The credentials Secrets and the add-ons (HelmCharts, ClusterIssuers), each 0600.
    assert {p.name: p.stat().st_mode & 0o777 for p in manifests.iterdir()} == {
        "raya-cert-manager-credentials.yaml": 0o600,
        "raya-external-dns-credentials.yaml": 0o600,
        "raya-helm-charts.yaml": 0o600,
        "raya-cluster-issuers.yaml": 0o600,
    }
    kinds = {
        p.name: [doc["kind"] for doc in yaml.safe_load_all(p.read_text())]
        for p in manifests.iterdir()
    }
    assert kinds["raya-helm-charts.yaml"] == ["HelmChart", "HelmChart"]
    assert kinds["raya-cluster-issuers.yaml"] == ["ClusterIssuer", "ClusterIssuer"]
    assert (root / "etc/rancher/k3s/config.yaml").stat().st_mode & 0o777 == 0o600
    # /usr/local is /var/usrlocal, as on FCOS
    assert (root / "var/usrlocal/bin/raya-public-ipv4").stat().st_mode & 0o777 == 0o755
    assert "enable k3s.service" in _preset(root)
    assert (root / "etc/systemd/system/k3s.service").read_text() == _unit(node, "k3s.service")
    _check_core_user(root, users)


def test_ignition_applies_the_agents(
    rendered: dict[str, RenderedNode], applied: dict[str, Path], users: tuple[UserKeys, ...]
) -> None:
    for name in ("agent-0", "agent-1", "agent-2"):
        node, root = rendered[name], applied[name]
        _check_applied_files(node, root)
        assert (root / "etc/rancher/node/password").stat().st_mode & 0o777 == 0o600
        assert (root / "etc/hostname").read_text() == f"{name}\n"
        assert "enable k3s-agent.service" in _preset(root)
        assert not (root / "etc/systemd/system/k3s.service").exists()
        assert not (root / "var/lib/rancher").exists()
        _check_core_user(root, users)


def _check_core_user(root: Path, users: tuple[UserKeys, ...]) -> None:
    passwd = {line.split(":")[0]: line for line in (root / "etc/passwd").read_text().splitlines()}
    assert "core" in passwd
    keys = (root / KEY_DIR.lstrip("/") / "ignition").read_text()
    assert keys.splitlines() == list(authorized_keys(users))


def _unit(node: RenderedNode, name: str) -> str:
    units = json.loads(node.ignition)["systemd"]["units"]
    return str(next(unit["contents"] for unit in units if unit["name"] == name))


@pytest.fixture(scope="module")
def pinned(cluster: Cluster, secrets: ClusterSecrets) -> tuple[Cluster, tuple[UserKeys, ...]]:
    """Twelve users with three RSA-4096 keys each: over the inline budget, so pinned."""
    users = many_users(12)
    return with_users(cluster, users), users


def _keys_server_routes(users: tuple[UserKeys, ...]) -> dict[str, bytes]:
    return {f"/{user.handle}.keys": user.raw.encode() for user in users}


def test_ignition_fetches_pinned_keys_and_checks_them(
    pinned: tuple[Cluster, tuple[UserKeys, ...]], secrets: ClusterSecrets, tmp_path: Path
) -> None:
    cluster, users = pinned
    with contextlib.ExitStack() as stack, http_server(routes(_keys_server_routes(users))) as url:
        nodes = render_cluster(cluster, secrets, users, keys_base_url=url, charts=CHARTS)
        for node in nodes[:2]:
            path = tmp_path / f"{node.node.name}.ign"
            path.write_bytes(node.ignition)
            assert ignition_validate(path).returncode == 0
            root = _apply(node, stack)
            _check_applied_files(node, root)
            key_dir = root / KEY_DIR.lstrip("/")
            assert sorted(p.name for p in key_dir.iterdir()) == sorted(
                f"github-{user.handle}" for user in users
            )
            for user in users:
                assert (key_dir / f"github-{user.handle}").read_text() == user.raw
            assert key_dir.stat().st_mode & 0o777 == 0o700
            assert _owner(root, key_dir) == ("core", "core")


def test_ignition_refuses_keys_that_changed_since_rendering(
    pinned: tuple[Cluster, tuple[UserKeys, ...]], secrets: ClusterSecrets, tmp_path: Path
) -> None:
    cluster, users = pinned
    pages = _keys_server_routes(users)
    with http_server(routes(pages)) as url:
        agent = render_cluster(cluster, secrets, users, keys_base_url=url, charts=CHARTS)[1]
        first = f"/{users[0].handle}.keys"
        pages[first] = pages[first] + b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIntruder\n"
        with pytest.raises(IgnitionFailed) as caught, contextlib.ExitStack() as stack:
            _apply(agent, stack)
    assert caught.value.stage == "files"
    assert "hash" in caught.value.log.lower()


@pytest.mark.parametrize("name", ["control-plane", "agent-0"])
def test_networkmanager_reads_the_keyfile_as_meant(
    cluster: Cluster, rendered: dict[str, RenderedNode], name: str
) -> None:
    keyfile = ignition_files(rendered[name].ignition)[KEYFILE].decode()
    understood = nmcli_parse(keyfile)
    node = next(node for node in cluster.nodes if node.name == name)
    assert understood["connection"]["interface-name"] == "enp7s0"
    assert understood["ethernet"]["mtu"] == "1450"
    assert understood["ipv4"] == {
        "method": "manual",
        "address1": f"{node.private_ip}/24",
        "route1": "10.0.0.0/8,10.0.0.1",
        "route1_options": "onlink=true",
        "may-fail": "false",
        "never-default": "true",
    }
    assert understood["ipv6"]["method"] == "disabled"


def test_nmcli_drops_what_it_does_not_understand() -> None:
    """The check above can fail: a misspelled key is silently lost."""
    understood = nmcli_parse("[connection]\nid=x\ntype=ethernet\n[ethernet]\nmtux=1450\n")
    assert "mtu" not in understood.get("ethernet", {})


def _unit_names(node: RenderedNode) -> list[str]:
    return [unit["name"] for unit in json.loads(node.ignition)["systemd"]["units"]]


def test_systemd_accepts_every_unit(
    rendered: dict[str, RenderedNode], applied: dict[str, Path], tmp_path: Path
) -> None:
    for name, root in applied.items():
        copy = tmp_path / name
        shutil.copytree(root, copy, symlinks=True)
        prepare_for_systemd(copy, IMAGE_EXECUTABLES)
        units = _unit_names(rendered[name])
        assert len(units) == 2
        result = systemd_verify(copy, units)
        assert (result.returncode, result.stdout + result.stderr) == (0, ""), name
        # ...and it can fail: a misspelled directive is reported.
        unit = copy / "etc/systemd/system" / units[-1]
        unit.write_text(unit.read_text().replace("Restart=always", "Restrat=always"))
        result = systemd_verify(copy, units)
        assert "Unknown key" in result.stdout + result.stderr


def test_units_need_the_private_network_and_the_public_address(
    rendered: dict[str, RenderedNode],
) -> None:
    for node in rendered.values():
        for name in _unit_names(node):
            lines = _unit(node, name).splitlines()
            assert "Wants=network-online.target" in lines, name
            assert "After=network-online.target" in lines, name
        k3s = next(name for name in _unit_names(node) if name.startswith("k3s"))
        lines = _unit(node, k3s).splitlines()
        assert "Requires=raya-public-ipv4.service" in lines
        assert "After=raya-public-ipv4.service" in lines
        assert "Restart=always" in lines


def test_tmpfiles_rule_relabels_k3s_without_touching_its_mode(
    applied: dict[str, Path], tmp_path: Path
) -> None:
    tmpfiles = require_tool("systemd-tmpfiles")
    root = tmp_path / "root"
    shutil.copytree(applied["agent-0"], root, symlinks=True)
    prepare_for_systemd(root, ["/var/usrlocal/bin/k3s"])
    rule = root / "etc/tmpfiles.d/raya-k3s-selinux.conf"
    result = subprocess.run(
        [tmpfiles, f"--root={root}", "--create", str(rule)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert (root / "var/usrlocal/bin/k3s").stat().st_mode & 0o777 == 0o755
    assert [line for line in rule.read_text().splitlines() if not line.startswith("#")] == [
        "Z /var/usrlocal/bin/k3s - - -"
    ]


def _exec_start(unit: str) -> list[str]:
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    return line.removeprefix("ExecStart=").split()


def test_public_address_script_retries_until_it_has_an_address(
    rendered: dict[str, RenderedNode], applied: dict[str, Path], tmp_path: Path
) -> None:
    require_tool("curl")
    unit = _unit(rendered["agent-0"], "raya-public-ipv4.service")
    script, metadata_url, dropin = _exec_start(unit)
    assert metadata_url == "http://169.254.169.254/hetzner/v1/metadata/public-ipv4"
    assert dropin == "/etc/rancher/k3s/config.yaml.d/50-node-external-ip.yaml"
    answers: list[tuple[int, bytes]] = [(500, b"busy"), (200, b"<html>not an address</html>")]

    def metadata(_: object) -> tuple[int, bytes]:
        return answers.pop(0) if answers else (200, b"203.0.113.7")

    handler: Callable[..., tuple[int, bytes]] = metadata
    executable = applied["agent-0"] / "var/usrlocal/bin" / Path(script).name
    output = tmp_path / "50-node-external-ip.yaml"
    with http_server(routes({"/hetzner/v1/metadata/public-ipv4": handler})) as url:
        result = subprocess.run(
            [str(executable), f"{url}/hetzner/v1/metadata/public-ipv4", str(output)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"PATH": os.environ["PATH"]},
        )
    assert result.returncode == 0, result.stderr
    assert answers == []
    assert result.stderr.count("retrying") == 2
    assert output.read_text() == 'node-external-ip: "203.0.113.7"\n'
    assert not output.with_name(output.name + ".tmp").exists()
