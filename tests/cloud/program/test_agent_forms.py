"""What docs/nodes.md, docs/fleet.md and docs/security.md state of an agent, proved for every
form the fleet file declares agents in: an agent of the list, and pool agents with labels,
with labels and taints, and with neither. One parametrized fixture runs the program per form;
each property is one test, run for every form.

The properties: an agent's config is built from the agent secret alone (never the server
token, the cluster's Hetzner token, the backups' HMAC keys, a service account key or a CA
key); its k3s labels and taints are the ones declared, and none when none are; its node
password is HMAC-SHA256 of `raya node password <name>` keyed by the agent secret; its DNS
record names its public address; its private address is its form's; its token joins a
k3s-like server as an agent and never as a server.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from raya.model.fleet import Fleet, Pool, build_cluster
from raya.nodes.identity import CertificateAuthority
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import Run, reveal
from tests.cloud.program.test_program import CLUSTER_TOKEN, EXAMPLE, provider_mocks, run
from tests.nodes.k3s_join import (
    AGENT_PATHS,
    SERVER_PATHS,
    JoinRefused,
    join,
    k3s_like_server,
    serving_certificate,
)

CONFIG = "/etc/rancher/k3s/config.yaml"
PASSWORD = "/etc/rancher/node/password"
HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"


@dataclass(frozen=True)
class Form:
    """One way of declaring an agent, and what docs/config.md and docs/fleet.md say it is."""

    fleet: Fleet
    node: str  # the agent under test
    record: str  # its DNS record's resource name
    dns_name: str
    address: str
    labels: list[str]  # k3s node-label entries, as declared
    taints: list[str]


def block(name: str, **more: Any) -> Pool:
    return Pool(name, "cx23", 2, ipaddress.IPv4Network("10.0.1.96/28"), **more)


FORMS = {
    "list": Form(Fleet(agents=("cx23", "cx23")), "agent-1", "a1",
                 "a1.raya.example.com.", "10.0.1.21", [], []),
    "pool": Form(Fleet(agents=(), pools=(block("bare"),)), "bare-1", "bare-1-record",
                 "bare-1.raya.example.com.", "10.0.1.97", [], []),
    "pool-labels": Form(Fleet(agents=(), pools=(block("web", labels=(("tier", "web"),)),)),
                        "web-1", "web-1-record", "web-1.raya.example.com.", "10.0.1.97",
                        ["tier=web"], []),
    # Beside an untainted list agent, which takes the add-ons' install jobs (raya refuses a
    # fleet whose every node is tainted: docs/fleet.md).
    "pool-labels-taints": Form(
        Fleet(agents=("cx23",), pools=(block("gpu", labels=(("gpu", "a100"), ("tier", "ml")),
                                             taints=("gpu=yes:NoSchedule", "spot:NoExecute")),)),
        "gpu-1", "gpu-1-record", "gpu-1.raya.example.com.", "10.0.1.97",
        ["gpu=a100", "tier=ml"], ["gpu=yes:NoSchedule", "spot:NoExecute"]),
}  # fmt: skip


@dataclass(frozen=True)
class Deployed:
    form: Form
    result: Run
    built_from: frozenset[str]  # the resources its server's inputs depend on, by name
    user_data: str  # the agent's, as Hetzner receives it
    files: dict[str, bytes]  # the agent's Ignition files

    def output(self, resource: str, key: str) -> str:
        value: str = self.result.resources[resource].outputs[key]
        return value

    @property
    def config(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(self.files[CONFIG])
        return loaded


@pytest.fixture(scope="module", params=FORMS, ids=list(FORMS))
def deployed(request: pytest.FixtureRequest) -> Deployed:
    form = FORMS[request.param]
    cluster = build_cluster(EXAMPLE.config, form.fleet, "test fleet")
    mocks = provider_mocks()
    result = run(mocks, cluster)
    user_data = reveal(result.resources[form.node].inputs["userData"])
    built_from = frozenset(urn.rsplit("::", 1)[1] for urn in mocks.dependencies[form.node])
    return Deployed(form, result, built_from, user_data, ignition_files(user_data))


def carried(deployed: Deployed, secret: str) -> bool:
    """Whether the agent's config holds `secret`, as is or base64-encoded, in any file."""
    forms = {secret.encode(), base64.b64encode(secret.encode())}
    everything = [deployed.user_data.encode(), *deployed.files.values()]
    return any(form in data for form in forms for data in everything)


def test_an_agents_config_is_built_from_the_agent_secret_alone(deployed: Deployed) -> None:
    agent_secret = deployed.output("agent-secret", "result")
    ca = deployed.output("server-ca", "certPem").encode()
    assert deployed.config["token"] == (
        f"K10{hashlib.sha256(ca).hexdigest()}::node:{agent_secret}"
    )
    never = {
        "the server token": deployed.output("join-secret", "result"),
        "the cluster's Hetzner token": CLUSTER_TOKEN,
        "the backups' HMAC secret": deployed.output("backups-writer-hmac", "secret"),
        "the backups' HMAC access id": deployed.output("backups-writer-hmac", "accessId"),
        "external-dns' service account key": deployed.output("external-dns-key", "privateKey"),
        "cert-manager's service account key": deployed.output("cert-manager-key", "privateKey"),
        "the server CA key": deployed.output("server-ca-key", "privateKeyPem"),
        "the client CA key": deployed.output("client-ca-key", "privateKeyPem"),
        "the admin key": deployed.output("admin-key", "privateKeyPem"),
        "the control plane's host key": deployed.output(
            "control-plane-host-key", "privateKeyOpenssh"
        ),
    }
    held = [what for what, secret in never.items() if carried(deployed, secret)]
    assert held == []
    # Nor is any of them an input its config is made from: of the secrets, the agent secret,
    # the server CA's certificate and its own host key alone.
    node = deployed.form.node
    secrets = {name for name in deployed.built_from if name not in
               ("firewall", "network", "nodes", "load-balancers", "agents",
                f"pool-{node.rsplit('-', 1)[0]}")}
    assert secrets == {"agent-secret", "server-ca", f"{node}-host-key"}
    # The one private key it holds is its own host key.
    own = deployed.output(f"{deployed.form.node}-host-key", "privateKeyOpenssh")
    assert deployed.files[HOST_KEY].decode() == own
    keys = [path for path, data in deployed.files.items() if b"PRIVATE KEY" in data]
    assert keys == [HOST_KEY]


def test_an_agent_registers_with_its_labels_and_taints_and_no_others(
    deployed: Deployed,
) -> None:
    assert deployed.config.get("node-label", []) == deployed.form.labels
    assert deployed.config.get("node-taint", []) == deployed.form.taints


def test_an_agents_node_password_is_derived_from_the_agent_secret_and_its_name(
    deployed: Deployed,
) -> None:
    agent_secret = deployed.output("agent-secret", "result")
    message = f"raya node password {deployed.form.node}".encode()
    expected = hmac.new(agent_secret.encode(), message, hashlib.sha256).hexdigest()
    assert deployed.files[PASSWORD].decode().strip() == expected
    assert deployed.config["node-name"] == deployed.form.node


def test_an_agents_record_names_its_public_address(deployed: Deployed) -> None:
    record = reveal(deployed.result.resources[deployed.form.record].inputs)
    server = deployed.result.resources[deployed.form.node]
    assert (record["name"], record["type"]) == (deployed.form.dns_name, "A")
    assert record["rrdatas"] == [server.outputs["ipv4Address"]]


def test_an_agent_takes_its_forms_address(deployed: Deployed) -> None:
    server = reveal(deployed.result.resources[deployed.form.node].inputs)
    assert [network["ip"] for network in server["networks"]] == [deployed.form.address]
    assert deployed.config["node-ip"] == deployed.form.address
    assert deployed.config["server"] == "https://10.0.1.10:6443"


def test_an_agents_token_joins_as_an_agent_and_never_as_a_server(
    deployed: Deployed, tmp_path: Path
) -> None:
    """Against a k3s-like server (tests/nodes/k3s_join.py) holding the deployment's CA and
    secrets: the agent's rendered token reaches the agent endpoints, and no server-only one."""
    ca = CertificateAuthority(
        cert_pem=deployed.output("server-ca", "certPem"),
        key_pem=deployed.output("server-ca-key", "privateKeyPem"),
    )
    server = k3s_like_server(
        serving_certificate(ca, tmp_path), ca.cert_pem.encode(),
        deployed.output("join-secret", "result"), deployed.output("agent-secret", "result"),
    )  # fmt: skip
    token = deployed.config["token"]
    with server as url:
        for path in AGENT_PATHS:
            assert join(url, token, path) == f"welcome to {path}".encode()
        for path in SERVER_PATHS:
            with pytest.raises(JoinRefused, match="Forbidden"):
                join(url, token, path)
