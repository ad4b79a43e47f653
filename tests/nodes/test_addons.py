"""The add-ons in the control plane's manifests directory: Hetzner's cloud controller and CSI
driver, Traefik's load balancer, external-dns, cert-manager and the Let's Encrypt issuers,
each manifest validated offline against the schema of its kind."""

from __future__ import annotations

import copy
import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.cert_manager.v1 import ClusterIssuer

from raya.errors import RenderError
from raya.model.config import StackConfig, parse_stack_config
from raya.model.fleet import Cluster, build_cluster
from raya.model.pins import load_chart_pins, load_pins
from raya.nodes.addons import (
    CERT_MANAGER,
    CHARTS,
    CHARTS_MANIFEST,
    EXTERNAL_DNS,
    GCP_SECRETS,
    HCLOUD_CCM,
    HCLOUD_CSI,
    HCLOUD_SECRET,
    ISSUERS,
    ISSUERS_MANIFEST,
    AddonState,
    addon_status,
    manifests,
)
from raya.nodes.identity import ClusterSecrets, example_service_account_key
from raya.nodes.render import RenderedNode
from tests.nodes.conftest import CHARTS as PINNED
from tests.nodes.tools import ignition_files
from tests.support import REPO, http_server

# Seeded on the root disk, copied onto the control plane's volume at boot.
MANIFESTS = "/var/lib/raya/k3s-server-seed/manifests"
DATA = REPO / "tests" / "data"
# The Kubernetes API the pinned k3s serves: kubernetes-validate's schemas of that minor.
K8S_VERSION = ".".join(load_pins(REPO).k3s.version.lstrip("v").split(".")[:2]) + ".0"


def strict(schema: Any) -> Any:
    """`schema` refusing unknown fields wherever it lists the known ones: the API server
    would silently prune them from a custom resource, so a misspelled field would be lost."""
    if isinstance(schema, dict):
        schema = {key: strict(value) for key, value in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    return schema


def crd_schema(path: Path) -> Any:
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    return strict(version["schema"]["openAPIV3Schema"])


HELM_CHART = crd_schema(DATA / "crds" / "helm.cattle.io_helmcharts.yaml")
HELM_CHART_CONFIG = crd_schema(DATA / "crds" / "helm.cattle.io_helmchartconfigs.yaml")


def values_schema(chart: str, version: str) -> Any:
    path = DATA / "charts" / f"{chart}-{version}.values.schema.json"
    if not path.is_file():
        pytest.fail(
            f"image/charts.pin pins {chart} {version} but {path} is missing: vendor that "
            "version's values.schema.json from the chart (see tests/data/charts/README.md)"
        )
    return json.loads(path.read_text())


def helm_charts(text: str | bytes) -> dict[str, dict[str, Any]]:
    """The documents of the charts manifest (HelmCharts, Traefik's HelmChartConfig, the
    location StorageClasses), by name."""
    return {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(text)}


def documents(files: Mapping[str, bytes]) -> dict[str, list[dict[str, Any]]]:
    """Every manifest of the manifests directory, as its YAML documents."""
    return {
        path.rsplit("/", 1)[1]: list(yaml.safe_load_all(data))
        for path, data in files.items()
        if path.startswith(f"{MANIFESTS}/")
    }


def _charts_text(found: Mapping[str, list[dict[str, Any]]]) -> str:
    """The charts manifest back as text, from `documents`' parse of it."""
    return yaml.safe_dump_all(found[CHARTS_MANIFEST])


def config(**changes: Any) -> StackConfig:
    values = {
        "authorizedUsers": ["octo-alice"],
        "managedSubdomain": "raya",
        "parentZone": "example.com",
        "acmeEmail": "ops@example.org",
        **changes,
    }
    return parse_stack_config(values, "test")


def fleet(stack: StackConfig) -> Cluster:
    """`stack` with one agent, in its location."""
    return build_cluster(stack, ("cx23",), "test")


KEYS = {
    project: example_service_account_key(f"dns@{project}.iam.gserviceaccount.com", project)
    for project in ("alpha-project", "beta-project-2")
}


def test_each_manifest_validates_against_the_schema_of_its_kind(
    rendered: dict[str, RenderedNode],
) -> None:
    found = documents(ignition_files(rendered["control-plane"].ignition))
    kinds = sorted(doc["kind"] for docs in found.values() for doc in docs)
    # The Secrets: two service account keys, the cluster's Hetzner token, the snapshots' S3
    # settings; the StorageClass of the example's one location.
    assert kinds == [
        "ClusterIssuer",
        "ClusterIssuer",
        *["HelmChart"] * 4,
        "HelmChartConfig",
        *["Secret"] * 4,
        "StorageClass",
    ]
    for name, docs in found.items():
        for doc in docs:
            if doc["kind"] == "HelmChart":
                jsonschema.validate(doc, HELM_CHART)
            elif doc["kind"] == "HelmChartConfig":
                jsonschema.validate(doc, HELM_CHART_CONFIG)
            elif doc["kind"] in ("Secret", "StorageClass"):
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            else:
                assert name == ISSUERS_MANIFEST
                assert_cluster_issuer(doc)


def assert_cluster_issuer(doc: dict[str, Any]) -> None:
    """`doc` is a ClusterIssuer of cert-manager's CRD, every field known to it: read through
    the models generated from that CRD (cloudcoil), it comes back unchanged (an unknown field
    would be dropped, a wrongly typed one refused)."""
    assert doc["apiVersion"] == "cert-manager.io/v1"
    issuer = ClusterIssuer.model_validate(doc)
    assert issuer.model_dump(by_alias=True, exclude_unset=True, mode="json") == doc


def test_the_validators_refuse_a_misspelled_field(rendered: dict[str, RenderedNode]) -> None:
    found = documents(ignition_files(rendered["control-plane"].ignition))
    chart = copy.deepcopy(found[CHARTS_MANIFEST][1])
    chart["spec"]["valueContent"] = chart["spec"].pop("valuesContent")
    with pytest.raises(jsonschema.ValidationError, match="valueContent"):
        jsonschema.validate(chart, HELM_CHART)
    config = copy.deepcopy(helm_charts(_charts_text(found))["traefik"])
    config["spec"]["valueContent"] = config["spec"].pop("valuesContent")
    with pytest.raises(jsonschema.ValidationError, match="valueContent"):
        jsonschema.validate(config, HELM_CHART_CONFIG)
    issuer = copy.deepcopy(found[ISSUERS_MANIFEST][0])
    issuer["spec"]["acme"]["solvers"][0]["dns01"]["cloudDns"] = {"project": "x"}
    # The CRD's models drop the field they do not know (cloudDNS is the one they know), so
    # the round trip of assert_cluster_issuer comes back without it, and only without it.
    model = ClusterIssuer.model_validate(issuer)
    dumped = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    written = issuer["spec"]["acme"]["solvers"][0]["dns01"]
    assert set(written) - set(dumped["spec"]["acme"]["solvers"][0]["dns01"]) == {"cloudDns"}
    with pytest.raises(AssertionError):
        assert_cluster_issuer(issuer)
    secret = copy.deepcopy(found[GCP_SECRETS["external_dns_key"][0]][0])
    secret["stringdata"] = secret.pop("stringData")
    with pytest.raises(kubernetes_validate.ValidationError, match="'stringdata' was unexpected"):
        kubernetes_validate.validate(secret, K8S_VERSION, strict=True)
    (storage_class,) = [
        copy.deepcopy(doc) for doc in found[CHARTS_MANIFEST] if doc["kind"] == "StorageClass"
    ]
    storage_class["allowedTopology"] = storage_class.pop("allowedTopologies")
    with pytest.raises(kubernetes_validate.ValidationError, match="'allowedTopology' was unexp"):
        kubernetes_validate.validate(storage_class, K8S_VERSION, strict=True)


def test_external_dns_values_validate_against_the_pinned_charts_schema(
    rendered: dict[str, RenderedNode],
) -> None:
    files = ignition_files(rendered["control-plane"].ignition)
    chart = helm_charts(files[f"{MANIFESTS}/{CHARTS_MANIFEST}"])["external-dns"]
    assert chart["spec"]["version"] == PINNED.external_dns.version
    schema = values_schema("external-dns", chart["spec"]["version"])
    values = yaml.safe_load(chart["spec"]["valuesContent"])
    jsonschema.validate(values, schema)
    with pytest.raises(jsonschema.ValidationError) as refused:
        jsonschema.validate({**values, "extraArgs": {"google-project": "x"}}, schema)
    assert list(refused.value.absolute_path) == ["extraArgs"]


def test_the_charts_are_the_pinned_ones_from_their_repositories(
    rendered: dict[str, RenderedNode],
) -> None:
    files = ignition_files(rendered["control-plane"].ignition)
    found = helm_charts(files[f"{MANIFESTS}/{CHARTS_MANIFEST}"])
    assert list(found) == [
        "hcloud-cloud-controller-manager",
        "hcloud-csi",
        "traefik",
        "cert-manager",
        "external-dns",
        "hcloud-volumes-nbg1",  # the example's one location
    ]
    pins = load_chart_pins(REPO)
    for chart, pin in (
        (CERT_MANAGER, pins.cert_manager),
        (EXTERNAL_DNS, pins.external_dns),
        (HCLOUD_CCM, pins.hcloud_ccm),
        (HCLOUD_CSI, pins.hcloud_csi),
    ):
        doc = found[chart.name]
        assert doc["metadata"] == {
            "name": chart.name,
            "namespace": "kube-system",
            "labels": {"app.kubernetes.io/managed-by": "raya"},
        }
        assert (doc["spec"]["repo"], doc["spec"]["chart"]) == (chart.repo, chart.name)
        assert doc["spec"]["version"] == pin.version
        assert doc["spec"]["targetNamespace"] == chart.target_namespace
        # Only the cloud controller's install job runs before nodes are initialised.
        assert doc["spec"].get("bootstrap", False) is (chart is HCLOUD_CCM)
    assert (HCLOUD_CCM.repo, HCLOUD_CSI.repo) == ("https://charts.hetzner.cloud",) * 2
    cert_manager = found["cert-manager"]["spec"]
    assert cert_manager["createNamespace"] is True
    # With its CRDs, and the issuers' Secrets (credentials, ACME keys) in kube-system.
    assert yaml.safe_load(cert_manager["valuesContent"]) == {
        "crds": {"enabled": True, "keep": True},
        "clusterResourceNamespace": "kube-system",
    }


# What Hetzner's cloud controller 1.35.0 reads from its environment: internal/config/config.go
# and internal/config/load_balancer_envs.go (hetznercloud/hcloud-cloud-controller-manager).
CCM_ENV = {
    *("HCLOUD_TOKEN", "HCLOUD_ENDPOINT", "HCLOUD_NETWORK", "HCLOUD_DEBUG"),
    *("ROBOT_ENABLED", "ROBOT_USER", "ROBOT_PASSWORD", "ROBOT_CACHE_TIMEOUT"),
    *("ROBOT_RATE_LIMIT_WAIT_TIME", "ROBOT_FORWARD_INTERNAL_IPS"),
    *("HCLOUD_INSTANCES_ZONE_LABEL_ENABLED", "HCLOUD_INSTANCES_ADDRESS_FAMILY"),
    *("HCLOUD_SERVER_CACHE_MODE", "HCLOUD_SERVER_CACHE_MAX_AGE"),
    *("HCLOUD_NETWORK_DISABLE_ATTACHED_CHECK", "HCLOUD_NETWORK_ROUTES_ENABLED"),
    *("HCLOUD_METRICS_ENABLED", "HCLOUD_METRICS_ADDRESS"),
    *(
        f"HCLOUD_LOAD_BALANCERS_{name}"
        for name in (
            "ENABLED",
            "LOCATION",
            "NETWORK_ZONE",
            "DISABLE_PRIVATE_INGRESS",
            "USE_PRIVATE_IP",
            "DISABLE_IPV6",
            "ALGORITHM_TYPE",
            "DISABLE_PUBLIC_NETWORK",
            "HEALTH_CHECK_INTERVAL",
            "HEALTH_CHECK_RETRIES",
            "HEALTH_CHECK_TIMEOUT",
            "PRIVATE_SUBNET_IP_RANGE",
            "TYPE",
            "USES_PROXYPROTOCOL",
        )
    ),
}


def declared(values: Any, defaults: Any, where: str = "") -> None:
    """Every value set in `values` is one `defaults` (a chart's values.yaml) declares, of the
    same type; the `env` map's names are the controller's own (CCM_ENV)."""
    assert isinstance(values, dict) and isinstance(defaults, dict), where
    for key, value in values.items():
        assert key in defaults, f"{where}{key} is not a value of the chart"
        if where + key == "env":
            assert set(value) <= CCM_ENV, set(value) - CCM_ENV
            assert all(set(entry) == {"value"} for entry in value.values())
            assert all(isinstance(entry["value"], str) for entry in value.values())
        elif isinstance(defaults[key], dict):
            declared(value, defaults[key], f"{where}{key}.")
        else:
            assert type(value) is type(defaults[key]), f"{where}{key}"


def hetzner_values(files: Mapping[str, str | bytes], name: str) -> Any:
    text = files.get(CHARTS_MANIFEST) or files[f"{MANIFESTS}/{CHARTS_MANIFEST}"]
    return yaml.safe_load(helm_charts(text)[name]["spec"]["valuesContent"])


def test_the_csi_values_validate_against_the_pinned_charts_schema(
    rendered: dict[str, RenderedNode],
) -> None:
    files = ignition_files(rendered["control-plane"].ignition)
    values = hetzner_values(files, "hcloud-csi")
    schema = strict(values_schema("hcloud-csi", PINNED.hcloud_csi.version))
    jsonschema.validate(values, schema)
    assert values == {
        "controller": {"hcloudVolumeDefaultLocation": "nbg1"},
        "node": {"hostNetwork": True},  # the metadata guard closes pod networks to it
        "storageClasses": [
            {"name": "hcloud-volumes", "defaultStorageClass": True, "reclaimPolicy": "Retain"}
        ],
    }
    with pytest.raises(jsonschema.ValidationError, match="hostNetwrok"):
        jsonschema.validate({**values, "node": {"hostNetwrok": True}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**values, "storageClasses": {"name": "x"}}, schema)


def test_the_cloud_controller_values_are_the_charts_own(
    rendered: dict[str, RenderedNode],
) -> None:
    """Its chart ships no values schema: each value is checked against the chart's defaults."""
    files = ignition_files(rendered["control-plane"].ignition)
    values = hetzner_values(files, "hcloud-cloud-controller-manager")
    path = DATA / "charts" / f"{HCLOUD_CCM.name}-{PINNED.hcloud_ccm.version}.values.yaml"
    if not path.is_file():
        pytest.fail(
            f"image/charts.pin pins {HCLOUD_CCM.name} {PINNED.hcloud_ccm.version} but {path} "
            "is missing: vendor that version's values.yaml (see tests/data/charts/README.md)"
        )
    defaults = yaml.safe_load(path.read_text())
    declared(values, defaults)
    assert values == {
        "networking": {"enabled": True, "clusterCIDR": "10.42.0.0/16"},
        "env": {
            "HCLOUD_NETWORK_ROUTES_ENABLED": {"value": "false"},
            "HCLOUD_LOAD_BALANCERS_LOCATION": {"value": "nbg1"},
            "HCLOUD_LOAD_BALANCERS_USE_PRIVATE_IP": {"value": "true"},
            # raya:loadBalancerSubnet's default: the /24 after nodesSubnet 10.0.1.0/24.
            "HCLOUD_LOAD_BALANCERS_PRIVATE_SUBNET_IP_RANGE": {"value": "10.0.2.0/24"},
        },
    }
    # The chart's network comes from the same Secret raya writes, under the key it writes.
    assert defaults["networking"]["network"]["valueFrom"]["secretKeyRef"] == {
        "name": "hcloud",
        "key": "network",
    }
    assert defaults["env"]["HCLOUD_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "hcloud",
        "key": "token",
    }
    wrong: dict[str, Any]
    for wrong in ({"networking": {"enable": True}}, {"env": {"HCLOUD_NETWORK_ROUTES": {}}}):
        with pytest.raises(AssertionError):
            declared(wrong, defaults)


def test_the_hcloud_secret_holds_the_token_and_the_network(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    files = ignition_files(rendered["control-plane"].ignition)
    (secret,) = yaml.safe_load_all(files[f"{MANIFESTS}/{HCLOUD_SECRET[0]}"])
    kubernetes_validate.validate(secret, K8S_VERSION, strict=True)
    assert secret["metadata"]["name"] == "hcloud"  # what both charts read by default
    assert secret["metadata"]["namespace"] == "kube-system"
    assert secret["stringData"] == {"token": secrets.hcloud_token, "network": "raya"}
    assert cluster.config.network_name == "raya"  # the network the program creates
    # The token is in that file only.
    token = secrets.hcloud_token.encode()
    assert [path for path, data in files.items() if token in data] == [
        f"{MANIFESTS}/{HCLOUD_SECRET[0]}"
    ]


def test_traefik_becomes_a_load_balancer_over_the_private_network(
    rendered: dict[str, RenderedNode],
) -> None:
    files = ignition_files(rendered["control-plane"].ignition)
    traefik = helm_charts(files[f"{MANIFESTS}/{CHARTS_MANIFEST}"])["traefik"]
    assert (traefik["kind"], traefik["metadata"]["namespace"]) == ("HelmChartConfig", "kube-system")
    values = yaml.safe_load(traefik["spec"]["valuesContent"])
    assert values == {
        "service": {
            "annotations": {
                "load-balancer.hetzner.cloud/name": "raya-ingress",
                "load-balancer.hetzner.cloud/location": "nbg1",
                "load-balancer.hetzner.cloud/type": "lb11",
                "load-balancer.hetzner.cloud/use-private-ip": "true",
            }
        }
    }


def test_locations_follow_the_stack() -> None:
    stack = config(location="hel1", clusterName="lab")
    files = manifests(fleet(stack), PINNED, KEYS["alpha-project"], KEYS["alpha-project"])
    ccm = hetzner_values(files, "hcloud-cloud-controller-manager")
    assert ccm["env"]["HCLOUD_LOAD_BALANCERS_LOCATION"] == {"value": "hel1"}
    assert hetzner_values(files, "hcloud-csi")["controller"] == {
        "hcloudVolumeDefaultLocation": "hel1"
    }
    traefik = hetzner_values(files, "traefik")
    assert traefik["service"]["annotations"]["load-balancer.hetzner.cloud/location"] == "hel1"
    assert traefik["service"]["annotations"]["load-balancer.hetzner.cloud/name"] == "lab-ingress"
    storage_class = helm_charts(files[CHARTS_MANIFEST])["hcloud-volumes-hel1"]
    assert storage_class["allowedTopologies"] == [
        {"matchLabelExpressions": [{"key": "csi.hetzner.cloud/location", "values": ["hel1"]}]}
    ]


@pytest.mark.parametrize(
    ("stack", "project"),
    [
        (config(), "alpha-project"),
        (
            config(
                clusterName="lab",
                managedSubdomain="k8s",
                parentZone="corp.example.org",
                acmeEmail="certs@corp.example.org",
            ),
            "beta-project-2",
        ),
    ],
    ids=["raya.example.com", "k8s.corp.example.org"],
)
def test_zone_and_project_follow_the_stack(stack: StackConfig, project: str) -> None:
    # The zone's name in Cloud DNS, as raya.cloud.program.dns declares it.
    zone_name = {"raya.example.com.": "raya-example-com", "k8s.corp.example.org.": (
        "k8s-corp-example-org"
    )}[stack.zone_dns_name]
    zone = stack.zone_dns_name.rstrip(".")
    files = manifests(fleet(stack), PINNED, KEYS[project], KEYS[project])
    chart = helm_charts(files[CHARTS_MANIFEST])["external-dns"]
    values = yaml.safe_load(chart["spec"]["valuesContent"])
    assert values["domainFilters"] == [zone]
    assert values["provider"] == {"name": "google"}
    assert f"--google-project={project}" in values["extraArgs"]
    assert values["txtOwnerId"] == f"{stack.cluster_name}@{zone}"
    assert values["policy"] == "sync" and values["registry"] == "txt"
    assert values["sources"] == ["service", "ingress"]
    secret = GCP_SECRETS["external_dns_key"][1]
    assert values["extraVolumes"] == [{"name": "gcp-credentials", "secret": {"secretName": secret}}]
    (mount,) = values["extraVolumeMounts"]
    (env,) = values["env"]
    assert env == {
        "name": "GOOGLE_APPLICATION_CREDENTIALS",
        "value": f"{mount['mountPath']}/credentials.json",
    }
    issuers = list(yaml.safe_load_all(files[ISSUERS_MANIFEST]))
    assert {issuer["metadata"]["name"]: issuer["spec"]["acme"]["server"] for issuer in issuers} == (
        ISSUERS
    )
    for issuer in issuers:
        acme = issuer["spec"]["acme"]
        assert acme["email"] == stack.acme_email
        assert acme["privateKeySecretRef"] == {"name": f"{issuer['metadata']['name']}-account-key"}
        (solver,) = acme["solvers"]
        assert solver["selector"] == {"dnsZones": [zone]}
        assert solver["dns01"]["cloudDNS"] == {
            "project": project,
            # Named, so the solver never lists zones: its account may not.
            "hostedZoneName": zone_name,
            "serviceAccountSecretRef": {
                "name": GCP_SECRETS["cert_manager_key"][1],
                "key": "credentials.json",
            },
        }


def test_two_clusters_never_share_an_owner_id() -> None:
    same_name = [config(), config(managedSubdomain="other"), config(parentZone="example.net")]
    owners = set()
    for stack in same_name:
        files = manifests(fleet(stack), PINNED, KEYS["alpha-project"], KEYS["alpha-project"])
        chart = helm_charts(files[CHARTS_MANIFEST])["external-dns"]
        owners.add(yaml.safe_load(chart["spec"]["valuesContent"])["txtOwnerId"])
    assert len(owners) == len(same_name)


@pytest.mark.parametrize(
    "key",
    [
        json.dumps({"type": "service_account"}),
        json.dumps({"type": "service_account", "project_id": "Bad Project"}),
        "[]",
        "not json",
    ],
)
def test_a_key_without_a_usable_project_is_refused(key: str) -> None:
    with pytest.raises(RenderError, match=r"secrets: cert_manager_key has no usable project_id"):
        manifests(fleet(config()), PINNED, KEYS["alpha-project"], key)


def test_the_control_plane_render_uses_the_keys_projects(
    cluster: Cluster, rendered: dict[str, RenderedNode]
) -> None:
    found = documents(ignition_files(rendered["control-plane"].ignition))
    # generate_example_secrets mints its keys in project raya-example.
    chart = helm_charts(_charts_text(found))["external-dns"]
    assert "--google-project=raya-example" in chart["spec"]["valuesContent"]
    for issuer in found[ISSUERS_MANIFEST]:
        assert issuer["spec"]["acme"]["solvers"][0]["dns01"]["cloudDNS"]["project"] == (
            "raya-example"
        )
        assert issuer["spec"]["acme"]["email"] == cluster.config.acme_email


def test_no_agent_carries_any_of_it(
    cluster: Cluster, secrets: ClusterSecrets, rendered: dict[str, RenderedNode]
) -> None:
    markers = [b"helm.cattle.io", b"cert-manager", b"external-dns", b"letsencrypt"]
    markers += [b"charts.hetzner.cloud", b"hcloud-csi", secrets.hcloud_token.encode()]
    markers.append(cluster.config.acme_email.encode())
    for agent in cluster.agents:
        files = ignition_files(rendered[agent.name].ignition)
        assert not [path for path in files if path.startswith(MANIFESTS)]
        for path, data in files.items():
            for marker in markers:
                assert marker not in data, (agent.name, path, marker)
        config = json.loads(rendered[agent.name].ignition)
        assert not any(marker in json.dumps(config).encode() for marker in markers)
    # ... while the control plane does (the markers can be found where they are).
    control_plane = b"".join(ignition_files(rendered["control-plane"].ignition).values())
    assert all(marker in control_plane for marker in markers)


def test_manifests_are_deterministic_and_carry_no_key() -> None:
    stack = config()
    first = manifests(fleet(stack), PINNED, KEYS["alpha-project"], KEYS["beta-project-2"])
    assert first == manifests(fleet(stack), PINNED, KEYS["alpha-project"], KEYS["beta-project-2"])
    for key in KEYS.values():
        private_key = json.loads(key)["private_key"]
        assert all(private_key not in text for text in first.values())
    # Everything but the charts' versions is independent of the pins.
    bumped = dataclasses.replace(
        PINNED, external_dns=dataclasses.replace(PINNED.external_dns, version="9.9.9")
    )
    second = manifests(fleet(stack), bumped, KEYS["alpha-project"], KEYS["beta-project-2"])
    assert [name for name in first if first[name] != second[name]] == [CHARTS_MANIFEST]
    assert helm_charts(second[CHARTS_MANIFEST])["external-dns"]["spec"]["version"] == "9.9.9"


# ---- addon_status, for `raya status` ----

JOB_COMPLETE = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}


def api(objects: Mapping[str, Any]) -> Any:
    """A Kubernetes API on 127.0.0.1 serving `objects` by path, and a client for it."""

    def respond(request: BaseHTTPRequestHandler) -> tuple[int, bytes, str]:
        if request.path in objects:
            return 200, json.dumps(objects[request.path]).encode(), "application/json"
        body = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
        return 404, json.dumps(body).encode(), "application/json"

    return http_server(respond)


def client(base: str) -> Any:
    def get(path: str) -> Any:
        try:
            with urllib.request.urlopen(base + path, timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    return get


def helm_chart(name: str, job: str | None) -> dict[str, Any]:
    status = {"jobName": job} if job else {}
    return {"kind": "HelmChart", "metadata": {"name": name}, "status": status}


def installed(objects: dict[str, Any], failing: str = "") -> None:
    """Every chart's install job complete (but `failing`'s) and its workloads ready."""
    base = "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts"
    for chart in CHARTS:
        job = f"helm-install-{chart.name}"
        objects[f"{base}/{chart.name}"] = helm_chart(chart.name, job)
        objects[f"/apis/batch/v1/namespaces/kube-system/jobs/{job}"] = (
            {
                "status": {
                    "failed": 2,
                    "conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimit"}],
                }
            }
            if chart.name == failing
            else JOB_COMPLETE
        )
    apps = "/apis/apps/v1/namespaces/kube-system"
    objects[f"{apps}/deployments/hcloud-cloud-controller-manager"] = {
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1},
    }
    objects[f"{apps}/deployments/hcloud-csi-controller"] = {
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1},
    }
    objects[f"{apps}/daemonsets/hcloud-csi-node"] = {
        "status": {"desiredNumberScheduled": 4, "numberReady": 4}
    }


def test_status_of_a_cluster_that_is_up() -> None:
    issuers = "/apis/cert-manager.io/v1/clusterissuers"
    ready = {"type": "Ready", "status": "True", "message": "The ACME account was registered"}
    objects: dict[str, Any] = {
        f"{issuers}/letsencrypt-staging": {"status": {"conditions": [ready]}},
        f"{issuers}/letsencrypt-production": {
            "status": {
                "conditions": [{"type": "Ready", "status": "False", "reason": "ErrRegisterACME"}]
            }
        },
    }
    installed(objects, failing="external-dns")
    with api(objects) as url:
        states = addon_status(client(url))
    assert states == (
        AddonState(
            "HelmChart",
            "hcloud-cloud-controller-manager",
            True,
            "job helm-install-hcloud-cloud-controller-manager complete; "
            "deployment hcloud-cloud-controller-manager 1/1 ready",
        ),
        AddonState(
            "HelmChart",
            "hcloud-csi",
            True,
            "job helm-install-hcloud-csi complete; deployment hcloud-csi-controller 1/1 ready; "
            "daemonset hcloud-csi-node 4/4 ready",
        ),
        AddonState("HelmChart", "cert-manager", True, "job helm-install-cert-manager complete"),
        AddonState(
            "HelmChart", "external-dns", False, "job helm-install-external-dns failed: BackoffLimit"
        ),
        AddonState(
            "ClusterIssuer",
            "letsencrypt-staging",
            True,
            "Ready=True: The ACME account was registered",
        ),
        AddonState(
            "ClusterIssuer", "letsencrypt-production", False, "Ready=False: ErrRegisterACME"
        ),
    )


def test_an_installed_chart_whose_pods_are_not_ready_is_not_healthy() -> None:
    """A bad token: the install job completes, the cloud controller crash-loops."""
    objects: dict[str, Any] = {}
    installed(objects)
    apps = "/apis/apps/v1/namespaces/kube-system"
    objects[f"{apps}/deployments/hcloud-cloud-controller-manager"]["status"] = {}
    objects[f"{apps}/daemonsets/hcloud-csi-node"]["status"]["numberReady"] = 3
    del objects[f"{apps}/deployments/hcloud-csi-controller"]
    with api(objects) as url:
        states = {state.name: state for state in addon_status(client(url))}
    assert states["hcloud-cloud-controller-manager"] == AddonState(
        "HelmChart",
        "hcloud-cloud-controller-manager",
        False,
        "job helm-install-hcloud-cloud-controller-manager complete; "
        "deployment hcloud-cloud-controller-manager 0/1 ready",
    )
    assert states["hcloud-csi"].ready is False
    assert states["hcloud-csi"].detail == (
        "job helm-install-hcloud-csi complete; deployment hcloud-csi-controller not found; "
        "daemonset hcloud-csi-node 3/4 ready"
    )
    assert states["cert-manager"].ready  # no workloads listed: its job says it all


def test_status_of_a_cluster_still_starting() -> None:
    base = "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts"
    objects = {
        f"{base}/cert-manager": helm_chart("cert-manager", "helm-install-cert-manager"),
        f"{base}/external-dns": helm_chart("external-dns", None),
        "/apis/batch/v1/namespaces/kube-system/jobs/helm-install-cert-manager": {
            "status": {"active": 1, "failed": 1}
        },
        "/apis/cert-manager.io/v1/clusterissuers/letsencrypt-staging": {"status": {}},
    }
    with api(objects) as url:
        states = addon_status(client(url))
    assert [(state.name, state.ready, state.detail) for state in states] == [
        (
            "hcloud-cloud-controller-manager",
            False,
            "no HelmChart kube-system/hcloud-cloud-controller-manager yet",
        ),
        ("hcloud-csi", False, "no HelmChart kube-system/hcloud-csi yet"),
        ("cert-manager", False, "job helm-install-cert-manager running, 1 failed attempts"),
        ("external-dns", False, "no install job yet"),
        ("letsencrypt-staging", False, "no Ready condition yet"),
        ("letsencrypt-production", False, "not created yet (cert-manager not up?)"),
    ]
    with api({}) as url:
        assert {state.detail for state in addon_status(client(url))} == {
            "no HelmChart kube-system/hcloud-cloud-controller-manager yet",
            "no HelmChart kube-system/hcloud-csi yet",
            "no HelmChart kube-system/cert-manager yet",
            "no HelmChart kube-system/external-dns yet",
            "not created yet (cert-manager not up?)",
        }


def test_the_cloud_controller_addresses_its_balancers_in_the_stacks_subnet() -> None:
    stack = config(loadBalancerSubnet="10.0.64.0/26")
    files = manifests(fleet(stack), PINNED, KEYS["alpha-project"], KEYS["alpha-project"])
    ccm = hetzner_values(files, "hcloud-cloud-controller-manager")
    assert ccm["env"]["HCLOUD_LOAD_BALANCERS_PRIVATE_SUBNET_IP_RANGE"] == {"value": "10.0.64.0/26"}
