"""metrics-server on the control planes in the public mode (issue 38): the control plane's
config carries raya's metrics-server Deployment and the `.skip` file beside k3s' packaged one;
the private mode carries neither, its configs unchanged (tests/nodes/test_pools.py keeps the
list form's digests).

What k3s does with them, read in its source (k3s-io/k3s):
- `pkg/deploy/stage.go`, `Stage`: at every start k3s writes each packaged manifest
  (`manifests/embed.go`, `List`: `metrics-server/metrics-server-deployment.yaml` among them)
  under its manifests directory, skipping only the names `--disable` gives; a `.skip` file
  does not stop the write.
- `pkg/deploy/controller.go`, `listFilesIn`: a file whose name plus `.skip` is in the tree
  (by file name) is not applied; every other `.yaml` is, as an Addon named after the file's
  name before its first dot.
- `manifests/metrics-server/metrics-server-deployment.yaml` holds the ServiceAccount and the
  Deployment, both named `metrics-server` in kube-system, the pod labelled
  `k8s-app: metrics-server` (the Service in `metrics-server-service.yaml` selects it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from raya.model.config import parse_stack_config
from raya.model.fleet import Cluster, build_cluster, load_fleet
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import ClusterSecrets, generate_example_secrets
from raya.nodes.render import RenderedNode, render_cluster
from tests.nodes.conftest import CHARTS, VOLUME_ID
from tests.nodes.fakes import many_users, with_users
from tests.nodes.scheduling import K3S_CONFIG, fits, registered
from tests.nodes.tools import ignition_files

# k3s' manifests directory, where raya seeds its files first (the volume may come late).
SEED = "/var/lib/raya/k3s-server-seed/manifests"
# k3s' packaged Deployment, as k3s' stage writes it under the manifests directory.
PACKAGED = "metrics-server/metrics-server-deployment.yaml"
RAYA = "raya-metrics-server.yaml"
USER_DATA_LIMIT = 32 * 1024  # Hetzner's user_data limit
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"


def public_cluster(tmp_path: Path, **changes: Any) -> Cluster:
    """Three control planes and two pools, one of them tainted (a dedicated pool)."""
    fleet = tmp_path / "agents.json"
    fleet.write_text(
        json.dumps(
            {
                "pools": [
                    {"name": "web", "type": "cx23", "count": 2, "addresses": "10.0.2.0/24"},
                    {
                        "name": "batch",
                        "type": "cx23",
                        "count": 1,
                        "addresses": "10.0.3.0/24",
                        "labels": {"workload": "batch"},
                        "taints": ["dedicated=batch:NoSchedule"],
                    },
                ]
            }
        )
    )
    config = parse_stack_config(
        {
            "authorizedUsers": ["octo-alice"],
            "managedSubdomain": "raya",
            "parentZone": "example.com",
            "acmeEmail": "ops@example.org",
            "nodesSubnet": "10.0.0.0/20",
            "controlPlaneIp": "10.0.0.10",
            "controlPlanes": 3,
            "network": "public",
            **changes,
        },
        "Pulumi.large.yaml",
    )
    return build_cluster(config, load_fleet(fleet), "agents.json")


def render(cluster: Cluster, secrets: ClusterSecrets | None = None) -> dict[str, RenderedNode]:
    made = secrets or generate_example_secrets(node.name for node in cluster.nodes)
    volumes = {node.name: VOLUME_ID for node in cluster.control_planes}
    nodes = render_cluster(cluster, made, charts=CHARTS, volume_id=volumes)
    return {node.node.name: node for node in nodes}


def pod_spec(files: dict[str, bytes]) -> dict[str, Any]:
    documents = list(yaml.safe_load_all(files[f"{SEED}/{RAYA}"]))
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def public(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RenderedNode]:
    return render(public_cluster(tmp_path_factory.mktemp("public")))


def test_every_control_plane_skips_k3s_deployment_and_ships_raya_s(
    public: dict[str, RenderedNode],
) -> None:
    control_planes = [name for name, node in public.items() if node.node.role == "control-plane"]
    assert len(control_planes) == 3
    for name in control_planes:
        files = ignition_files(public[name].ignition)
        # The `.skip` sits beside the file k3s writes, named after it: k3s applies the rest of
        # its metrics-server (Service, APIService, RBAC) and not this one.
        assert f"{SEED}/{PACKAGED}.skip" in files, name
        assert f"{SEED}/{PACKAGED}" not in files, name  # k3s writes it; raya does not
        documents = list(yaml.safe_load_all(files[f"{SEED}/{RAYA}"]))
        # What the skipped file held, under the same names: the Service still selects the
        # pods, the RBAC still binds the account.
        named = [(d["kind"], d["metadata"]["name"], d["metadata"]["namespace"]) for d in documents]
        assert named == [
            ("ServiceAccount", "metrics-server", "kube-system"),
            ("Deployment", "metrics-server", "kube-system"),
        ]  # fmt: skip
        deployment = documents[1]
        template = deployment["spec"]["template"]
        assert deployment["spec"]["selector"]["matchLabels"] == {"k8s-app": "metrics-server"}
        assert template["metadata"]["labels"] == {"k8s-app": "metrics-server"}
        spec = template["spec"]
        assert spec["serviceAccountName"] == "metrics-server"
        assert spec["nodeSelector"] == {CONTROL_PLANE_ROLE: "true"}
        (container,) = spec["containers"]
        assert (
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname" in container["args"]
        )
        assert container["image"] == "rancher/mirrored-metrics-server:v0.8.1"


def test_the_pod_fits_the_control_planes_alone(public: dict[str, RenderedNode]) -> None:
    """As k3s registers each node from its rendered config (raya's control-plane taint, the
    pools' labels and taints), the scheduler's filters let metrics-server onto every control
    plane and onto no agent, tainted or not."""
    nodes = {
        name: registered(
            name,
            ignition_files(node.ignition)[K3S_CONFIG],
            server=node.node.role == "control-plane",
        )
        for name, node in public.items()
    }
    assert nodes["control-plane"].taints  # raya taints its control planes by default
    spec = pod_spec(ignition_files(public["control-plane"].ignition))
    placed = {name for name, node in nodes.items() if fits(spec, node)}
    assert placed == {"control-plane", "control-plane-1", "control-plane-2"}
    # Without raya's selector, the untainted agents would take it: that is the bug.
    loose = {**spec, "nodeSelector": {}}
    assert {name for name, node in nodes.items() if fits(loose, node)} - placed == {
        "web-0", "web-1",
    }  # fmt: skip


def test_schedulable_control_planes_still_keep_it(tmp_path: Path) -> None:
    rendered = render(public_cluster(tmp_path, controlPlaneSchedulable=True))
    nodes = [
        registered(
            name,
            ignition_files(node.ignition)[K3S_CONFIG],
            server=node.node.role == "control-plane",
        )
        for name, node in rendered.items()
    ]
    assert not any(node.taints for node in nodes if node.name.startswith("control-plane"))
    spec = pod_spec(ignition_files(rendered["control-plane"].ignition))
    assert {node.name for node in nodes if fits(spec, node)} == {
        "control-plane", "control-plane-1", "control-plane-2",
    }  # fmt: skip


def test_agents_carry_neither(public: dict[str, RenderedNode]) -> None:
    for node in public.values():
        if node.node.role == "agent":
            assert not [path for path in ignition_files(node.ignition) if "metrics-server" in path]


def test_the_private_mode_leaves_k3s_metrics_server_alone(
    rendered: dict[str, RenderedNode],
) -> None:
    # The example's stack is private: every node talks over the Hetzner network, where the
    # firewalls filter nothing, so k3s' own Deployment stays, wherever it is scheduled.
    for node in rendered.values():
        assert not [path for path in ignition_files(node.ignition) if "metrics-server" in path]


def test_the_public_control_plane_is_deterministic_and_fits_with_fifty_longest_handles(
    tmp_path: Path, secrets: ClusterSecrets
) -> None:
    """Same inputs, same bytes; and with fifty of GitHub's longest handles, the public mode's
    control plane (its manifests one file and a `.skip` larger) stays within Hetzner's
    user_data limit."""
    example = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    cluster = dataclasses.replace(
        example, config=dataclasses.replace(example.config, network="public")
    )
    cluster = with_users(cluster, many_users(50, keys_each=3, long_handles=True))
    first, again = render(cluster, secrets), render(cluster, secrets)
    assert {name: node.ignition for name, node in first.items()} == {
        name: node.ignition for name, node in again.items()
    }
    control_plane = first["control-plane"]
    assert f"{SEED}/{PACKAGED}.skip" in ignition_files(control_plane.ignition)
    for node in first.values():
        assert len(node.ignition) <= USER_DATA_LIMIT, (node.node.name, len(node.ignition))
