"""The cluster's add-ons: Hetzner's cloud controller manager and CSI driver, external-dns and
cert-manager, installed by k3s itself.

The control plane's config drops `HelmChart` resources (applied by k3s' helm-controller), a
`HelmChartConfig` for k3s' own Traefik, two Let's Encrypt `ClusterIssuer`s and a
`StorageClass` per location where pods run into k3s' auto-deploy manifests directory, next to
the Secrets holding the credentials they use.
`manifests` builds those files (pure, deterministic); `addon_status` reads what the cluster
reports about them, for `raya status`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from raya.defaults import CERT_MANAGER_CHARTS, EXTERNAL_DNS_CHARTS, HETZNER_CHARTS
from raya.errors import RenderError
from raya.model.config import StackConfig
from raya.model.fleet import Cluster
from raya.model.pins import ChartPins

NAMESPACE = "kube-system"  # where k3s' own HelmCharts live, and the credentials Secrets
CERT_MANAGER_NAMESPACE = "cert-manager"
MANAGED_BY = {"app.kubernetes.io/managed-by": "raya"}
CREDENTIALS_KEY = "credentials.json"  # the key of the service account file in its Secret
# Secrets field -> (manifest file, Secret name). k3s needs the manifest's name before its
# first dot to be a unique DNS-1123 name.
GCP_SECRETS = {
    "external_dns_key": ("raya-external-dns-credentials.yaml", "external-dns-gcp-credentials"),
    "cert_manager_key": ("raya-cert-manager-credentials.yaml", "cert-manager-gcp-credentials"),
}
# The Secret both Hetzner charts read by default: `token` (the API token) and `network` (the
# private network's name or id), in kube-system.
HCLOUD_SECRET = ("raya-hcloud-credentials.yaml", "hcloud")


@dataclass(frozen=True)
class Chart:
    name: str  # the HelmChart's name and the chart's name in its repository
    repo: str  # the official repository: the cluster fetches the chart from it
    target_namespace: str
    # helm-controller runs a bootstrap chart's install job on a server, on the host network,
    # tolerating the not-ready and uninitialized taints (k3s-io/helm-controller,
    # pkg/controllers/chart/chart.go, `job`); other jobs tolerate none of them.
    bootstrap: bool = False
    # What the chart runs, as `<deployments|daemonsets>/<name>` in the target namespace:
    # `raya status` reports them ready or not once the install job is complete.
    workloads: tuple[str, ...] = ()


EXTERNAL_DNS = Chart(
    name="external-dns",
    repo=EXTERNAL_DNS_CHARTS,
    target_namespace=NAMESPACE,  # a pod can only mount a Secret of its own namespace
)
CERT_MANAGER = Chart(
    name="cert-manager",
    repo=CERT_MANAGER_CHARTS,
    target_namespace=CERT_MANAGER_NAMESPACE,
)
# With kubelets started as `cloud-provider=external`, every node registers with the taint
# node.cloudprovider.kubernetes.io/uninitialized until the cloud controller initialises it;
# the controller's own pods tolerate it (its chart's templates/deployment.yaml), and its
# install job must too, or nothing would ever install it: a bootstrap chart.
HCLOUD_CCM = Chart(
    name="hcloud-cloud-controller-manager",
    repo=HETZNER_CHARTS,
    target_namespace=NAMESPACE,  # where the `hcloud` Secret is
    bootstrap=True,
    workloads=("deployments/hcloud-cloud-controller-manager",),
)
HCLOUD_CSI = Chart(
    name="hcloud-csi",
    repo=HETZNER_CHARTS,
    target_namespace=NAMESPACE,
    workloads=("deployments/hcloud-csi-controller", "daemonsets/hcloud-csi-node"),
)
CHARTS = (HCLOUD_CCM, HCLOUD_CSI, CERT_MANAGER, EXTERNAL_DNS)
# k3s' default cluster CIDR (the pods' addresses, carried by flannel).
K3S_CLUSTER_CIDR = "10.42.0.0/16"
# The default StorageClass: Hetzner Volumes, kept when their claim is deleted.
STORAGE_CLASS = "hcloud-volumes"
RECLAIM_POLICY = "Retain"
# Hetzner's CSI driver, its name as the provisioner of its volumes, and the topology key its
# node plugin publishes with the server's location, which the volumes it creates are pinned
# to (hetznercloud/csi-driver, internal/driver/driver.go: PluginName, TopologySegmentLocation;
# node.go, NodeGetInfo; controller.go, CreateVolume).
CSI_DRIVER = "csi.hetzner.cloud"
LOCATION_TOPOLOGY_KEY = f"{CSI_DRIVER}/location"
# k3s' local-path StorageClass: still there, no longer the default (raya-local-path.service).
LOCAL_PATH_CLASS = "local-path"
# Hetzner's smallest load balancer (lb11), for Traefik's Service.
LOAD_BALANCER_TYPE = "lb11"
LB = "load-balancer.hetzner.cloud"  # the cloud controller's annotation prefix
# Files of the manifests directory: the HelmCharts, Traefik's HelmChartConfig and the location
# StorageClasses share one (it compresses better), the issuers have their own (see
# `manifests`).
CHARTS_MANIFEST = "raya-helm-charts.yaml"
ISSUERS_MANIFEST = "raya-cluster-issuers.yaml"
# ClusterIssuer name -> ACME directory.
ISSUERS = {
    "letsencrypt-staging": "https://acme-staging-v02.api.letsencrypt.org/directory",
    "letsencrypt-production": "https://acme-v02.api.letsencrypt.org/directory",
}
# k3s labels every server's node so, "true" (k3s-io/k3s pkg/server/server.go,
# `setNodeLabelsAndAnnotations`: `util.ControlPlaneRoleLabelKey`); raya taints it so, NoSchedule,
# unless raya:controlPlaneSchedulable (k3s-server.yaml.j2).
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
# The public mode's metrics-server (`metrics_server`): raya's manifest, and the `.skip` file
# beside k3s' packaged Deployment (k3s writes its packaged manifests under these paths of its
# manifests directory at every start: k3s-io/k3s manifests/embed.go, pkg/deploy/stage.go).
METRICS_SERVER_MANIFEST = "raya-metrics-server.yaml"
METRICS_SERVER_SKIP = "metrics-server/metrics-server-deployment.yaml.skip"
# The image k3s' packaged Deployment runs in the v1.36 releases (their release notes' embedded
# component versions: Metrics-server v0.8.1): image/k3s.pin's release keeps the one it ships.
METRICS_SERVER_IMAGE = "rancher/mirrored-metrics-server:v0.8.1"
# metrics-server's secure port in k3s' Deployment (`--secure-port`), named as its Service's
# target port.
METRICS_SERVER_PORT = 10250
# external-dns deletes the records it created when their Ingress or Service goes (see
# docs/publishing.md for why `sync` and not `upsert-only`).
EXTERNAL_DNS_POLICY = "sync"
EXTERNAL_DNS_SOURCES = ("service", "ingress")
_CREDENTIALS_DIR = "/etc/raya/gcp"
# A GCP project id, optionally behind a legacy `domain:` prefix.
_PROJECT_ID = re.compile(r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")


def service_account_project(field: str, key: str) -> str:
    """The project a service account key file belongs to: the one its account, and so the
    cluster's zone, were created in."""
    try:
        project = json.loads(key).get("project_id")
    except (json.JSONDecodeError, AttributeError):
        project = None
    if not isinstance(project, str) or not _PROJECT_ID.fullmatch(project):
        raise RenderError(
            f"secrets: {field} has no usable project_id ({project!r}); accepted: a GCP "
            "service account key file, whose project_id is a project id such as my-project-1"
        )
    return project


def owner_id(config: StackConfig) -> str:
    """external-dns' TXT owner id: the cluster's name and its zone, unique to this cluster, so
    two clusters never take each other's records for their own."""
    return f"{config.cluster_name}@{config.zone_dns_name.rstrip('.')}"


def _literal_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the order written, multi-line text as literal blocks."""


_Dumper.add_representer(str, _literal_str)


def _yaml(document: Any) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def _manifest(documents: Sequence[Mapping[str, Any]]) -> str:
    body = "---\n".join(_yaml(document) for document in documents)
    return body


def _helm_chart(chart: Chart, version: str, values: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "repo": chart.repo,
        "chart": chart.name,
        "version": version,
        "targetNamespace": chart.target_namespace,
    }
    if chart.target_namespace != NAMESPACE:
        spec["createNamespace"] = True
    if chart.bootstrap:
        spec["bootstrap"] = True
    spec["valuesContent"] = _yaml(values)
    return {
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChart",
        "metadata": {"name": chart.name, "namespace": NAMESPACE, "labels": MANAGED_BY},
        "spec": spec,
    }


def hcloud_ccm_values(config: StackConfig) -> dict[str, Any]:
    """The cloud controller's values: the private network (from the `hcloud` Secret) for
    node addresses and load balancer targets, no routes (flannel carries pod traffic, and the
    pods' range is outside the network's), and load balancers in the cluster's location
    reaching their targets over the private network unless a Service says otherwise, each
    addressed in raya:loadBalancerSubnet: without a range, Hetzner picks the balancer's
    private address itself, possibly one raya plans for a node. The controller passes the range
    as `ip_range` when it attaches a balancer to the network, unless the Service's
    `load-balancer.hetzner.cloud/private-subnet-ip-range` names another
    (hetznercloud/hcloud-cloud-controller-manager v1.35.0, internal/hcops/load_balancer.go,
    `attachToNetwork`; internal/config/config.go reads the variable). In the public mode there
    is no network: balancers reach the nodes by their public addresses."""
    if config.public:
        return {
            "networking": {"enabled": False},
            "env": {
                "HCLOUD_LOAD_BALANCERS_LOCATION": {"value": config.location},
                "HCLOUD_LOAD_BALANCERS_USE_PRIVATE_IP": {"value": "false"},
            },
        }
    return {
        "networking": {"enabled": True, "clusterCIDR": K3S_CLUSTER_CIDR},
        "env": {
            "HCLOUD_NETWORK_ROUTES_ENABLED": {"value": "false"},
            "HCLOUD_LOAD_BALANCERS_LOCATION": {"value": config.location},
            "HCLOUD_LOAD_BALANCERS_USE_PRIVATE_IP": {"value": "true"},
            "HCLOUD_LOAD_BALANCERS_PRIVATE_SUBNET_IP_RANGE": {
                "value": str(config.load_balancer_subnet)
            },
        },
    }


def hcloud_csi_values(config: StackConfig) -> dict[str, Any]:
    """The CSI driver's values: the default StorageClass keeps a volume whose claim is
    deleted (docs/using.md) and, bound when its first pod is scheduled (the chart's
    `WaitForFirstConsumer`), creates it in that pod's node's location (the cluster's is the
    driver's fallback for a request naming none). Its node pods read their server's id and
    location from the metadata service, which raya's guard closes to pod networks: they run
    on the host's (docs/security.md)."""
    return {
        "controller": {"hcloudVolumeDefaultLocation": config.location},
        "node": {"hostNetwork": True},
        "storageClasses": [
            {"name": STORAGE_CLASS, "defaultStorageClass": True, "reclaimPolicy": RECLAIM_POLICY}
        ],
    }


def volume_locations(cluster: Cluster) -> tuple[str, ...]:
    """The locations where pods can run, sorted: each agent's, and the control planes' (the
    cluster's) when they take pods (raya:controlPlaneSchedulable)."""
    places = {node.location or cluster.config.location for node in cluster.agents}
    if cluster.config.control_plane_schedulable:
        places.add(cluster.config.location)
    return tuple(sorted(places))


def location_class_name(location: str) -> str:
    return f"{STORAGE_CLASS}-{location}"


def location_storage_class(location: str) -> dict[str, Any]:
    """A StorageClass of Hetzner Volumes in `location` only: its claims' pods are scheduled
    only on nodes whose driver publishes that location (the scheduler's VolumeBinding filters
    nodes by a class's `allowedTopologies` before provisioning and by the volume's node
    affinity after: kubernetes `pkg/scheduler/framework/plugins/volumebinding/binder.go`,
    `checkVolumeProvisions`, `checkBoundClaims`), and the driver creates the volume there.
    Otherwise the default class's: bound when the first pod is scheduled, expandable, kept
    when its claim is deleted. The chart's own template gives no class `allowedTopologies`
    (chart/templates/core/storageclass.yaml), so raya writes these itself."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": location_class_name(location), "labels": MANAGED_BY},
        "provisioner": CSI_DRIVER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
        "reclaimPolicy": RECLAIM_POLICY,
        "allowedTopologies": [
            {"matchLabelExpressions": [{"key": LOCATION_TOPOLOGY_KEY, "values": [location]}]}
        ],
    }


def ingress_balancer_name(config: StackConfig) -> str:
    """The name of Traefik's Hetzner load balancer: the cloud controller finds it by this name
    (the Service's `load-balancer.hetzner.cloud/name`) when no balancer carries the Service's
    uid yet, and the public mode's program creates it under this name first."""
    return f"{config.cluster_name}-ingress"


def traefik_config(config: StackConfig) -> dict[str, Any]:
    """k3s' Traefik, its Service a Hetzner load balancer in the cluster's location that
    reaches the nodes over the private network; external-dns publishes the Ingresses on its
    addresses (Traefik writes them into their status)."""
    return {
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChartConfig",
        "metadata": {"name": "traefik", "namespace": NAMESPACE, "labels": MANAGED_BY},
        "spec": {
            "valuesContent": _yaml(
                {
                    "service": {
                        "annotations": {
                            f"{LB}/name": ingress_balancer_name(config),
                            f"{LB}/location": config.location,
                            f"{LB}/type": LOAD_BALANCER_TYPE,
                            f"{LB}/use-private-ip": "false" if config.public else "true",
                        }
                    }
                }
            )
        },
    }


def external_dns_values(config: StackConfig, project: str) -> dict[str, Any]:
    """The external-dns chart's values: Cloud DNS in `project`, the cluster's zone only."""
    secret = GCP_SECRETS["external_dns_key"][1]
    return {
        "provider": {"name": "google"},
        "sources": list(EXTERNAL_DNS_SOURCES),
        "policy": EXTERNAL_DNS_POLICY,
        "registry": "txt",
        "txtOwnerId": owner_id(config),
        "domainFilters": [config.zone_dns_name.rstrip(".")],
        "extraArgs": [f"--google-project={project}", "--google-zone-visibility=public"],
        "env": [
            {
                "name": "GOOGLE_APPLICATION_CREDENTIALS",
                "value": f"{_CREDENTIALS_DIR}/{CREDENTIALS_KEY}",
            }
        ],
        "extraVolumes": [{"name": "gcp-credentials", "secret": {"secretName": secret}}],
        "extraVolumeMounts": [
            {"name": "gcp-credentials", "mountPath": _CREDENTIALS_DIR, "readOnly": True}
        ],
    }


def cert_manager_values() -> dict[str, Any]:
    """The cert-manager chart's values: its CRDs with it, and ClusterIssuers' Secrets (the
    service account key, the ACME account keys) read from and written to kube-system."""
    return {"crds": {"enabled": True, "keep": True}, "clusterResourceNamespace": NAMESPACE}


def cluster_issuer(name: str, server: str, config: StackConfig, project: str) -> dict[str, Any]:
    """A Let's Encrypt issuer solving DNS-01 in the cluster's zone through Cloud DNS."""
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "ClusterIssuer",
        "metadata": {"name": name, "labels": MANAGED_BY},
        "spec": {
            "acme": {
                "server": server,
                "email": config.acme_email,
                "privateKeySecretRef": {"name": f"{name}-account-key"},
                "solvers": [
                    {
                        "selector": {"dnsZones": [config.zone_dns_name.rstrip(".")]},
                        "dns01": {
                            "cloudDNS": {
                                "project": project,
                                # The zone by name: the solver then never lists the project's
                                # zones (cert-manager pkg/issuer/acme/dns/clouddns/clouddns.go,
                                # `getHostedZone`), a right its account does not hold.
                                "hostedZoneName": config.zone_name,
                                "serviceAccountSecretRef": {
                                    "name": GCP_SECRETS["cert_manager_key"][1],
                                    "key": CREDENTIALS_KEY,
                                },
                            }
                        },
                    }
                ],
            }
        },
    }


def metrics_server() -> list[dict[str, Any]]:
    """k3s' metrics-server Deployment (and its ServiceAccount, which share the file the
    `.skip` stops k3s from applying), kept on the control planes: the public mode's firewalls
    admit the kubelet port from the control planes' addresses alone (firewall.py), and
    metrics-server scrapes each node's kubelet at its InternalIP, the node's public address
    there (k3s' `--kubelet-preferred-address-types`: InternalIP,ExternalIP,Hostname unless
    flannel-external-ip, k3s-io/k3s pkg/server/server.go, `addrTypesPrioTemplate`). Its pod's
    traffic to an address outside the cluster CIDR leaves masqueraded to its node's address
    (flannel-io/flannel pkg/trafficmngr/iptables/iptables.go, `masqRules`: `-s <cluster CIDR>
    ! -d 224.0.0.0/4 -j MASQUERADE`): from an agent, that address is one the firewalls do not
    admit on 10250, and `kubectl top` and HorizontalPodAutoscalers would get nothing.

    Otherwise as k3s packages it (k3s-io/k3s manifests/metrics-server/
    metrics-server-deployment.yaml): the same names and labels (the Service, the APIService and
    the RBAC k3s still applies select and bind them), priority class and tolerations (k3s'
    CriticalAddonsOnly, and the control-plane and master taints), arguments and port."""
    labels = {"k8s-app": "metrics-server"}
    probe = {"scheme": "HTTPS", "port": "https"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "metrics-server", "namespace": NAMESPACE, "labels": MANAGED_BY},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "metrics-server",
                "namespace": NAMESPACE,
                "labels": {**labels, **MANAGED_BY},
            },
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"name": "metrics-server", "labels": labels},
                    "spec": {
                        "priorityClassName": "system-node-critical",
                        "serviceAccountName": "metrics-server",
                        "nodeSelector": {CONTROL_PLANE_ROLE: "true"},
                        "tolerations": [
                            {"key": "CriticalAddonsOnly", "operator": "Exists"},
                            *(
                                {"key": key, "operator": "Exists", "effect": "NoSchedule"}
                                for key in (CONTROL_PLANE_ROLE, "node-role.kubernetes.io/master")
                            ),
                        ],
                        "volumes": [{"name": "tmp-dir", "emptyDir": {}}],
                        "containers": [
                            {
                                "name": "metrics-server",
                                "image": METRICS_SERVER_IMAGE,
                                "args": [
                                    "--cert-dir=/tmp",
                                    f"--secure-port={METRICS_SERVER_PORT}",
                                    "--kubelet-preferred-address-types="
                                    "InternalIP,ExternalIP,Hostname",
                                    "--kubelet-use-node-status-port",
                                    "--metric-resolution=15s",
                                ],
                                "ports": [
                                    {
                                        "name": "https",
                                        "containerPort": METRICS_SERVER_PORT,
                                        "protocol": "TCP",
                                    }
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/readyz", **probe},
                                    "periodSeconds": 2,
                                    "failureThreshold": 3,
                                },
                                "livenessProbe": {
                                    "httpGet": {"path": "/livez", **probe},
                                    "periodSeconds": 10,
                                    "failureThreshold": 3,
                                },
                                "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}},
                                "securityContext": {
                                    "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True,
                                    "runAsUser": 1000,
                                    "allowPrivilegeEscalation": False,
                                },
                                "volumeMounts": [{"name": "tmp-dir", "mountPath": "/tmp"}],
                            }
                        ],
                    },
                },
            },
        },
    ]


def manifests(
    cluster: Cluster, charts: ChartPins, external_dns_key: str, cert_manager_key: str
) -> dict[str, str]:
    """The add-ons' manifest files (name -> text) for the control plane's manifests directory.

    The projects come from the service account keys: each account was created in the project
    holding the cluster's zone. The issuers have a file of their own: k3s retries a file that
    fails to apply every 15 s, so they land once cert-manager's CRDs and webhook are up.
    In the public mode, raya's metrics-server too, and the `.skip` file beside k3s' packaged
    Deployment: k3s still writes that file at every start (its stage writes each packaged
    manifest but those `--disable` names; k3s-io/k3s pkg/deploy/stage.go, `Stage`) but no
    longer applies it (pkg/deploy/controller.go, `listFilesIn`: a file whose name plus
    `.skip` is in its directory is ignored), while the rest of k3s' metrics-server (its
    Service, APIService, RBAC) is still applied. `--disable=metrics-server` would instead
    delete all of it, and raya would have to ship every part.
    """
    config = cluster.config
    external_dns_project = service_account_project("external_dns_key", external_dns_key)
    cert_manager_project = service_account_project("cert_manager_key", cert_manager_key)
    files = {
        CHARTS_MANIFEST: _manifest(
            [
                _helm_chart(HCLOUD_CCM, charts.hcloud_ccm.version, hcloud_ccm_values(config)),
                _helm_chart(HCLOUD_CSI, charts.hcloud_csi.version, hcloud_csi_values(config)),
                traefik_config(config),
                _helm_chart(CERT_MANAGER, charts.cert_manager.version, cert_manager_values()),
                _helm_chart(
                    EXTERNAL_DNS,
                    charts.external_dns.version,
                    external_dns_values(config, external_dns_project),
                ),
                *(location_storage_class(location) for location in volume_locations(cluster)),
            ]
        ),
        ISSUERS_MANIFEST: _manifest(
            [
                cluster_issuer(name, server, config, cert_manager_project)
                for name, server in ISSUERS.items()
            ]
        ),
    }
    if config.public:
        files[METRICS_SERVER_MANIFEST] = _manifest(metrics_server())
        # k3s checks that the file exists, nothing more; its line says why to a reader.
        files[METRICS_SERVER_SKIP] = f"# raya: {METRICS_SERVER_MANIFEST} replaces it\n"
    return files


# ---- what the cluster says about them (for `raya status`) ----

# GET a Kubernetes API path, e.g. "/apis/batch/v1/namespaces/kube-system/jobs/x"; the
# decoded JSON, or None when the object does not exist (404).
ApiGet = Callable[[str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class AddonState:
    kind: str  # "HelmChart" or "ClusterIssuer"
    name: str
    ready: bool
    detail: str  # one line: what the cluster says, for a person


def _condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    conditions = (obj or {}).get("status", {}).get("conditions") or []
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == kind), None)


def _workload_ready(workload: str, found: Mapping[str, Any] | None) -> tuple[bool, str]:
    """A Deployment's ready replicas, or a DaemonSet's ready pods, against those wanted."""
    kind, name = workload.split("/")
    what = f"{kind.removesuffix('s')} {name}"
    if found is None:
        return False, f"{what} not found"
    spec, status = found.get("spec") or {}, found.get("status") or {}
    if kind == "daemonsets":
        ready, wanted = status.get("numberReady") or 0, status.get("desiredNumberScheduled") or 0
    else:
        ready, wanted = status.get("readyReplicas") or 0, spec.get("replicas", 1)
    return wanted > 0 and ready >= wanted, f"{what} {ready}/{wanted} ready"


def helm_chart_state(
    name: str,
    chart: Mapping[str, Any] | None,
    job: Mapping[str, Any] | None,
    workloads: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> AddonState:
    """A HelmChart's install: its helm-controller job (`status.jobName`) and how it went,
    then what it runs (`workloads`, by `Chart.workloads` entry) ready or not."""
    workloads = workloads or {}
    if chart is None:
        return AddonState("HelmChart", name, False, f"no HelmChart {NAMESPACE}/{name} yet")
    job_name = chart.get("status", {}).get("jobName")
    if not job_name:
        return AddonState("HelmChart", name, False, "no install job yet")
    if job is None:
        return AddonState("HelmChart", name, False, f"job {job_name} not found")
    complete, failed = _condition(job, "Complete"), _condition(job, "Failed")
    if complete is not None and complete.get("status") == "True":
        ready = [_workload_ready(workload, found) for workload, found in workloads.items()]
        detail = "; ".join([f"job {job_name} complete", *(text for _, text in ready)])
        return AddonState("HelmChart", name, all(ok for ok, _ in ready), detail)
    if failed is not None and failed.get("status") == "True":
        reason = failed.get("message") or failed.get("reason") or "no reason given"
        return AddonState("HelmChart", name, False, f"job {job_name} failed: {reason}")
    status = job.get("status", {})
    tries = int(status.get("failed") or 0)
    running = f"job {job_name} running" if status.get("active") else f"job {job_name} pending"
    return AddonState(
        "HelmChart", name, False, running + (f", {tries} failed attempts" if tries else "")
    )


def issuer_state(name: str, issuer: Mapping[str, Any] | None) -> AddonState:
    """A ClusterIssuer's Ready condition (its ACME account registered, or why not)."""
    if issuer is None:
        return AddonState("ClusterIssuer", name, False, "not created yet (cert-manager not up?)")
    ready = _condition(issuer, "Ready")
    if ready is None:
        return AddonState("ClusterIssuer", name, False, "no Ready condition yet")
    message = ready.get("message") or ready.get("reason") or ""
    return AddonState(
        "ClusterIssuer",
        name,
        ready.get("status") == "True",
        f"Ready={ready.get('status')}" + (f": {message}" if message else ""),
    )


def addon_status(get: ApiGet) -> tuple[AddonState, ...]:
    """The HelmCharts' install jobs and the two ClusterIssuers' Ready condition, read
    through `get` (a Kubernetes API client); for `raya status`."""
    states = []
    for chart in CHARTS:
        found = get(f"/apis/helm.cattle.io/v1/namespaces/{NAMESPACE}/helmcharts/{chart.name}")
        job_name = (found or {}).get("status", {}).get("jobName")
        job = get(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job_name}") if job_name else None
        workloads = {
            workload: get(f"/apis/apps/v1/namespaces/{chart.target_namespace}/{workload}")
            for workload in chart.workloads
        }
        states.append(helm_chart_state(chart.name, found, job, workloads))
    for name in ISSUERS:
        states.append(issuer_state(name, get(f"/apis/cert-manager.io/v1/clusterissuers/{name}")))
    return tuple(states)
