"""The admin kubeconfig the program exports: a client certificate from the cluster's client CA,
trusting the server CA, proven with the official `kubernetes` client against an API over real
TLS on 127.0.0.1 that requires a certificate from that client CA, as k3s does."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from raya.nodes.identity import generate_example_secrets
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import Run
from tests.cloud.program.test_program import CP_CONFIG, provider_mocks, user_data
from tests.operate import kube_api as ka

NAME = "cp.raya.example.com"


def _list_nodes(document: dict[str, Any], url: str) -> Any:
    """The nodes, through the official client configured by the kubeconfig alone, only the
    address changed for the local API (its certificate also names 127.0.0.1)."""
    document = json.loads(json.dumps(document))
    document["clusters"][0]["cluster"]["server"] = url
    api = k8s_config.new_client_from_config_dict(document)  # type: ignore[no-untyped-call]
    api.configuration.retries = False
    try:
        return k8s.CoreV1Api(api).list_node(_request_timeout=5)
    finally:
        api.close()


def test_kubeconfig_is_a_secret_output_for_the_control_planes_name(deployed: Run) -> None:
    document = yaml.safe_load(deployed.outputs["kubeconfig"])
    (cluster,) = document["clusters"]
    assert cluster["cluster"]["server"] == "https://cp.raya.example.com:6443"
    assert (
        base64.b64decode(cluster["cluster"]["certificate-authority-data"]).decode()
        == (deployed.resources["server-ca"].outputs["certPem"])
    )
    assert document["current-context"] == "raya"
    # The API's name is one the server certificate holds: k3s adds its tls-san.
    control_plane = ignition_files(user_data(deployed)["control-plane"])
    assert "cp.raya.example.com" in yaml.safe_load(control_plane[CP_CONFIG])["tls-san"]


def test_stack_output_is_marked_secret() -> None:
    # Under mocks the program's outputs come back resolved; build them again as Outputs to
    # see the flag the engine gets.
    import pulumi

    from raya.cloud.program import define
    from tests.cloud.program.mocks import run_program
    from tests.cloud.program.test_program import CLUSTER_TOKEN, EXAMPLE, PINS, RENDER

    flags: dict[str, bool] = {}

    def program() -> Any:
        outputs = define(EXAMPLE, PINS, RENDER, hcloud_token=CLUSTER_TOKEN)
        return pulumi.Output.all(
            kubeconfig=outputs["kubeconfig"].is_secret(),
            zone=pulumi.Output.from_input(outputs["zone"]).is_secret(),
        ).apply(lambda value: flags.update(value))

    run_program(provider_mocks(), program)
    assert flags == {"kubeconfig": True, "zone": False}


def test_admin_certificate_is_bounded_and_in_system_masters(deployed: Run) -> None:
    document = yaml.safe_load(deployed.outputs["kubeconfig"])
    (user,) = document["users"]
    pem = base64.b64decode(user["user"]["client-certificate-data"])
    certificate = x509.load_pem_x509_certificate(pem)
    client_ca = x509.load_pem_x509_certificate(
        deployed.resources["client-ca"].outputs["certPem"].encode()
    )
    certificate.verify_directly_issued_by(client_ca)
    subject = certificate.subject
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # 90 days (docs/using.md, `raya kubeconfig --help`), re-issued by `raya up` in its last 30.
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert lifetime == datetime.timedelta(days=90)
    inputs = deployed.resources["admin-cert"].inputs
    assert inputs["earlyRenewalHours"] == 30 * 24
    assert "admin-key" in deployed.resources
    assert "privateKeyPem" in deployed.resources["admin-key"].secret_outputs


def test_kubeconfig_works_against_an_api_requiring_the_client_ca(
    deployed: Run, tmp_path: Path
) -> None:
    document = yaml.safe_load(deployed.outputs["kubeconfig"])
    server_ca = ka.deployment_authority(deployed.resources, "server-ca")
    client_ca = deployed.resources["client-ca"].outputs["certPem"]
    with ka.kubernetes_api(ka.Cluster(), server_ca, client_ca, tmp_path, NAME) as url:
        assert _list_nodes(document, url).kind == "NodeList"


def test_kubeconfig_is_refused_with_another_server_ca_or_client_certificate(
    deployed: Run, tmp_path: Path
) -> None:
    document = yaml.safe_load(deployed.outputs["kubeconfig"])
    client_ca = deployed.resources["client-ca"].outputs["certPem"]
    other = generate_example_secrets(())
    # An endpoint whose certificate another CA signed: the kubeconfig's CA refuses it.
    refused = pytest.raises(urllib3.exceptions.MaxRetryError, match="CERTIFICATE_VERIFY_FAILED")
    with (
        ka.kubernetes_api(ka.Cluster(), other.server_ca, client_ca, tmp_path, NAME) as url,
        refused,
    ):
        _list_nodes(document, url)
    # The right endpoint, but a client certificate from another client CA: refused by it, in
    # the TLS handshake (the client sees the server's `unknown ca` alert, or the connection
    # closed under it), where the same endpoint with the right client CA answers (above).
    server_ca = ka.deployment_authority(deployed.resources, "server-ca")
    other_ca = other.client_ca.cert_pem
    with (
        ka.kubernetes_api(ka.Cluster(), server_ca, other_ca, tmp_path, NAME) as url,
        pytest.raises(urllib3.exceptions.MaxRetryError, match="TLSV1_ALERT_UNKNOWN_CA"),
    ):
        _list_nodes(document, url)
