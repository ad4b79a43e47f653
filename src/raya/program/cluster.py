"""The spec's `cluster.tf`: the FCOS snapshot and one server per node, configured by Ignition."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import pulumi
import pulumi_hcloud as hcloud

from raya.errors import DeployError, RayaError
from raya.fleet import Cluster, Node
from raya.github_keys import UserKeys
from raya.identity import ClusterSecrets
from raya.pins import Pins, label_selector, snapshot_labels
from raya.program.network import Network
from raya.render import RenderedNode

ARCHITECTURE = "x86"
# Every resource of the cluster carries it; the firewall finds the servers by it.
CLUSTER_LABEL = "managed_by"

Renderer = Callable[[Cluster, Node, ClusterSecrets, Sequence[UserKeys]], RenderedNode]


def find_snapshot(pins: Pins, cluster_name: str) -> str:
    """The id of the newest available x86 snapshot the image build stamped for these pins."""
    selector = label_selector(snapshot_labels(pins, cluster_name))
    images = hcloud.get_images(
        with_selector=selector,
        with_architectures=[ARCHITECTURE],
        with_statuses=["available"],  # not one still being written by a build
        most_recent=True,
    ).images
    if not images:
        raise DeployError(
            f"image/fcos.pin, image/k3s.pin: no available {ARCHITECTURE} snapshot labelled "
            f"{selector} in the Hetzner project; run `raya image build` first"
        )
    # The provider's sort order is not documented: choose by creation time explicitly.
    newest = max(images, key=lambda image: datetime.fromisoformat(image.created))
    return str(newest.id)


def server_labels(cluster_name: str, node: Node) -> dict[str, str]:
    return {CLUSTER_LABEL: cluster_name, "role": node.role}


def define_server(
    cluster: Cluster,
    node: Node,
    image: str,
    network: Network,
    firewall: hcloud.Firewall,
    secrets: pulumi.Output[ClusterSecrets],
    users: Sequence[UserKeys],
    render: Renderer,
) -> hcloud.Server:
    def ignition(node_secrets: ClusterSecrets) -> str:
        try:
            return render(cluster, node, node_secrets, users).ignition.decode()
        except RayaError as error:
            # Raised while Pulumi resolves outputs: RunError is reported without a traceback.
            raise pulumi.RunError(f"{node.name}: {error}") from None

    # Secret twice: the wrapper is what the SDK (and a test) sees, the option is what the
    # engine applies to the state and the preview.
    user_data: pulumi.Output[str] = pulumi.Output.secret(secrets.apply(ignition))
    return hcloud.Server(
        node.name,
        name=node.name,
        image=image,
        server_type=node.server_type,
        location=cluster.config.location,
        labels=server_labels(cluster.config.cluster_name, node),
        networks=[
            hcloud.ServerNetworkArgs(
                network_id=network.network_id,
                ip=str(node.private_ip),
                # Unset, the provider sees a change on every run and re-attaches the network
                # (its documented workaround: an explicit empty list).
                alias_ips=[],
            )
        ],
        public_nets=[hcloud.ServerPublicNetArgs(ipv4_enabled=True, ipv6_enabled=True)],
        user_data=user_data,
        opts=pulumi.ResourceOptions(
            # The firewall first: its label selector then covers the server from its birth.
            depends_on=[network.subnet, firewall],
            additional_secret_outputs=["user_data"],
        ),
    )
