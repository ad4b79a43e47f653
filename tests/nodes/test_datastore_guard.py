"""The first control plane's decision before k3s starts (raya-k3s-datastore), the script and
join config as its config carries them, run for real in a network namespace of its own where
k3s-like servers listen on the other control planes' addresses: a volume holding a datastore
starts k3s as configured without asking anyone; a blank one joins a peer serving the
cluster's CA, and never one serving another CA; with no peer, k3s starts the cluster. An etcd
member the cluster removed (etcd wrote `db/etcd/tombstone`: k3s sets its datastore aside at
its next start) is a blank volume to k3s: it joins a peer too, and with none k3s does not
start at all. It runs before every start of k3s (`ExecStartPre=`, tests/nodes/
test_control_planes.py), so it sees the tombstone written while k3s ran.

Booted with the units around it, and the stand-in k3s, in tests/boot/test_datastore.py."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from raya.model.fleet import Cluster
from raya.nodes.identity import CertificateAuthority, ClusterSecrets, generate_example_secrets
from raya.nodes.render import render_node
from tests.boot.sim import in_namespace
from tests.nodes.conftest import CHARTS, VOLUME_ID
from tests.nodes.k3s_join import k3s_like_server, serving_certificate
from tests.nodes.tools import ignition_files
from tests.support import require_root, require_tool

pytestmark = pytest.mark.tools

SCRIPT = "/usr/local/bin/raya-k3s-datastore"
JOIN_CONFIG = "/etc/rancher/k3s/raya-join.yaml"
PEERS = ("10.0.1.11", "10.0.1.12", "10.0.1.13", "10.0.1.14")


@pytest.fixture
def namespace() -> Iterator[str]:
    """A network namespace holding 10.0.1.11 and 10.0.1.12 on its loopback, nothing else."""
    require_root("the datastore guard's tests (a network namespace)")
    name = f"raya-guard-{os.getpid()}"
    ip = require_tool("ip")
    subprocess.run([ip, "netns", "add", name], check=True, timeout=60)
    try:
        subprocess.run([ip, "-n", name, "link", "set", "lo", "up"], check=True, timeout=60)
        for address in PEERS[:2]:
            subprocess.run([ip, "-n", name, "address", "add", f"{address}/32", "dev", "lo"],
                           check=True, timeout=60)  # fmt: skip
        yield name
    finally:
        subprocess.run([ip, "netns", "delete", name], check=True, timeout=60)



@pytest.fixture
def node(cluster: Cluster, secrets: ClusterSecrets, tmp_path: Path) -> Path:
    """The first control plane's script and join config, and its volume's data dir holding
    the cluster's server CA, as seeded; the folder holding them."""
    rendered = render_node(cluster, cluster.control_plane, secrets, charts=CHARTS,
                           volume_id=VOLUME_ID)  # fmt: skip
    files = ignition_files(rendered.ignition)
    (tmp_path / "raya-k3s-datastore").write_bytes(files[SCRIPT])
    (tmp_path / "raya-join.yaml").write_bytes(files[JOIN_CONFIG])
    tls = tmp_path / "server/tls"
    tls.mkdir(parents=True)
    (tls / "server-ca.crt").write_text(secrets.server_ca.cert_pem)
    return tmp_path


def decide(namespace: str, folder: Path) -> str:
    """Run the script in `namespace`; what it printed."""
    return run(namespace, folder, check=True).stdout


def run(namespace: str, folder: Path, check: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", namespace, "bash", str(folder / "raya-k3s-datastore"),
         str(folder / "server"), str(folder / "raya-join.yaml"), str(folder / "40-join.yaml"),
         *PEERS],
        capture_output=True, text=True, check=check, timeout=120,
    )  # fmt: skip


@contextlib.contextmanager
def serving(namespace: str, address: str, ca: CertificateAuthority, folder: Path) -> Iterator[None]:
    """A k3s-like server on `address`:6443 inside `namespace`, with a certificate of `ca`."""
    (folder / address).mkdir()
    certificate = serving_certificate(ca, folder / address, address)
    with contextlib.ExitStack() as stack:
        with in_namespace(namespace):  # its listening socket stays there
            stack.enter_context(
                k3s_like_server(certificate, ca.cert_pem.encode(), "s", "a", (address, 6443))
            )
        yield


@pytest.mark.parametrize("datastore", ["db/etcd/member/wal", "db/state.db"])
def test_a_volume_holding_a_datastore_starts_k3s_as_configured(
    namespace: str, node: Path, secrets: ClusterSecrets, datastore: str
) -> None:
    """An etcd member, or an older server's SQLite file: k3s starts from it (cluster-init
    converts SQLite) even though a peer serves the cluster."""
    path = node / "server" / datastore
    path.parent.mkdir(parents=True)
    path.mkdir() if datastore.endswith("wal") else path.write_bytes(b"SQLite format 3\0")
    with serving(namespace, PEERS[0], secrets.server_ca, node):
        printed = decide(namespace, node)
    assert printed == (
        f"raya-k3s-datastore: {node}/server holds a datastore: k3s starts from it as "
        "configured\n"
    )
    assert not (node / "40-join.yaml").exists()


def test_the_join_drop_in_goes_once_the_volume_holds_a_datastore(
    namespace: str, node: Path, secrets: ClusterSecrets
) -> None:
    """A first control plane that joined a peer (the drop-in names it) starts again once its
    volume holds the member it joined as: the drop-in goes, so its next start reads its own
    config, and k3s' `--cluster-reset`, which refuses while any config file names a server
    (k3s pkg/cli/server/server.go, `run`), can run on it."""
    with serving(namespace, PEERS[1], secrets.server_ca, node):
        joined = decide(namespace, node)
        assert "k3s joins it (server: https://10.0.1.12:6443)" in joined
        assert (node / "40-join.yaml").exists()
        # k3s joined: its volume now holds the member.
        (node / "server/db/etcd/member/wal").mkdir(parents=True)
        again = decide(namespace, node)
    assert again == (
        f"raya-k3s-datastore: {node}/server holds a datastore: k3s starts from it as "
        f"configured; the join drop-in {node}/40-join.yaml of an earlier start removed\n"
    )
    assert not (node / "40-join.yaml").exists()


def test_a_blank_volume_joins_a_peer_serving_the_cluster(
    namespace: str, node: Path, secrets: ClusterSecrets
) -> None:
    """10.0.1.11 serves another cluster's CA (not asked to join it), 10.0.1.12 this one's."""
    other = generate_example_secrets(["control-plane"]).server_ca
    with serving(namespace, PEERS[0], other, node), serving(
        namespace, PEERS[1], secrets.server_ca, node
    ):
        printed = decide(namespace, node)
    assert "holds no datastore and 10.0.1.12 serves this cluster: k3s joins it" in printed
    dropin = node / "40-join.yaml"
    assert yaml.safe_load(dropin.read_text()) == {
        **yaml.safe_load((node / "raya-join.yaml").read_text()),
        "server": "https://10.0.1.12:6443",
    }
    assert dropin.stat().st_mode & 0o777 == 0o600


def test_a_blank_volume_without_a_peer_starts_the_cluster(
    namespace: str, node: Path, secrets: ClusterSecrets
) -> None:
    """Only a server of another CA answers: k3s starts the cluster, and a join drop-in left
    from an earlier volume goes."""
    (node / "40-join.yaml").write_text('server: "https://10.0.1.11:6443"\n')
    other = generate_example_secrets(["control-plane"]).server_ca
    with serving(namespace, PEERS[0], other, node):
        printed = decide(namespace, node)
    assert "holds no datastore and no other control plane answers" in printed
    assert "k3s starts a new cluster (cluster-init)" in printed
    assert not (node / "40-join.yaml").exists()


def removed_member(node: Path) -> None:
    """An etcd member's data dir (its WAL, its name) with the tombstone etcd writes once it
    finds its member removed: `<data dir>/db/etcd/tombstone` (k3s pkg/daemons/executor,
    `ETCD`: `filepath.Join(args.DataDir, "tombstone")`, the etcd data dir being `DBDir`,
    `<data dir>/db/etcd`; pkg/etcd/etcd.go, `Register`, looks for it there)."""
    etcd = node / "server/db/etcd"
    (etcd / "member/wal").mkdir(parents=True)
    (etcd / "name").write_text("control-plane-3f2a9c1d")
    (etcd / "tombstone").write_bytes(b"")


def test_a_removed_member_joins_a_peer_instead_of_starting_a_second_cluster(
    namespace: str, node: Path, secrets: ClusterSecrets
) -> None:
    """Its WAL is there, but k3s will set it aside: without `server:` it would start a new
    cluster from cluster-init."""
    removed_member(node)
    with serving(namespace, PEERS[1], secrets.server_ca, node):
        printed = decide(namespace, node)
    assert (
        f"holds the etcd datastore of a member removed from the cluster "
        f"({node}/server/db/etcd/tombstone) and 10.0.1.12 serves this cluster: k3s joins it"
    ) in printed
    assert yaml.safe_load((node / "40-join.yaml").read_text()) == {
        **yaml.safe_load((node / "raya-join.yaml").read_text()),
        "server": "https://10.0.1.12:6443",
    }


def test_a_removed_member_without_a_peer_does_not_start_k3s(
    namespace: str, node: Path, secrets: ClusterSecrets
) -> None:
    """Its peers removed it, so they run the cluster: starting one here would split it. The
    script fails, so k3s does not start (and systemd runs it again, `Restart=always`)."""
    removed_member(node)
    other = generate_example_secrets(["control-plane"]).server_ca
    with serving(namespace, PEERS[0], other, node):
        result = run(namespace, node, check=False)
    assert result.returncode == 1
    assert "no other control plane answers" in result.stderr
    assert "k3s does not start, rather than start a second cluster" in result.stderr
    assert result.stdout == ""
    assert not (node / "40-join.yaml").exists()
