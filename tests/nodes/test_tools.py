"""The rendered configs under the real tools: ignition-validate, the Ignition binary itself
applying them to a scratch root, NetworkManager's keyfile reader, systemd-analyze and
systemd-tmpfiles, and the public address script against a local metadata server."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from raya.model.fleet import Cluster
from raya.nodes.identity import ClusterSecrets
from raya.nodes.render import RenderedNode
from tests.nodes.conftest import VOLUME_ID
from tests.nodes.tools import (
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
WAIT_UNIT = "raya-private-network.service"
KEY_DIR = "/home/core/.ssh/authorized_keys.d"
# What the image itself provides to the units (k3s is put there by Packer).
IMAGE_EXECUTABLES = [
    "/var/usrlocal/bin/k3s",
    "/sbin/modprobe",
    "/usr/sbin/nft",
    "/bin/sh",
    "/usr/bin/cp",
    "/usr/bin/rm",
]
GUARD = "raya-metadata-guard.service"
# The units every node's config carries, besides its k3s unit (and the control plane's
# volume mount).
NODE_UNITS = (
    WAIT_UNIT,
    "raya-node-metadata.service",
    GUARD,
    "raya-ssh-keys.service",
    "raya-ssh-keys.timer",
    "raya-k3s-certs.service",
    "raya-k3s-certs.timer",
)
# The control plane's volume: waited for and checked, mounted, then seeded; its device's
# start job (a drop-in) waits without a deadline.
DEVICE_UNIT = f"dev-disk-by\\x2did-scsi\\x2d0HC_Volume_{VOLUME_ID}.device"
VOLUME_UNITS = (
    "raya-k3s-volume.service",
    "var-lib-rancher-k3s-server.mount",
    "raya-k3s-seed.service",
    DEVICE_UNIT,
)
LOCAL_PATH_UNIT = "raya-local-path.service"  # the control plane's: ordered after k3s


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
    result = ignition_validate(path)
    # Refused for what is wrong, not for an unreadable file or an unknown flag.
    assert result.returncode == 1
    assert "error at $.storage.files.0.path, line 1 col 61: path not absolute" in (
        result.stdout + result.stderr
    )


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
        for dropin in unit.get("dropins", ()):  # the volume's device: a drop-in only
            dropin_path = on_disk.with_name(on_disk.name + ".d") / dropin["name"]
            assert dropin_path.read_text() == dropin["contents"]
        if "contents" not in unit:
            continue
        assert on_disk.read_text() == unit["contents"]
        assert f"{'enable' if unit['enabled'] else 'disable'} {unit['name']}" in preset


def _preset(root: Path) -> list[str]:
    return (root / "etc/systemd/system-preset/20-ignition.preset").read_text().splitlines()


def test_ignition_applies_the_control_plane(
    rendered: dict[str, RenderedNode], applied: dict[str, Path]
) -> None:
    node, root = rendered["control-plane"], applied["control-plane"]
    _check_applied_files(node, root)
    # Seeded on the root disk (0700): raya-k3s-seed.service copies it onto the volume.
    seed = root / "var/lib/raya/k3s-server-seed"
    assert seed.stat().st_mode & 0o777 == 0o700
    assert not (root / "var/lib/rancher/k3s/server").exists()
    tls = seed / "tls"
    assert {p.name: p.stat().st_mode & 0o777 for p in tls.iterdir()} == {
        "server-ca.crt": 0o644,
        "server-ca.key": 0o600,
        "client-ca.crt": 0o644,
        "client-ca.key": 0o600,
    }
    assert tls.stat().st_mode & 0o777 == 0o700
    manifests = seed / "manifests"
    assert manifests.stat().st_mode & 0o777 == 0o700
    # The credentials Secrets (the snapshots' S3 keys too) and the add-ons (HelmCharts,
    # ClusterIssuers, StorageClasses), each 0600.
    assert {p.name: p.stat().st_mode & 0o777 for p in manifests.iterdir()} == {
        "raya-etcd-s3.yaml": 0o600,
        "raya-cert-manager-credentials.yaml": 0o600,
        "raya-external-dns-credentials.yaml": 0o600,
        "raya-hcloud-credentials.yaml": 0o600,
        "raya-helm-charts.yaml": 0o600,
        "raya-cluster-issuers.yaml": 0o600,
    }
    kinds = {
        p.name: [doc["kind"] for doc in yaml.safe_load_all(p.read_text())]
        for p in manifests.iterdir()
    }
    assert kinds["raya-helm-charts.yaml"] == [
        *["HelmChart"] * 2,
        "HelmChartConfig",
        *["HelmChart"] * 2,
        "StorageClass",  # the example's one location's
    ]
    assert kinds["raya-cluster-issuers.yaml"] == ["ClusterIssuer", "ClusterIssuer"]
    assert (root / "etc/rancher/k3s/config.yaml").stat().st_mode & 0o777 == 0o600
    # /usr/local is /var/usrlocal, as on FCOS
    assert (root / "var/usrlocal/bin/raya-node-metadata").stat().st_mode & 0o777 == 0o755
    assert "enable k3s.service" in _preset(root)
    assert (root / "etc/systemd/system/k3s.service").read_text() == _unit(node, "k3s.service")
    _check_core_user(root)


def test_ignition_applies_the_agents(
    rendered: dict[str, RenderedNode], applied: dict[str, Path]
) -> None:
    for name in ("agent-0", "agent-1", "agent-2"):
        node, root = rendered[name], applied[name]
        _check_applied_files(node, root)
        assert (root / "etc/rancher/node/password").stat().st_mode & 0o777 == 0o600
        assert (root / "etc/hostname").read_text() == f"{name}\n"
        assert "enable k3s-agent.service" in _preset(root)
        assert not (root / "etc/systemd/system/k3s.service").exists()
        assert not (root / "var/lib/rancher").exists()
        _check_core_user(root)


def test_sshd_host_key_is_placed_and_readable_by_ssh_keygen(
    secrets: ClusterSecrets, applied: dict[str, Path]
) -> None:
    ssh_keygen = require_tool("ssh-keygen")
    for name, root in applied.items():
        private = root / "etc/ssh/ssh_host_ed25519_key"
        public = private.with_name(private.name + ".pub")
        assert (private.stat().st_mode & 0o777, public.stat().st_mode & 0o777) == (0o600, 0o644)
        assert _owner(root, private) == ("root", "root")
        fingerprints = {
            subprocess.run(
                [ssh_keygen, "-l", "-f", str(path)], capture_output=True, text=True, check=True
            ).stdout.split()[1]
            for path in (private, public)
        }
        # sshd would read the private key, clients pin the public one: the same key.
        (fingerprint,) = fingerprints
        derived = subprocess.run(
            [ssh_keygen, "-y", "-f", str(private)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert derived == secrets.host_keys[name].public_openssh.split()[:2], name
        assert fingerprint.startswith("SHA256:")


def _check_core_user(root: Path) -> None:
    """core exists, its key folder is ready for the fetcher, and no key came with the config."""
    passwd = {line.split(":")[0]: line for line in (root / "etc/passwd").read_text().splitlines()}
    assert "core" in passwd
    key_dir = root / KEY_DIR.lstrip("/")
    assert list(key_dir.iterdir()) == []
    assert key_dir.stat().st_mode & 0o777 == 0o700
    assert _owner(root, key_dir) == ("core", "core")


def _unit(node: RenderedNode, name: str) -> str:
    units = json.loads(node.ignition)["systemd"]["units"]
    return str(next(unit["contents"] for unit in units if unit["name"] == name))


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
        "address1": f"{node.private_ip}/32",
        "route1": "10.0.0.1/32",
        "route2": "10.0.0.0/8,10.0.0.1",
        "route2_options": "onlink=true",
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
        k3s = "k3s.service" if name == "control-plane" else "k3s-agent.service"
        control_plane = [*VOLUME_UNITS, k3s, LOCAL_PATH_UNIT]
        own = control_plane if name == "control-plane" else [k3s]
        assert sorted(units) == sorted([*NODE_UNITS, *own]), name
        result = systemd_verify(copy, units)
        assert (result.returncode, result.stdout + result.stderr) == (0, ""), name
        # ...and it can fail: a misspelled directive is reported.
        unit = copy / "etc/systemd/system" / next(u for u in units if u.startswith("k3s"))
        unit.write_text(unit.read_text().replace("Restart=always", "Restrat=always"))
        result = systemd_verify(copy, units)
        assert "Unknown key" in result.stdout + result.stderr


def test_units_need_the_private_network_and_the_public_address(
    rendered: dict[str, RenderedNode],
) -> None:
    for node in rendered.values():
        # The wait for the private network is what network-online.target waits for.
        wait = _unit(node, WAIT_UNIT).splitlines()
        assert {"Before=network-online.target", "WantedBy=network-online.target"} <= set(wait)
        # The metadata guard loads before any network (see below); the volume's units need
        # none, and the certificate check and the local-path unit run after k3s, itself after
        # the network.
        local = {WAIT_UNIT, GUARD, *VOLUME_UNITS, "raya-k3s-certs.service", LOCAL_PATH_UNIT}
        for name in set(_unit_names(node)) - local:
            if name.endswith((".timer", ".device")):
                continue
            lines = _unit(node, name).splitlines()
            assert "Wants=network-online.target" in lines, name
            assert "After=network-online.target" in lines, name
        k3s = next(name for name in _unit_names(node) if name.startswith("k3s"))
        lines = _unit(node, k3s).splitlines()
        assert "Requires=raya-node-metadata.service" in lines
        assert "After=raya-node-metadata.service" in lines
        assert "Restart=always" in lines


def test_k3s_starts_only_after_the_metadata_guard_loaded(
    rendered: dict[str, RenderedNode], applied: dict[str, Path], tmp_path: Path
) -> None:
    """What first boot's `systemctl preset-all` makes of Ignition's presets (here for the
    node's own units): the guard enabled and required by k3s, so k3s never runs a pod
    without it."""
    systemctl = require_tool("systemctl")
    for name, k3s in (("control-plane", "k3s.service"), ("agent-0", "k3s-agent.service")):
        root = tmp_path / name
        shutil.copytree(applied[name], root, symlinks=True)
        prepare_for_systemd(root, IMAGE_EXECUTABLES)
        # The volume's device unit is a drop-in only: nothing to preset.
        units = [unit for unit in _unit_names(rendered[name]) if unit != DEVICE_UNIT]
        result = subprocess.run(
            [systemctl, f"--root={root}", "preset", *units],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        system = root / "etc/systemd/system"
        assert (system / f"{k3s}.requires" / GUARD).is_symlink(), name
        assert (system / "multi-user.target.wants" / GUARD).is_symlink(), name
        lines = _unit(rendered[name], GUARD).splitlines()
        assert f"Before=network-pre.target {k3s}" in lines
        assert _exec_start(_unit(rendered[name], GUARD)) == [
            "/usr/sbin/nft",
            "-f",
            "/etc/nftables/raya-metadata-guard.nft",
        ]


def test_restarts_and_presets_as_documented(
    rendered: dict[str, RenderedNode], applied: dict[str, Path]
) -> None:
    """docs/nodes.md: the agent's k3s restarts every 10 s; the public-address unit is not
    enabled on its own (k3s pulls it in), as Ignition's applied preset shows."""
    assert "RestartSec=10s" in _unit(rendered["agent-0"], "k3s-agent.service").splitlines()
    assert "RestartSec=5s" in _unit(rendered["control-plane"], "k3s.service").splitlines()
    for root in applied.values():
        assert "disable raya-node-metadata.service" in _preset(root)


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


# The file contexts that decide the labels below, as a compiled policy's file_contexts lists
# them: Fedora's base rules for /var (fedora-selinux/selinux-policy,
# policy/modules/kernel/files.fc), container-selinux's for the kubelet
# (containers/container-selinux, container.fc) and k3s-selinux's for CoreOS
# (k3s-io/k3s-selinux, policy/coreos/k3s.fc). libselinux takes the last entry that matches,
# once entries with regular expressions are put before plain paths.
FILE_CONTEXTS = "".join(
    f"{spec}\tsystem_u:object_r:{label}:s0\n"
    for spec, label in (
        ("/var/.*", "var_t"),
        ("/var/lib(/.*)?", "var_lib_t"),
        ("/usr/local/bin(/.*)?", "bin_t"),
        ("/var/lib/kubelet(/.*)?", "container_var_lib_t"),
        ("/var/lib/rancher/k3s(/.*)?", "container_var_lib_t"),
        ("/var/lib/rancher/k3s/storage(/.*)?", "container_file_t"),
        ("/usr/local/s?bin/k3s\t--", "container_runtime_exec_t"),
    )
)
S_IFREG = 0o100000
SELABEL_CTX_FILE, SELABEL_OPT_PATH = 0, 3  # libselinux's selinux/label.h


def _labels(policy: Path, paths: list[str]) -> dict[str, str | None]:
    """What libselinux (selabel_lookup, as restorecon and systemd-tmpfiles use it) labels each
    of `paths` as a file, with `policy` as file_contexts and its `.subs` beside it."""

    class Option(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("value", ctypes.c_char_p)]

    library = ctypes.CDLL(ctypes.util.find_library("selinux") or "libselinux.so.1")
    library.selabel_open.restype = ctypes.c_void_p
    library.selabel_open.argtypes = [ctypes.c_uint, ctypes.POINTER(Option), ctypes.c_uint]
    library.selabel_lookup.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p, ctypes.c_int,
    ]  # fmt: skip
    library.selabel_close.argtypes = [ctypes.c_void_p]
    options = (Option * 1)(Option(SELABEL_OPT_PATH, str(policy).encode()))
    handle = library.selabel_open(SELABEL_CTX_FILE, options, 1)
    assert handle, f"selabel_open({policy}) failed"
    found: dict[str, str | None] = {}
    for path in paths:
        context = ctypes.c_char_p()
        answer = library.selabel_lookup(handle, ctypes.byref(context), path.encode(), S_IFREG)
        label = context.value.decode().split(":")[2] if answer == 0 and context.value else None
        found[path] = label
    library.selabel_close(handle)
    return found


@pytest.mark.parametrize("name", ["control-plane", "agent-0"])
def test_the_k3s_binary_takes_the_policys_label_through_the_nodes_equivalence(
    rendered: dict[str, RenderedNode], applied: dict[str, Path], tmp_path: Path, name: str
) -> None:
    """k3s-selinux labels /usr/local/s?bin/k3s container_runtime_exec_t (what systemd's init_t
    starts as container_runtime_t, containerd's domain); FCOS' real path is /var/usrlocal,
    under Fedora's `/var/.*` var_t. The node's file_contexts.subs, read by the real libselinux,
    makes the tmpfiles rule's relabel of /var/usrlocal/bin/k3s the policy's. Without it, var_t.
    Volumes: local-path's folder and pods' volumes get container_file_t; a hostPath elsewhere
    keeps its own label (var_lib_t here), which container_t is not allowed to write."""
    subs = applied[name] / "etc/selinux/targeted/contexts/files/file_contexts.subs"
    assert ignition_files(rendered[name].ignition)[f"/{subs.relative_to(applied[name])}"] == (
        b"/var/usrlocal /usr/local\n"
    )
    policy = tmp_path / "file_contexts"
    policy.write_text(FILE_CONTEXTS)
    paths = [
        "/var/usrlocal/bin/k3s",
        "/var/usrlocal/bin/raya-ssh-keys",
        "/var/lib/rancher/k3s/storage/pvc-1_default_data/file",
        "/var/lib/rancher/k3s/server/db",
        "/var/lib/data/file",
    ]
    assert _labels(policy, paths) == dict(
        zip(
            paths,
            ["var_t", "var_t", "container_file_t", "container_var_lib_t", "var_lib_t"],
            strict=True,
        )
    )
    shutil.copy(subs, tmp_path / "file_contexts.subs")  # libselinux reads <path>.subs
    assert _labels(policy, paths) == dict(
        zip(
            paths,
            ["container_runtime_exec_t", "bin_t", "container_file_t", "container_var_lib_t",
             "var_lib_t"],
            strict=True,
        )
    )  # fmt: skip


def test_k3s_starts_only_under_its_selinux_policy(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    """The first thing k3s' unit runs, with the real sh: without the policy module (the
    booted deployment lacks the layered RPM), it layers the image's RPM, asks for a reboot
    and fails, so k3s does not start; with it, nothing else runs. Stand-ins record the calls
    to rpm-ostree and systemctl."""
    for name, node in rendered.items():
        k3s = _unit(node, "k3s.service" if name == "control-plane" else "k3s-agent.service")
        first = next(line for line in k3s.splitlines() if line.startswith("ExecStartPre="))
        argv = shlex.split(first.removeprefix("ExecStartPre="))
        module = "/usr/share/selinux/packages/k3s.pp"
        assert argv[:2] == ["/bin/sh", "-c"] and module in argv[2]
        stubs, log = tmp_path / name / "stubs", tmp_path / name / "calls"
        stubs.mkdir(parents=True)
        for tool in ("rpm-ostree", "systemctl"):
            (stubs / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n')
            (stubs / tool).chmod(0o755)
        layered = tmp_path / name / "k3s.pp"
        for present in (False, True):
            if present:
                layered.touch()
            script = argv[2].replace(module, str(layered))
            result = _with_stubs(["/bin/sh", "-c", script], stubs)
            calls = log.read_text().splitlines() if log.exists() else []
            log.unlink(missing_ok=True)
            if present:
                assert (result.returncode, calls) == (0, []), name
            else:
                assert result.returncode == 1, name
                assert calls == [
                    "rpm-ostree install -C --idempotent /usr/local/share/raya/k3s-selinux.rpm",
                    "systemctl --no-block reboot",
                ], name


def _exec_start(unit: str) -> list[str]:
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    return line.removeprefix("ExecStart=").split()


def _with_stubs(argv: list[str], stubs: Path) -> subprocess.CompletedProcess[str]:
    """`argv` run with the commands in `stubs` first on PATH."""
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": f"{stubs}:{os.environ['PATH']}"},
    )


def test_node_metadata_script_retries_until_it_has_the_address_and_the_server_id(
    rendered: dict[str, RenderedNode], applied: dict[str, Path], tmp_path: Path
) -> None:
    """Against a stand-in of Hetzner's metadata service: `public-ipv4` and `instance-id`
    under /hetzner/v1/metadata, each a text body (docs.hetzner.cloud, "Server metadata")."""
    require_tool("curl")
    unit = _unit(rendered["agent-0"], "raya-node-metadata.service")
    script, metadata_url, dropin = _exec_start(unit)
    assert metadata_url == "http://169.254.169.254/hetzner/v1/metadata"
    assert dropin == "/etc/rancher/k3s/config.yaml.d/50-node-metadata.yaml"
    address: list[tuple[int, bytes]] = [(500, b"busy"), (200, b"<html>not an address</html>")]
    server: list[tuple[int, bytes]] = [(503, b"later"), (200, b"0042")]

    def answer(answers: list[tuple[int, bytes]], last: bytes) -> Callable[..., tuple[int, bytes]]:
        return lambda _: answers.pop(0) if answers else (200, last)

    executable = applied["agent-0"] / "var/usrlocal/bin" / Path(script).name
    output = tmp_path / "50-node-metadata.yaml"
    # A `sleep` that records how long the script waits between tries, and does not wait.
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "sleep").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "sleeps"}\n')
    (stubs / "sleep").chmod(0o755)
    metadata = {
        "/hetzner/v1/metadata/public-ipv4": answer(address, b"203.0.113.7"),
        "/hetzner/v1/metadata/instance-id": answer(server, b"108542369"),
    }
    with http_server(routes(metadata)) as url:
        result = _with_stubs([str(executable), f"{url}/hetzner/v1/metadata", str(output)], stubs)
    assert result.returncode == 0, result.stderr
    assert address == [] and server == []
    assert result.stderr.count("no public-ipv4 from") == 2
    assert result.stderr.count("no instance-id from") == 2  # 0042 is not a server id
    assert (tmp_path / "sleeps").read_text().split() == ["2"] * 4  # every 2 s
    assert output.read_text() == (
        'node-external-ip: "203.0.113.7"\n'
        'kubelet-arg+:\n  - "provider-id=hcloud://108542369"\n'
    )
    # k3s reads it so: the kubelet arguments of config.yaml, then this one appended.
    assert yaml.safe_load(output.read_text()) == {
        "node-external-ip": "203.0.113.7",
        "kubelet-arg+": ["provider-id=hcloud://108542369"],
    }
    assert not output.with_name(output.name + ".tmp").exists()


def test_local_path_stops_being_the_default_once_k3s_answers(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    """The control plane's unit, run with a stand-in `k3s` refusing twice (k3s not up yet,
    then the class not created yet) and accepting the third time: k3s' own kubectl is asked
    to annotate the class, until it does."""
    lines = _unit(rendered["control-plane"], LOCAL_PATH_UNIT).splitlines()
    assert {"After=k3s.service", "WantedBy=k3s.service"} <= set(lines)
    agents = [node for node in rendered.values() if node.node.role == "agent"]
    assert not [node for node in agents if LOCAL_PATH_UNIT in _unit_names(node)]
    command = next(line for line in lines if line.startswith("ExecStart="))
    shell, flag, script = shlex.split(command.removeprefix("ExecStart="))
    assert (shell, flag) == ("/bin/sh", "-c")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    calls = tmp_path / "calls"
    (stubs / "k3s").write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n[ "$(wc -l < {calls})" -ge 3 ]\n'
    )
    (stubs / "sleep").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "sleeps"}\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    stubbed = script.replace("/usr/local/bin/k3s", str(stubs / "k3s"))
    result = _with_stubs([shell, flag, stubbed], stubs)
    assert result.returncode == 0, result.stderr
    annotate = (
        "kubectl annotate --overwrite storageclass local-path "
        "storageclass.kubernetes.io/is-default-class=false"
    )
    assert calls.read_text().splitlines() == [annotate] * 3
    assert (tmp_path / "sleeps").read_text().split() == ["10", "10"]  # every 10 s


def test_in_the_public_mode_the_metadata_script_gives_k3s_the_public_address(
    cluster: Cluster, secrets: ClusterSecrets, tmp_path: Path
) -> None:
    """The public mode has no private address for k3s: the script run against the metadata
    stand-in writes the public IPv4 (the server's primary IP) as node-ip too, and k3s reads
    the drop-in so (raya:network: public, docs/fleet.md)."""
    import dataclasses

    from raya.nodes.render import render_node
    from tests.nodes.conftest import CHARTS

    require_tool("curl")
    config = dataclasses.replace(cluster.config, network="public")
    public = dataclasses.replace(cluster, config=config)
    agent = render_node(public, public.agents[0], secrets, charts=CHARTS)
    files = ignition_files(agent.ignition)
    assert "/etc/NetworkManager/system-connections/enp7s0.nmconnection" not in files
    executable = tmp_path / "raya-node-metadata"
    executable.write_bytes(files["/usr/local/bin/raya-node-metadata"])
    executable.chmod(0o755)
    output = tmp_path / "50-node-metadata.yaml"
    metadata = {
        "/hetzner/v1/metadata/public-ipv4": b"198.18.0.7",
        "/hetzner/v1/metadata/instance-id": b"108542369",
    }
    with http_server(routes(metadata)) as url:
        result = subprocess.run(
            [str(executable), f"{url}/hetzner/v1/metadata", str(output)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(output.read_text()) == {
        "node-ip": "198.18.0.7",
        "node-external-ip": "198.18.0.7",
        "kubelet-arg+": ["provider-id=hcloud://108542369"],
    }
    k3s = yaml.safe_load(files["/etc/rancher/k3s/config.yaml"])
    assert "node-ip" not in k3s and "flannel-iface" not in k3s
    assert k3s["server"] == "https://cp.raya.example.com:6443"
