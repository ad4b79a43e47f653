"""`raya ssh` to a node the cluster autoscaler made (issue 39, part 3): it pins the host key the
node published on its own Node object, read over the API trusting only the cluster's CA, and
trusts nothing else: no key published, no ssh; a key of another kind, no ssh; the known_hosts
file holds that one key, and ssh is told to refuse any host key not in it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from raya.cloud import deploy
from raya.cloud.kubeconfig import api_client
from raya.errors import DeployError, RayaError
from tests.cloud.program.mocks import Run
from tests.operate import kube_api as ka
from tests.operate.test_access import _fake_ssh, _invoke
from tests.operate.test_autoscaler_apply import deployed_pool  # noqa: F401 (a fixture)
from tests.operate.test_roll import Clock
from tests.support import require_tool

NODE = "raya-burst-5f1d2e3c4b5a6978"  # the autoscaler's name: its node group, hex digits
ADDRESS = "203.0.113.40"


@pytest.fixture
def published(tmp_path: Path) -> str:
    """A host key as sshd-keygen makes one, `<algorithm> <blob>` as the node publishes it."""
    key = tmp_path / "key"
    subprocess.run([require_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f",
                    str(key)], check=True)  # fmt: skip
    algorithm, blob, *_ = key.with_suffix(".pub").read_text().split()
    return f"{algorithm} {blob}"


@pytest.fixture
def state(clock: Clock, published: str) -> ka.Cluster:
    node = ka.node_object(NODE, "v1")
    node["metadata"]["annotations"] = {"raya.dev/ssh-host-key-ed25519": published}
    node["status"]["addresses"].append({"type": "ExternalIP", "address": ADDRESS})
    quiet = ka.node_object("raya-burst-00aa", "v1")  # joined, nothing published yet
    return ka.Cluster(nodes={NODE: node, "raya-burst-00aa": quiet}, clock=clock.now)


@pytest.fixture
def cluster_api(
    deployed_pool: Run,  # noqa: F811
    state: ka.Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """The deployed stack's outputs, and its API (the stand-in) where its kubeconfig says."""
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: deployed_pool.outputs)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "Pulumi.yaml").write_text("name: raya\n")
    monkeypatch.chdir(tmp_path / "project")
    with ka.deployment_api(state, deployed_pool.resources, tmp_path) as url:
        monkeypatch.setattr("raya.commands.deploy.kube_api_client",
                            lambda kubeconfig: api_client(kubeconfig, server=url))  # fmt: skip
        yield url


def test_ssh_pins_the_key_the_node_published(
    cluster_api: str, published: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssh_keygen = require_tool("ssh-keygen")
    fake = _fake_ssh(tmp_path / "bin", code=0)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    result = _invoke("ssh", NODE, "--", "uptime")
    assert result.exit_code == 0, result.output
    argv = (fake / "argv").read_text().splitlines()
    assert argv[-3:] == [f"core@{ADDRESS}", "--", "uptime"]
    options = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-o"]
    assert {"StrictHostKeyChecking=yes", "HostKeyAlgorithms=ssh-ed25519",
            "GlobalKnownHostsFile=/dev/null"} <= set(options)  # fmt: skip
    known = fake / "known_hosts"
    assert known.read_text() == f"{NODE},{ADDRESS} {published}\n"
    # The real ssh-keygen finds that key, and that key only, for the address: ssh, told to
    # check strictly against this file alone, refuses a server showing any other.
    found = subprocess.run([ssh_keygen, "-F", ADDRESS, "-f", str(known)],
                           capture_output=True, text=True)  # fmt: skip
    keys = [line.split(None, 1)[1] for line in found.stdout.splitlines() if line[:1] != "#"]
    assert keys == [published]


def test_ssh_refuses_a_node_that_published_no_key(
    cluster_api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _fake_ssh(tmp_path / "bin", code=0)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    result = _invoke("ssh", "raya-burst-00aa")
    assert isinstance(result.exception, DeployError)
    assert "has published no SSH host key yet" in str(result.exception)
    assert not (fake / "argv").exists()  # ssh never ran


def test_ssh_refuses_a_published_key_of_another_kind(
    cluster_api: str, state: ka.Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state.nodes[NODE]["metadata"]["annotations"]["raya.dev/ssh-host-key-ed25519"] = (
        "ssh-rsa AAAAB3NzaC1yc2E"
    )
    fake = _fake_ssh(tmp_path / "bin", code=0)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    result = _invoke("ssh", NODE)
    assert isinstance(result.exception, RayaError)
    assert not (fake / "argv").exists()


def test_ssh_names_what_it_accepts_for_a_node_nowhere(cluster_api: str) -> None:
    result = _invoke("ssh", "raya-burst-ffff")
    assert isinstance(result.exception, DeployError)
    assert "no node 'raya-burst-ffff' in the stack nor in the cluster" in str(result.exception)


def test_the_api_is_asked_with_the_clusters_ca_only(
    deployed_pool: Run,  # noqa: F811
    state: ka.Cluster,
    tmp_path: Path,
) -> None:
    """A server with a certificate from another CA is not believed."""
    from raya.nodes.identity import generate_example_secrets

    other = generate_example_secrets(["control-plane"]).server_ca
    client_ca = deployed_pool.resources["client-ca"].outputs["certPem"]
    with ka.kubernetes_api(state, other, client_ca, tmp_path, "cp.raya.example.com") as url:
        api = api_client(deployed_pool.outputs["kubeconfig"], server=url)
        from kubernetes.client import CoreV1Api

        with pytest.raises(Exception) as refused:
            CoreV1Api(api).read_node(NODE, _request_timeout=5)
        api.close()
    assert "certificate verify failed" in str(refused.value)

