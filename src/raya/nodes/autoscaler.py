"""Kubernetes' cluster autoscaler with its Hetzner provider, for the autoscaled pools.

One node group per autoscaled pool, named `<clusterName>-<pool>`; the autoscaler runs on the
control planes, from the upstream chart (kubernetes/autoscaler,
`cluster-autoscaler/charts/cluster-autoscaler`) installed by k3s' helm-controller like the
other add-ons. What the provider reads (kubernetes/autoscaler,
`cluster-autoscaler/cloudprovider/hetzner`, `hetzner_manager.go`, `newManager`):
`HCLOUD_TOKEN`; `HCLOUD_CLUSTER_CONFIG`, base64 of a JSON `ClusterConfig` (`imagesForArch`,
`nodeConfigs` by node group: `cloudInit`, `labels`, `taints`, `serverLabels`,
`subnetIPRange`); `HCLOUD_NETWORK`; `HCLOUD_PUBLIC_IPV4`/`IPV6`. The token and the cluster
config (each pool's node config carries the agent token) are a Secret's. `HCLOUD_FIREWALL`
stays unset: the cluster's firewalls apply to an autoscaled server by its `managed_by`
server label, as to a planned one (`values`).

`manifests` builds them, pure and deterministic.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from raya.defaults import AUTOSCALER_CHARTS
from raya.errors import RenderError
from raya.model.fleet import Cluster, Pool, server_name
from raya.model.pins import ChartPin, Pins, label_selector, snapshot_labels
from raya.nodes.addons import (
    CONTROL_PLANE_ROLE,
    MANAGED_BY,
    NAMESPACE,
    Chart,
    _helm_chart,
    _manifest,
)
from raya.nodes.identity import check_hcloud_token
from raya.nodes.render import RenderedPool

# The autoscaler raya runs, its image named by raya rather than the chart's default (chart
# 9.59.x defaults to v1.35.0): release cluster-autoscaler-1.36.1 (kubernetes/autoscaler, its
# release notes: registry.k8s.io/autoscaling/cluster-autoscaler:v1.36.1, multi-arch amd64 and
# arm64). Its minor is the Kubernetes minor of image/k3s.pin (the autoscaler's README,
# "Releases": use the autoscaler of the cluster's minor; tests/nodes/test_autoscaler.py holds
# it). 1.36.0 is the first whose Hetzner provider puts a node group's `serverLabels` on the
# servers it creates (`hetzner_node_group.go`, `createServer`), by which raya finds them
# (`managed_by`, raya.cloud.deploy.autoscaled_servers). A new k3s minor means moving this
# constant (`raya image pins --update` warns of it).
VERSION = "1.36.1"
IMAGE = {"repository": "registry.k8s.io/autoscaling/cluster-autoscaler", "tag": f"v{VERSION}"}
AUTOSCALER = Chart(
    name="cluster-autoscaler",
    repo=AUTOSCALER_CHARTS,
    target_namespace=NAMESPACE,  # where its Secret is
    # The chart's fullname: `<release>-<cloudProvider>-<chart>` (templates/_helpers.tpl).
    workloads=("deployments/cluster-autoscaler-hetzner-cluster-autoscaler",),
)
SECRET = "raya-cluster-autoscaler"
TOKEN_KEY = "token"
CLUSTER_CONFIG_KEY = "cluster-config"
# Hetzner's architecture names -> the provider's `imagesForArch` keys (`instanceTypeArch`).
IMAGE_ARCHITECTURES = {"x86": "amd64", "arm": "arm64"}
# The label the provider puts on every server it creates, valued by its node group (over any
# `serverLabels` of that name), and by which it lists a group's servers
# (`hetzner_node_group.go`, `createServer`; `nodeGroupLabel`).
NODE_GROUP_LABEL = "hcloud/node-group"


def node_group(cluster: Cluster, pool: Pool) -> str:
    """The pool's node group: its servers' name prefix and `hcloud/node-group` label value,
    prefixed by the cluster so two stacks sharing a Hetzner project never count each other's
    servers (the provider lists a group's servers by that label, `allServers`)."""
    return server_name(cluster.config.cluster_name, pool.name)


# The pod template's annotation carrying the digest of the cluster config it runs with.
CONFIG_DIGEST = "raya/cluster-config-sha256"
# The autoscaler's flags raya sets (the chart's `extraArgs`, merged into its defaults): with
# `enforce-node-group-min-size` (cluster-autoscaler `config/flags/flags.go`, since 1.26), a
# group whose target size is under its min is scaled up to it even with no pod pending
# (`core/static_autoscaler.go`, `ScaleUpToNodeGroupMinSize`): what brings a pool that
# `raya roll` emptied of its old servers back to its `min` with new ones.
EXTRA_ARGS = {"enforce-node-group-min-size": True}


def _taint(taint: str) -> dict[str, str]:
    """k3s' `key[=value]:Effect` as a Kubernetes taint object (`apiv1.Taint`'s JSON)."""
    spec, _, effect = taint.rpartition(":")
    key, _, value = spec.partition("=")
    return {"key": key, "value": value, "effect": effect}


def cluster_config(cluster: Cluster, pins: Pins, pools: Sequence[RenderedPool]) -> dict[str, Any]:
    """The provider's `ClusterConfig`: each node group's config (its Ignition as `cloudInit`,
    the labels and taints it registers with, the server labels that put it behind the
    cluster's firewall, its subnet) and the snapshot of each architecture, chosen the way
    raya chooses it for planned nodes: the newest available one labelled for the pins
    (`findImage` falls back to a label selector, status available, `created:desc`)."""
    config = cluster.config
    selector = label_selector(snapshot_labels(pins, config.cluster_name))
    return {
        "imagesForArch": {key: selector for key in IMAGE_ARCHITECTURES.values()},
        "nodeConfigs": {
            rendered.group: {
                "cloudInit": rendered.ignition.decode(),
                "labels": dict(rendered.pool.labels),
                "taints": [_taint(taint) for taint in rendered.pool.taints],
                # Put on the server at its creation, with the group's label (`createServer`,
                # since 1.36.0): raya finds the cluster's autoscaled servers by `managed_by`
                # (raya destroy, status, up's orphan check), as the firewall selects the
                # cluster's servers (firewall.py).
                "serverLabels": {
                    "managed_by": config.cluster_name,
                    "role": "agent",
                    "pool": rendered.pool.name,
                },
                "subnetIPRange": str(rendered.pool.addresses),
            }
            for rendered in pools
        },
    }


def config_digest(document: Mapping[str, Any]) -> str:
    """The digest of a whole cluster config: the autoscaler's pod annotation `CONFIG_DIGEST`,
    which restarts it when the config changes (it reads the config at start only)."""
    return hashlib.sha256(_json(document).encode()).hexdigest()


def node_config_digests(document: Mapping[str, Any]) -> dict[str, str]:
    """Each node group's node config (its `nodeConfigs` entry: Ignition, labels, taints,
    subnet) as a short digest (16 hex digits), by node group: what `raya up` stamps on the
    Secret and `raya roll` compares, without reading or showing a config (each holds the
    agent token)."""
    configs: Mapping[str, Any] = document.get("nodeConfigs") or {}
    return {
        group: hashlib.sha256(_json(config).encode()).hexdigest()[:16]
        for group, config in sorted(configs.items())
    }


def values(cluster: Cluster, config_digest: str) -> dict[str, Any]:
    """The chart's values: raya's autoscaler image (`IMAGE`), the Hetzner provider, one group
    per autoscaled pool, on the control planes, its token and cluster config from the
    Secret; restarted when the Secret's cluster config changes (the provider reads it at
    start only). No `HCLOUD_FIREWALL`: unset, the provider applies no firewall itself
    (`newManager` looks none up, `createServer` sets no `Firewalls`), and the cluster's
    firewalls cover the server by the `managed_by` label it is created with
    (`cluster_config`, firewall.py); set, that firewall would be on it twice, directly and
    by label, which Hetzner takes as an ownership lock refusing later changes of the server
    (`firewall_managed_by_label_selector`, hcloud-go `hcloud/error.go`)."""
    config = cluster.config
    secret_env = {TOKEN_KEY: "HCLOUD_TOKEN", CLUSTER_CONFIG_KEY: "HCLOUD_CLUSTER_CONFIG"}
    return {
        "cloudProvider": "hetzner",
        "image": dict(IMAGE),
        "autoscalingGroups": [
            {
                "name": node_group(cluster, pool),
                "minSize": pool.min_size,
                "maxSize": pool.max_size,
                "instanceType": pool.server_type,
                "region": pool.location or config.location,
            }
            for pool in cluster.autoscaled
        ],
        "extraEnv": {
            "HCLOUD_NETWORK": config.network_name,
            "HCLOUD_PUBLIC_IPV4": "true",
            "HCLOUD_PUBLIC_IPV6": "true",
        },
        "extraEnvSecrets": {env: {"name": SECRET, "key": key} for key, env in secret_env.items()},
        "extraArgs": dict(EXTRA_ARGS),
        "podAnnotations": {CONFIG_DIGEST: config_digest},
        "nodeSelector": {CONTROL_PLANE_ROLE: "true"},
        "tolerations": [{"key": CONTROL_PLANE_ROLE, "operator": "Exists", "effect": "NoSchedule"}],
    }


def secret(token: str, document: Mapping[str, Any]) -> dict[str, Any]:
    """The Secret of the provider's token and cluster config (base64 of its JSON, as
    `HCLOUD_CLUSTER_CONFIG` is read)."""
    encoded = base64.b64encode(_json(document).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE, "labels": MANAGED_BY},
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token, CLUSTER_CONFIG_KEY: encoded},
    }


def _json(document: Mapping[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def manifests(
    cluster: Cluster, pins: Pins, chart: ChartPin, pools: Sequence[RenderedPool], token: str
) -> str:
    """The Secret and the HelmChart of `chart` (the pinned release), one YAML stream; empty
    without an autoscaled pool."""
    if not cluster.autoscaled:
        return ""
    check_hcloud_token(token, "autoscaler_hcloud_token", "the cluster autoscaler's token")
    if [rendered.pool for rendered in pools] != list(cluster.autoscaled):
        raise RenderError(
            f"the autoscaler's node configs are those of {[p.pool.name for p in pools]}; "
            f"accepted: one per autoscaled pool, {[p.name for p in cluster.autoscaled]}"
        )
    document = cluster_config(cluster, pins, pools)
    digest = config_digest(document)
    return _manifest(
        [
            secret(token, document),
            _helm_chart(AUTOSCALER, chart.version, values(cluster, digest)),
        ]
    )
