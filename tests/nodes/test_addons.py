"""The add-ons in the control plane's manifests directory: external-dns, cert-manager and the
Let's Encrypt issuers, each manifest validated offline against the schema of its kind."""

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
from raya.model.fleet import Cluster
from raya.model.pins import load_chart_pins, load_pins
from raya.nodes.addons import (
    CERT_MANAGER,
    CHARTS_MANIFEST,
    EXTERNAL_DNS,
    GCP_SECRETS,
    ISSUERS,
    ISSUERS_MANIFEST,
    AddonState,
    addon_status,
    manifests,
)
from raya.nodes.identity import ClusterSecrets, example_service_account_key
from raya.nodes.render import RenderedNode
from tests.nodes.conftest import CHARTS
from tests.nodes.tools import ignition_files
from tests.support import REPO, http_server

MANIFESTS = "/var/lib/rancher/k3s/server/manifests"
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


def values_schema(chart: str, version: str) -> Any:
    path = DATA / "charts" / f"{chart}-{version}.values.schema.json"
    if not path.is_file():
        pytest.fail(
            f"image/charts.pin pins {chart} {version} but {path} is missing: vendor that "
            "version's values.schema.json from the chart (see tests/data/charts/README.md)"
        )
    return json.loads(path.read_text())


def helm_charts(text: str | bytes) -> dict[str, dict[str, Any]]:
    """The HelmCharts of the charts manifest, by name."""
    return {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(text)}


def documents(files: Mapping[str, bytes]) -> dict[str, list[dict[str, Any]]]:
    """Every manifest of the manifests directory, as its YAML documents."""
    return {
        path.rsplit("/", 1)[1]: list(yaml.safe_load_all(data))
        for path, data in files.items()
        if path.startswith(f"{MANIFESTS}/")
    }


def config(**changes: Any) -> StackConfig:
    values = {
        "authorizedUsers": ["octo-alice"],
        "managedSubdomain": "raya",
        "parentZone": "example.com",
        "acmeEmail": "ops@example.org",
        **changes,
    }
    return parse_stack_config(values, "test")


KEYS = {
    project: example_service_account_key(f"dns@{project}.iam.gserviceaccount.com", project)
    for project in ("alpha-project", "beta-project-2")
}


def test_each_manifest_validates_against_the_schema_of_its_kind(
    rendered: dict[str, RenderedNode],
) -> None:
    found = documents(ignition_files(rendered["control-plane"].ignition))
    kinds = sorted(doc["kind"] for docs in found.values() for doc in docs)
    assert kinds == ["ClusterIssuer", "ClusterIssuer", "HelmChart", "HelmChart", "Secret", "Secret"]
    for name, docs in found.items():
        for doc in docs:
            if doc["kind"] == "HelmChart":
                jsonschema.validate(doc, HELM_CHART)
            elif doc["kind"] == "Secret":
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


def test_external_dns_values_validate_against_the_pinned_charts_schema(
    rendered: dict[str, RenderedNode],
) -> None:
    files = ignition_files(rendered["control-plane"].ignition)
    chart = helm_charts(files[f"{MANIFESTS}/{CHARTS_MANIFEST}"])["external-dns"]
    assert chart["spec"]["version"] == CHARTS.external_dns.version
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
    assert list(found) == ["cert-manager", "external-dns"]
    pins = load_chart_pins(REPO)
    for chart, pin in ((CERT_MANAGER, pins.cert_manager), (EXTERNAL_DNS, pins.external_dns)):
        doc = found[chart.name]
        assert doc["metadata"] == {
            "name": chart.name,
            "namespace": "kube-system",
            "labels": {"app.kubernetes.io/managed-by": "raya"},
        }
        assert (doc["spec"]["repo"], doc["spec"]["chart"]) == (chart.repo, chart.name)
        assert doc["spec"]["version"] == pin.version
        assert doc["spec"]["targetNamespace"] == chart.target_namespace
    cert_manager = found["cert-manager"]["spec"]
    assert cert_manager["createNamespace"] is True
    # With its CRDs, and the issuers' Secrets (credentials, ACME keys) in kube-system.
    assert yaml.safe_load(cert_manager["valuesContent"]) == {
        "crds": {"enabled": True, "keep": True},
        "clusterResourceNamespace": "kube-system",
    }


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
    zone = stack.zone_dns_name.rstrip(".")
    files = manifests(stack, CHARTS, KEYS[project], KEYS[project])
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
            "serviceAccountSecretRef": {
                "name": GCP_SECRETS["cert_manager_key"][1],
                "key": "credentials.json",
            },
        }


def test_two_clusters_never_share_an_owner_id() -> None:
    same_name = [config(), config(managedSubdomain="other"), config(parentZone="example.net")]
    owners = set()
    for stack in same_name:
        files = manifests(stack, CHARTS, KEYS["alpha-project"], KEYS["alpha-project"])
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
        manifests(config(), CHARTS, KEYS["alpha-project"], key)


def test_the_control_plane_render_uses_the_keys_projects(
    cluster: Cluster, rendered: dict[str, RenderedNode]
) -> None:
    found = documents(ignition_files(rendered["control-plane"].ignition))
    # generate_example_secrets mints its keys in project raya-example.
    chart = found[CHARTS_MANIFEST][1]
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
    first = manifests(stack, CHARTS, KEYS["alpha-project"], KEYS["beta-project-2"])
    assert first == manifests(stack, CHARTS, KEYS["alpha-project"], KEYS["beta-project-2"])
    for key in KEYS.values():
        private_key = json.loads(key)["private_key"]
        assert all(private_key not in text for text in first.values())
    # Everything but the charts' versions is independent of the pins.
    bumped = dataclasses.replace(
        CHARTS, external_dns=dataclasses.replace(CHARTS.external_dns, version="9.9.9")
    )
    second = manifests(stack, bumped, KEYS["alpha-project"], KEYS["beta-project-2"])
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


def test_status_of_a_cluster_that_is_up() -> None:
    base = "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts"
    jobs = "/apis/batch/v1/namespaces/kube-system/jobs"
    issuers = "/apis/cert-manager.io/v1/clusterissuers"
    ready = {"type": "Ready", "status": "True", "message": "The ACME account was registered"}
    objects = {
        f"{base}/cert-manager": helm_chart("cert-manager", "helm-install-cert-manager"),
        f"{base}/external-dns": helm_chart("external-dns", "helm-install-external-dns"),
        f"{jobs}/helm-install-cert-manager": JOB_COMPLETE,
        f"{jobs}/helm-install-external-dns": {
            "status": {
                "failed": 2,
                "conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimit"}],
            }
        },
        f"{issuers}/letsencrypt-staging": {"status": {"conditions": [ready]}},
        f"{issuers}/letsencrypt-production": {
            "status": {
                "conditions": [{"type": "Ready", "status": "False", "reason": "ErrRegisterACME"}]
            }
        },
    }
    with api(objects) as url:
        states = addon_status(client(url))
    assert states == (
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
        ("cert-manager", False, "job helm-install-cert-manager running, 1 failed attempts"),
        ("external-dns", False, "no install job yet"),
        ("letsencrypt-staging", False, "no Ready condition yet"),
        ("letsencrypt-production", False, "not created yet (cert-manager not up?)"),
    ]
    with api({}) as url:
        assert {state.detail for state in addon_status(client(url))} == {
            "no HelmChart kube-system/cert-manager yet",
            "no HelmChart kube-system/external-dns yet",
            "not created yet (cert-manager not up?)",
        }
