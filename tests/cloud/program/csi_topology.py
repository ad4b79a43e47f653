"""Where a Hetzner Volume may be created and used: what Hetzner's CSI driver publishes about
each node and what Kubernetes does with it, written from their source (hcloud-csi 2.22.1, the
chart and driver version image/charts.pin holds), for the tests of raya's storage classes.

- The driver's node plugin answers `NodeGetInfo` with the topology segment
  `csi.hetzner.cloud/location` = its server's location, read from the metadata service
  (hetznercloud/csi-driver `internal/driver/driver.go`: `PluginName = "csi.hetzner.cloud"`,
  `TopologySegmentLocation = PluginName + "/location"`; `internal/driver/node.go`,
  `NodeGetInfo`; `cmd/main.go`, `setup` -> `app.GetServerLocation`, the metadata service for
  the node plugin, whose DaemonSet sets no `HCLOUD_VOLUME_DEFAULT_LOCATION`). The kubelet puts
  each segment on its Node as a label and its key in the CSINode's `topologyKeys`
  (kubernetes `pkg/volume/csi/nodeinfomanager/nodeinfomanager.go`, `InstallCSIDriver`,
  `updateTopologyLabels`). The plugin runs as the chart's DaemonSet on every node: with
  `node.tolerations` empty (its default, raya's too) its pods tolerate every NoSchedule and
  NoExecute taint (chart `templates/node/daemonset.yaml`).
- A pod without tolerations goes only to a node without a NoSchedule or NoExecute taint (the
  scheduler's TaintToleration plugin; k8s.io/api `core/v1/toleration.go`, `ToleratesTaint`).
- The scheduler's VolumeBinding plugin lets a pod whose claim is unbound (a
  `WaitForFirstConsumer` class) onto a node only if the node's labels match the class's
  `allowedTopologies` (`pkg/scheduler/framework/plugins/volumebinding/binder.go`,
  `checkVolumeProvisions` -> `v1helper.MatchTopologySelectorTerms`: no term matches every
  node; else any term whose every expression's key is a label with one of its values), and a
  pod whose claim is bound only onto a node matching the volume's `nodeAffinity`
  (`checkBoundClaims` -> `volume/util.CheckNodeAffinity`).
- The external provisioner, run by the chart with `--feature-gates=Topology=true
  --strict-topology` (chart `templates/controller/deployment.yaml`), asks for the selected
  node's own segments for the CSINode's topology keys only (kubernetes-csi/external-provisioner
  `pkg/controller/topology.go`, `GenerateAccessibilityRequirements`, strict topology); the
  driver creates the volume in the location of the first segment that names one, and refuses
  requirements naming none (`internal/driver/controller.go`, `CreateVolume`;
  `internal/driver/helper.go`, `locationFromTopologyRequirement`); the volume's topology is
  its location, which the provisioner turns into the PersistentVolume's required node
  affinity (`GenerateVolumeNodeAffinity`: key In [value]).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# Written from the driver's source (above), not from raya's constant.
DRIVER = "csi.hetzner.cloud"
LOCATION_SEGMENT = "csi.hetzner.cloud/location"


class ProvisioningFailed(Exception):
    """The driver's InvalidArgument: requirements naming no location."""


def published_labels(location: str) -> dict[str, str]:
    """The labels the driver's node plugin has the kubelet put on a node of a server in
    `location`, whatever its taints."""
    return {LOCATION_SEGMENT: location}


def takes_plain_pods(taints: Sequence[str]) -> bool:
    """Whether a pod without tolerations may go to a node with `taints` (k3s `node-taint`
    syntax, `key[=value]:Effect`)."""
    return not any(taint.rsplit(":", 1)[1] in ("NoSchedule", "NoExecute") for taint in taints)


def topology_matches(terms: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """`MatchTopologySelectorTerms`: a class's `allowedTopologies` against a node's labels."""
    if not terms:
        return True
    return any(
        all(
            expression["key"] in labels and labels[expression["key"]] in expression["values"]
            for expression in term["matchLabelExpressions"]
        )
        for term in terms
    )


def affinity_matches(affinity: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """`CheckNodeAffinity` for the `In` expressions the provisioner writes."""
    terms = affinity["required"]["nodeSelectorTerms"]
    return any(
        all(
            expression["operator"] == "In" and labels.get(expression["key"]) in expression["values"]
            for expression in term["matchExpressions"]
        )
        for term in terms
    )


def provision(storage_class: Mapping[str, Any], selected: Mapping[str, str]) -> dict[str, Any]:
    """The PersistentVolume's node affinity for a claim of `storage_class` whose first pod
    the scheduler put on a node labelled `selected` (the class allowing that node)."""
    assert storage_class["provisioner"] == DRIVER
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    assert topology_matches(storage_class.get("allowedTopologies") or [], selected)
    # The CSINode's topology keys are those the plugin published: the selected node's own.
    requisite = [{key: value for key, value in selected.items() if key.startswith(f"{DRIVER}/")}]
    location = next((t[LOCATION_SEGMENT] for t in requisite if LOCATION_SEGMENT in t), None)
    if location is None:
        raise ProvisioningFailed(f"no {LOCATION_SEGMENT!r} segment in {requisite}")
    return {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": LOCATION_SEGMENT, "operator": "In", "values": [location]}
                    ]
                }
            ]
        }
    }
