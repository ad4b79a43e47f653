"""The spec's `cluster.tf`: the FCOS snapshot and one server per node, configured by Ignition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import pulumi
import pulumi_hcloud as hcloud

from raya.cloud.program import drift
from raya.cloud.program.network import Network
from raya.cloud.program.outputs import gather
from raya.errors import DeployError, RayaError
from raya.model.fleet import Cluster, Node, server_name
from raya.model.pins import Pins, label_selector, snapshot_labels
from raya.nodes.identity import ClusterSecrets
from raya.nodes.render import RenderedNode, part_digests

ARCHITECTURE = "x86"
# Every resource of the cluster carries it; the firewall finds the servers by it.
CLUSTER_LABEL = "managed_by"
# What the engine keeps from the state instead of applying: a change to any of these would
# re-create the VM (the control plane and its datastore with it). `raya.cloud.deploy.run(replace=)`
# lifts them for the nodes it replaces: a forced replacement reuses ignored inputs otherwise.
# A server joins its placement group when it is created: Hetzner adds a running server to
# none, so an existing one takes its group when it is next replaced.
IGNORED = (
    "userData",
    "image",
    *(f'labels["{label}"]' for label in drift.DIGEST_LABELS.values()),
    "placementGroupId",
)


class Renderer(Protocol):
    def __call__(
        self, cluster: Cluster, node: Node, secrets: ClusterSecrets, *, volume_id: str | None = None
    ) -> RenderedNode: ...


@dataclass(frozen=True)
class Server:
    server: hcloud.Server
    drift: pulumi.Output[tuple[str, ...]]  # the parts it runs that differ from the inputs


def find_snapshot(pins: Pins, cluster_name: str, architecture: str = ARCHITECTURE) -> str:
    """The id of the newest available snapshot of `architecture` (`x86`, `arm`) the image
    build stamped for these pins."""
    selector = label_selector(snapshot_labels(pins, cluster_name))
    images = hcloud.get_images(
        with_selector=selector,
        with_architectures=[architecture],
        with_statuses=["available"],  # not one still being written by a build
        most_recent=True,
    ).images
    if not images:
        raise DeployError(
            f"image/fcos.pin, image/k3s.pin: no available {architecture} snapshot labelled "
            f"{selector} in the Hetzner project; run `raya image build` first"
        )
    # The provider's sort order is not documented: choose by creation time explicitly.
    newest = max(images, key=lambda image: datetime.fromisoformat(image.created))
    return str(newest.id)


def server_labels(cluster_name: str, node: Node) -> dict[str, str]:
    return {CLUSTER_LABEL: cluster_name, "role": node.role}


def define_volume(cluster: Cluster, node: Node) -> hcloud.Volume:
    """Control plane `node`'s k3s state (its etcd member's data): outlives its VM, protected
    from deletion. The first's keeps the name it had before there were several."""
    config = cluster.config
    return hcloud.Volume(
        f"{node.name}-state",
        name=f"{server_name(config.cluster_name, node.name)}-state",
        size=config.control_plane_volume_size,
        location=config.location,
        labels={"managed_by": config.cluster_name, "role": "control-plane-state"},
        opts=pulumi.ResourceOptions(protect=True),
    )


def define_server(
    cluster: Cluster,
    node: Node,
    image: str,
    network: Network | None,
    firewalls: Sequence[hcloud.Firewall],
    secrets: pulumi.Output[ClusterSecrets],
    render: Renderer,
    *,
    address: hcloud.PrimaryIp | None = None,
    volume: hcloud.Volume | None = None,
    placement_group: hcloud.PlacementGroup | None = None,
    replace: bool = False,
) -> Server:
    """Node `node`'s server: on `network` at its private address (the private mode), or
    with `address` as its public IPv4 (the public mode). It ignores changes to what it was
    created with (`IGNORED`) and reports them as drift, unless `replace`: then it takes the
    current inputs, unprotected, for `raya.cloud.deploy.run(replace=...)` to have it
    re-created with them."""

    def ignition(args: tuple[ClusterSecrets, str | None]) -> str:
        node_secrets, volume_id = args
        try:
            return render(cluster, node, node_secrets, volume_id=volume_id).ignition.decode()
        except RayaError as error:
            # Raised while Pulumi resolves outputs: RunError is reported without a traceback.
            raise pulumi.RunError(f"{node.name}: {error}") from None

    rendered = (
        gather(secrets, volume.id).apply(lambda v: ignition((v[0], str(v[1]))))
        if volume is not None
        else secrets.apply(lambda node_secrets: ignition((node_secrets, None)))
    )
    # Secret twice: the wrapper is what the SDK (and a test) sees, the option is what the
    # engine applies to the state and the preview.
    user_data: pulumi.Output[str] = pulumi.Output.secret(rendered)
    # Digests of secret text reveal nothing of it: the labels are plain.
    digests = pulumi.Output.unsecret(rendered.apply(lambda text: part_digests(text.encode())))
    labels = digests.apply(
        lambda d: {
            **server_labels(cluster.config.cluster_name, node),
            **{label: d[part] for part, label in drift.DIGEST_LABELS.items()},
        }
    )
    server = hcloud.Server(
        node.name,
        name=server_name(cluster.config.cluster_name, node.name),
        image=image,
        server_type=node.server_type,
        location=node.location or cluster.config.location,
        placement_group_id=placement_group.id.apply(int) if placement_group else None,
        labels=labels,
        networks=[
            hcloud.ServerNetworkArgs(
                network_id=network.network_id,
                ip=str(node.private_ip),
                # Unset, the provider sees a change on every run and re-attaches the network
                # (its documented workaround: an explicit empty list).
                alias_ips=[],
            )
        ]
        if network is not None
        else None,
        public_nets=[
            hcloud.ServerPublicNetArgs(
                ipv4_enabled=True,
                ipv4=address.id.apply(int) if address is not None else None,
                ipv6_enabled=True,
            )
        ],
        user_data=user_data,
        # A deleted server is stopped first (ACPI shutdown, then deleted once off): k3s ends
        # cleanly and the control plane's volume is not pulled from under a running datastore.
        shutdown_before_deletion=True,
        opts=pulumi.ResourceOptions(
            # The firewalls first: their label selector then covers the server from its birth.
            # The balancers' subnet too: the control plane's cloud controller attaches to it.
            depends_on=[
                *([network.subnet, network.balancer_subnet] if network is not None else []),
                *firewalls,
            ],
            additional_secret_outputs=["user_data"],
            ignore_changes=[] if replace else list(IGNORED),
            protect=node.role == "control-plane" and not replace,
            # A replacement must delete the old server first: it holds the server's name
            # (unique per project) and its private IP until deleted. The engine's default is
            # create-first, and for a targeted replace (`raya roll`, `replace=`) it never asks
            # the provider, whose own delete-first rule for named resources then does not
            # apply (docs/deploy.md, "What a replacement does").
            delete_before_replace=True,
        ),
    )
    if volume is not None:
        hcloud.VolumeAttachment(
            f"{node.name}-volume",
            server_id=server.id.apply(int),
            volume_id=volume.id.apply(int),
            # Ignition formats (first boot only) and mounts it: Hetzner must not.
            automount=False,
            # The server's delete-first replacement deletes this attachment before the server
            # (it depends on the server's id), which would detach the volume from a running
            # k3s. Left to Hetzner instead: deleting the server, once shut down, detaches it;
            # the attachment is then made again to the new server.
            opts=pulumi.ResourceOptions(retain_on_delete=True),
        )
    differ = gather(server.labels, server.image, digests).apply(
        lambda v: _report(node, drift.drift_parts(v[0] or {}, str(v[1]), v[2], image))
    )
    return Server(server=server, drift=differ)


def _report(node: Node, parts: tuple[str, ...]) -> tuple[str, ...]:
    if parts:
        pulumi.log.warn(drift.message(node.name, parts))
    return parts
