"""The cluster autoscaler's manifests (issue 39, part 1, cluster side): the HelmChart of the
upstream chart with one Hetzner node group per autoscaled pool, and the Secret of its token and
cluster config, checked against the chart's values and what the provider reads.

What the provider reads, from kubernetes/autoscaler, `cluster-autoscaler/cloudprovider/hetzner`
at 55c37cd5eb550756c5ccc5a89e9068d77797e575:
- `hetzner_manager.go`, `newManager`: the environment variables `HCLOUD_TOKEN`,
  `HCLOUD_CLUSTER_CONFIG` (base64 of JSON, `base64.StdEncoding`), `HCLOUD_CLUSTER_CONFIG_FILE`,
  `HCLOUD_CLOUD_INIT`, `HCLOUD_IMAGE`, `HCLOUD_ENDPOINT`, `HCLOUD_NETWORK`, `HCLOUD_FIREWALL`,
  `HCLOUD_SSH_KEY`, `HCLOUD_PUBLIC_IPV4`, `HCLOUD_PUBLIC_IPV6` (`strconv.ParseBool`),
  `HCLOUD_SERVER_CREATION_TIMEOUT`; the JSON is decoded with `json.Unmarshal` into
  `ClusterConfig` {ImagesForArch {Arm64, Amd64}, NodeConfigs map of NodeConfig,
  DefaultSubnetIPRange}, NodeConfig {CloudInit, PlacementGroup, Taints []apiv1.Taint, Labels,
  ServerLabels, ImagesForArch, SubnetIPRange, Firewalls}: no json tags, so Go matches the
  JSON keys to the field names case-insensitively.
- `hetzner_cloud_provider.go`, `BuildHetzner`: one node group per `--nodes` flag, whose name
  must be a key of `nodeConfigs` ("No node config present for node group id").
And from the chart's `templates/deployment.yaml`: with `cloudProvider: hetzner` each
`autoscalingGroups` entry becomes `--nodes={{ .minSize }}:{{ .maxSize }}:{{ .instanceType }}:
{{ .region }}:{{ .name }}`; each `extraEnvSecrets` entry `NAME: {name, key}` a `secretKeyRef`,
each `extraEnv` entry `NAME: value` a quoted value.
"""

from __future__ import annotations

import base64
import ipaddress
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from raya.errors import RenderError
from raya.model.fleet import Cluster, Fleet, Pool, build_cluster
from raya.model.pins import load_chart_pins, load_pins
from raya.nodes.autoscaler import manifests
from raya.nodes.identity import ClusterSecrets
from raya.nodes.render import render_pool
from tests.nodes.test_addons import HELM_CHART, K8S_VERSION
from tests.support import REPO

DATA = Path(__file__).parent.parent / "data" / "charts"
# The pinned chart (image/charts.pin): its values excerpt must be here, so that moving the pin
# without checking the new chart's values fails.
CHART = load_chart_pins(REPO).cluster_autoscaler
DEFAULTS = yaml.safe_load(
    (DATA / f"cluster-autoscaler-{CHART.version}.values.excerpt.yaml").read_text()
)
PROVIDER_ENV = {
    "HCLOUD_TOKEN", "HCLOUD_CLUSTER_CONFIG", "HCLOUD_CLUSTER_CONFIG_FILE", "HCLOUD_CLOUD_INIT",
    "HCLOUD_IMAGE", "HCLOUD_ENDPOINT", "HCLOUD_NETWORK", "HCLOUD_FIREWALL", "HCLOUD_SSH_KEY",
    "HCLOUD_PUBLIC_IPV4", "HCLOUD_PUBLIC_IPV6", "HCLOUD_SERVER_CREATION_TIMEOUT",
}  # fmt: skip
CLUSTER_CONFIG_FIELDS = {"imagesforarch", "nodeconfigs", "defaultsubnetiprange"}
NODE_CONFIG_FIELDS = {
    "cloudinit", "placementgroup", "taints", "labels", "serverlabels", "imagesforarch",
    "subnetiprange", "firewalls",
}  # fmt: skip
TAINT_FIELDS = {"key", "value", "effect", "timeAdded"}  # apiv1.Taint's json tags
TOKEN = "t" * 64  # a Hetzner token's shape: 64 characters
BURST = Pool("burst", "cpx31", 0, ipaddress.IPv4Network("10.0.16.0/24"),
             labels=(("tier", "burst"),), taints=("burst=yes:PreferNoSchedule",),
             min_size=0, max_size=8)  # fmt: skip
ARM = Pool("arm", "cax21", 0, ipaddress.IPv4Network("10.0.17.0/24"), location="fsn1",
           taints=("arch=arm:NoSchedule",), min_size=1, max_size=3)  # fmt: skip


def autoscaled(cluster: Cluster) -> Cluster:
    return build_cluster(
        cluster.config, Fleet(agents=("cx23",), pools=(BURST, ARM)), "agents.json"
    )


def documents(cluster: Cluster, secrets: ClusterSecrets) -> dict[str, dict[str, Any]]:
    fleet = autoscaled(cluster)
    pools = [render_pool(fleet, pool, secrets) for pool in fleet.autoscaled]
    text = manifests(fleet, load_pins(REPO), CHART, pools, TOKEN)
    return {doc["kind"]: doc for doc in yaml.safe_load_all(text)}


def declared(values: dict[str, Any]) -> None:
    """Every value set is one the chart's defaults declare, of the same type."""
    for key, value in values.items():
        assert key in DEFAULTS, f"{key} is not a value of the chart"
        assert type(value) is type(DEFAULTS[key]), key


def test_the_chart_values_are_the_charts_own(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    chart = documents(cluster, secrets)["HelmChart"]
    jsonschema.validate(chart, HELM_CHART)  # k3s' HelmChart CRD, strict
    assert chart["spec"]["repo"] == "https://kubernetes.github.io/autoscaler"
    assert (chart["spec"]["chart"], chart["spec"]["version"]) == ("cluster-autoscaler", "9.59.1")
    assert chart["spec"]["targetNamespace"] == "kube-system"
    values = yaml.safe_load(chart["spec"]["valuesContent"])
    declared(values)
    assert values["cloudProvider"] == "hetzner"
    # `--nodes=min:max:type:location:name`: one group per autoscaled pool, named after the
    # cluster and the pool; the ARM pool in its own location.
    assert values["autoscalingGroups"] == [
        {"name": "raya-burst", "minSize": 0, "maxSize": 8, "instanceType": "cpx31",
         "region": "nbg1"},
        {"name": "raya-arm", "minSize": 1, "maxSize": 3, "instanceType": "cax21",
         "region": "fsn1"},
    ]  # fmt: skip
    # On the control planes, whose taint it tolerates (k3s labels them, raya taints them).
    assert values["nodeSelector"] == {"node-role.kubernetes.io/control-plane": "true"}
    assert values["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
         "effect": "NoSchedule"},
    ]  # fmt: skip
    # raya's image, not the chart's default (9.59.1 runs v1.35.0, whose provider puts no
    # `serverLabels` on its servers): release cluster-autoscaler-1.36.1, one multi-arch image
    # (amd64, arm64) in the chart's repository.
    assert DEFAULTS["image"] == {"repository": "registry.k8s.io/autoscaling/cluster-autoscaler",
                                 "tag": "v1.35.0"}  # fmt: skip
    assert values["image"] == {"repository": "registry.k8s.io/autoscaling/cluster-autoscaler",
                               "tag": "v1.36.1"}  # fmt: skip
    wrong = {**values, "extraEnvSecret": {}}
    with pytest.raises(AssertionError, match="extraEnvSecret is not a value"):
        declared(wrong)


def test_the_environment_is_the_providers_and_the_secrets_from_the_secret(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    found = documents(cluster, secrets)
    values = yaml.safe_load(found["HelmChart"]["spec"]["valuesContent"])
    assert set(values["extraEnv"]) | set(values["extraEnvSecrets"]) <= PROVIDER_ENV
    assert values["extraEnv"] == {
        "HCLOUD_NETWORK": "raya",  # the network's name: raya:clusterName
        # No HCLOUD_FIREWALL: the firewall covers the servers by label, a second direct
        # application would lock them (tests/cloud/program/hetzner.py).
        "HCLOUD_PUBLIC_IPV4": "true",
        "HCLOUD_PUBLIC_IPV6": "true",
    }
    assert all(isinstance(value, str) for value in values["extraEnv"].values())
    secret = found["Secret"]
    kubernetes_validate.validate(secret, K8S_VERSION, strict=True)
    name = secret["metadata"]["name"]
    assert values["extraEnvSecrets"] == {
        "HCLOUD_TOKEN": {"name": name, "key": "token"},
        "HCLOUD_CLUSTER_CONFIG": {"name": name, "key": "cluster-config"},
    }
    assert set(secret["stringData"]) == {"token", "cluster-config"}
    assert secret["stringData"]["token"] == TOKEN
    # It is not the cloud controller's `hcloud` Secret: a token of its own.
    assert name == "raya-cluster-autoscaler"


def test_the_cluster_config_is_what_the_provider_decodes(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    found = documents(cluster, secrets)
    encoded = found["Secret"]["stringData"]["cluster-config"]
    document = json.loads(base64.b64decode(encoded, validate=True))
    assert {key.lower() for key in document} <= CLUSTER_CONFIG_FIELDS
    # Every node group has its node config (BuildHetzner refuses one without).
    values = yaml.safe_load(found["HelmChart"]["spec"]["valuesContent"])
    groups = [group["name"] for group in values["autoscalingGroups"]]
    assert sorted(document["nodeConfigs"]) == sorted(groups)
    fleet = autoscaled(cluster)
    for pool, group in zip(fleet.autoscaled, groups, strict=True):
        node_config = document["nodeConfigs"][group]
        assert {key.lower() for key in node_config} <= NODE_CONFIG_FIELDS
        # Its user_data: the pool's one Ignition, as raya render writes it.
        assert node_config["cloudInit"] == render_pool(fleet, pool, secrets).ignition.decode()
        assert node_config["subnetIPRange"] == str(pool.addresses)
        # Behind the cluster's firewall, which selects `managed_by=<clusterName>`.
        assert node_config["serverLabels"]["managed_by"] == "raya"
        for taint in node_config["taints"]:
            assert set(taint) <= TAINT_FIELDS
    assert document["nodeConfigs"]["raya-burst"]["taints"] == [
        {"key": "burst", "value": "yes", "effect": "PreferNoSchedule"}
    ]
    assert document["nodeConfigs"]["raya-burst"]["labels"] == {"tier": "burst"}
    # Both architectures: the newest available snapshot labelled for the pins, as a label
    # selector (findImage falls back to one when the name is no image's).
    selector = document["imagesForArch"]["amd64"]
    assert document["imagesForArch"] == {"amd64": selector, "arm64": selector}
    pins = load_pins(REPO)
    # The labels the image build stamps (docs/image.md), `+` of k3s' version as `-`.
    assert dict(pair.split("=") for pair in selector.split(",")) == {
        "managed_by": "raya",
        "os": "fcos",
        "fcos_stream": pins.fcos.stream,
        "fcos_version": pins.fcos.version,
        "k3s_version": pins.k3s.version.replace("+", "-"),
        "k3s_selinux_version": pins.k3s_selinux.version,
    }


def test_a_changed_cluster_config_restarts_the_autoscaler(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    """The provider reads its environment at start only: the pod template carries the
    config's digest, so a new config (a pool's labels here) rolls the Deployment."""
    fleet = autoscaled(cluster)
    pins = load_pins(REPO)

    def annotation(fleet: Cluster) -> str:
        pools = [render_pool(fleet, pool, secrets) for pool in fleet.autoscaled]
        text = manifests(fleet, pins, CHART, pools, TOKEN)
        docs = {d["kind"]: d for d in yaml.safe_load_all(text)}
        values = yaml.safe_load(docs["HelmChart"]["spec"]["valuesContent"])
        return str(values["podAnnotations"]["raya/cluster-config-sha256"])

    relabelled = build_cluster(
        cluster.config,
        Fleet(agents=("cx23",), pools=(Pool(**{**BURST.__dict__, "labels": ()}), ARM)),
        "agents.json",
    )
    assert annotation(fleet) == annotation(fleet)
    assert annotation(relabelled) != annotation(fleet)


def test_no_autoscaled_pool_no_manifest(cluster: Cluster) -> None:
    assert manifests(cluster, load_pins(REPO), CHART, [], TOKEN) == ""


def test_a_bad_token_or_missing_pool_config_is_refused(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    fleet = autoscaled(cluster)
    pins = load_pins(REPO)
    pools = [render_pool(fleet, pool, secrets) for pool in fleet.autoscaled]
    with pytest.raises(RenderError, match=r"autoscaler_hcloud_token \(the cluster autoscaler"):
        manifests(fleet, pins, CHART, pools, "short")
    with pytest.raises(RenderError, match="one per autoscaled pool"):
        manifests(fleet, pins, CHART, pools[:1], TOKEN)


def test_the_autoscaler_is_of_the_pinned_kubernetes_minor(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    """The autoscaler's README ("Releases", at tag cluster-autoscaler-1.36.1): run the
    autoscaler of the cluster's Kubernetes minor (it simulates that minor's scheduler). Moving
    image/k3s.pin to another minor fails here until raya.nodes.autoscaler.VERSION follows."""
    k3s = json.loads((REPO / "image" / "k3s.pin").read_text())["version"]  # v1.36.5+k3s1
    values = yaml.safe_load(documents(cluster, secrets)["HelmChart"]["spec"]["valuesContent"])
    tag = values["image"]["tag"]  # v1.36.1
    assert tag.split(".")[:2] == k3s.split(".")[:2], (tag, k3s)


# The flags the autoscaler 1.36.1 defines that the chart's `templates/deployment.yaml` (9.59.x)
# may pass it with raya's values: `--cloud-provider`, `--namespace`, one `--nodes` per group,
# then one `--<key>=<value>` per `extraArgs` entry (kubernetes/autoscaler at tag
# cluster-autoscaler-1.36.1: `config/flags/flags.go`, `cloud-provider`, `namespace`, `nodes`,
# `enforce-node-group-min-size`; `main.go`, `klog.InitFlags`: `logtostderr`,
# `stderrthreshold`, `v`). An unknown flag stops the binary at start.
FLAGS_1_36_1 = {"cloud-provider", "namespace", "nodes", "enforce-node-group-min-size",
                "logtostderr", "stderrthreshold", "v"}  # fmt: skip


def test_the_chart_passes_the_autoscaler_only_flags_it_defines(
    cluster: Cluster, secrets: ClusterSecrets
) -> None:
    values = yaml.safe_load(documents(cluster, secrets)["HelmChart"]["spec"]["valuesContent"])
    # Helm merges raya's extraArgs into the chart's defaults (a map: keys added, none lost).
    extra = {**DEFAULTS["extraArgs"], **values["extraArgs"]}
    passed = {"cloud-provider", "namespace", "nodes"} | {key.split("_")[0] for key in extra}
    assert passed <= FLAGS_1_36_1, passed - FLAGS_1_36_1
