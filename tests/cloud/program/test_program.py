"""The Pulumi program under mocks that compute what the providers would: the resource graph,
the secrecy and content of every server's Ignition, stability across runs, the look-ups."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import ipaddress
import re
from typing import Any

import pulumi
import pytest
import yaml

from raya.cloud.program import define
from raya.cloud.program.secrets import account_id
from raya.errors import DeployError, RenderError
from raya.model.config import zone_resource_name
from raya.model.fleet import Cluster, build_cluster
from raya.model.pins import load_chart_pins, load_pins, snapshot_labels
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.render import part_digests, render_node
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import (
    PROJECT,
    ProviderMocks,
    Run,
    Snapshot,
    Zone,
    is_secret,
    reveal,
    run_program,
)
from tests.support import REPO

PINS = load_pins(REPO)
CHARTS = load_chart_pins(REPO)
RENDER = functools.partial(render_node, charts=CHARTS)
EXAMPLE = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
LABELS = snapshot_labels(PINS, EXAMPLE.config.cluster_name)
SERVER = "hcloud:index/server:Server"
RECORD = "gcp:dns/recordSet:RecordSet"
ZONE_MEMBER = "gcp:dns/dnsManagedZoneIamMember:DnsManagedZoneIamMember"
CP_CONFIG = "/etc/rancher/k3s/config.yaml"
SERVER_CA = "/var/lib/raya/k3s-server-seed/tls/server-ca.crt"  # copied onto the volume
HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"
# raya:clusterHcloudToken as the stack would hold it (64 characters, like Hetzner's).
CLUSTER_TOKEN = "hcloudTestToken0" * 4


def provider_mocks(zones: list[Zone] | None = None) -> ProviderMocks:
    return ProviderMocks(
        zones=[Zone("example-com", "example.com."), Zone("other", "other.org.")]
        if zones is None
        else zones,
        snapshots=[
            Snapshot(41, LABELS, created="2026-10-01T00:00:00+00:00"),
            Snapshot(42, LABELS, created="2026-11-01T00:00:00+00:00"),
            Snapshot(40, LABELS, created="2026-09-01T00:00:00+00:00"),
            # Newer, but still being written by a build.
            Snapshot(45, LABELS, created="2026-11-04T00:00:00+00:00", status="creating"),
            # Newer, but ARM: the x86 servers cannot boot it.
            Snapshot(43, LABELS, architecture="arm", created="2026-11-02T00:00:00+00:00"),
            Snapshot(
                44, {**LABELS, "k3s_version": "v1-0-0-k3s1"}, created="2026-11-03T00:00:00+00:00"
            ),
        ],
    )


def run(mocks: ProviderMocks, cluster: Cluster = EXAMPLE, **kwargs: Any) -> Run:
    kwargs.setdefault("render", RENDER)
    kwargs.setdefault("hcloud_token", CLUSTER_TOKEN)
    kwargs.setdefault("autoscaler_chart", CHARTS.cluster_autoscaler)  # as `main` passes it
    return run_program(mocks, lambda: define(cluster, PINS, **kwargs))


def with_agents(cluster: Cluster, agents: tuple[str, ...]) -> Cluster:
    return build_cluster(cluster.config, agents, "test fleet")


def user_data(result: Run) -> dict[str, str]:
    return {name: reveal(r.inputs["userData"]) for name, r in result.of_type(SERVER).items()}


def test_the_whole_graph_for_the_example_fleet() -> None:
    result = run(provider_mocks())
    types = sorted((r.typ, name) for name, r in result.resources.items())
    assert types == sorted(
        [
            ("hcloud:index/network:Network", "network"),
            ("hcloud:index/networkSubnet:NetworkSubnet", "nodes"),
            ("hcloud:index/networkSubnet:NetworkSubnet", "load-balancers"),
            ("random:index/randomPassword:RandomPassword", "join-secret"),
            ("random:index/randomPassword:RandomPassword", "agent-secret"),
            ("hcloud:index/firewall:Firewall", "firewall"),
            ("tls:index/privateKey:PrivateKey", "server-ca-key"),
            ("tls:index/privateKey:PrivateKey", "client-ca-key"),
            ("tls:index/selfSignedCert:SelfSignedCert", "server-ca"),
            ("tls:index/selfSignedCert:SelfSignedCert", "client-ca"),
            ("tls:index/privateKey:PrivateKey", "admin-key"),
            ("tls:index/certRequest:CertRequest", "admin-request"),
            ("tls:index/locallySignedCert:LocallySignedCert", "admin-cert"),
            *[
                ("tls:index/privateKey:PrivateKey", f"{name}-host-key")
                for name in ("control-plane", "agent-0", "agent-1", "agent-2")
            ],
            ("gcp:dns/managedZone:ManagedZone", "primary"),
            (RECORD, "delegation"),
            *[(RECORD, label) for label in ("cp", "a0", "a1", "a2")],
            *[(SERVER, name) for name in ("control-plane", "agent-0", "agent-1", "agent-2")],
            ("hcloud:index/volume:Volume", "control-plane-state"),
            # One control plane has no group: a group of one spreads nothing.
            ("hcloud:index/placementGroup:PlacementGroup", "agents"),
            ("hcloud:index/volumeAttachment:VolumeAttachment", "control-plane-volume"),
            ("gcp:serviceaccount/account:Account", "external-dns"),
            ("gcp:serviceaccount/account:Account", "cert-manager"),
            ("gcp:serviceaccount/key:Key", "external-dns-key"),
            ("gcp:serviceaccount/key:Key", "cert-manager-key"),
            # Their rights: tests/cloud/program/test_dns_access.py.
            ("random:index/randomId:RandomId", "dns-roles"),
            ("gcp:projects/iAMCustomRole:IAMCustomRole", "dns-records"),
            ("gcp:projects/iAMCustomRole:IAMCustomRole", "dns-zone-list"),
            (ZONE_MEMBER, "external-dns-dns-records"),
            (ZONE_MEMBER, "cert-manager-dns-records"),
            ("gcp:projects/iAMMember:IAMMember", "external-dns-dns-zone-list"),
            ("gcp:storage/bucket:Bucket", "backups"),
            ("gcp:serviceaccount/account:Account", "backups-writer"),
            ("gcp:storage/bucketIAMMember:BucketIAMMember", "backups-writer-bucket"),
            ("gcp:storage/bucketIAMMember:BucketIAMMember", "backups-writer-objects"),
            ("gcp:storage/hmacKey:HmacKey", "backups-writer-hmac"),
        ]
    )
    inputs = {name: reveal(r.inputs) for name, r in result.resources.items()}
    network = result.resources["network"]
    assert inputs["network"] == {
        "name": "raya",
        "ipRange": "10.0.0.0/16",
        "labels": {"managed_by": "raya"},
    }
    assert inputs["nodes"] == {
        "networkId": int(network.id),
        "type": "cloud",
        "networkZone": "eu-central",
        "ipRange": "10.0.1.0/24",
    }
    # The cloud controller's balancers: the next /24, beside the nodes'.
    assert inputs["load-balancers"] == {
        "networkId": int(network.id),
        "type": "cloud",
        "networkZone": "eu-central",
        "ipRange": "10.0.2.0/24",
    }

    # The image: the newest x86 snapshot carrying exactly the pins' labels.
    (lookup,) = [
        args for token, args in result.calls if token == "hcloud:index/getImages:getImages"
    ]
    assert lookup["withArchitectures"] == ["x86"] and lookup["withStatuses"] == ["available"]
    assert dict(pair.split("=") for pair in lookup["withSelector"].split(",")) == LABELS

    expected_servers = {
        "control-plane": ("cx33", "10.0.1.10", "control-plane"),
        "agent-0": ("cx23", "10.0.1.20", "agent"),
        "agent-1": ("cx23", "10.0.1.21", "agent"),
        "agent-2": ("cx33", "10.0.1.22", "agent"),
    }
    for name, (server_type, ip, role) in expected_servers.items():
        server = inputs[name]
        assert server["name"] == f"raya-{name}"  # hostnames stay {name}: see tests/nodes
        assert server["image"] == "42"
        assert server["serverType"] == server_type
        assert server["location"] == "nbg1"
        digests = part_digests(server["userData"].encode())
        assert server["labels"] == {
            "managed_by": "raya",
            "role": role,
            "raya-users": digests["users"],
            "raya-config": digests["config"],
        }
        assert server["networks"] == [{"networkId": int(network.id), "ip": ip, "aliasIps": []}]
        assert server["publicNets"] == [{"ipv4Enabled": True, "ipv6Enabled": True}]
        assert server["userData"].startswith("{")

    for secret in ("join-secret", "agent-secret"):
        assert inputs[secret]["special"] is False and inputs[secret]["length"] >= 32
    for ca in ("server-ca", "client-ca"):
        assert inputs[f"{ca}-key"] == {"algorithm": "ECDSA", "ecdsaCurve": "P256"}
        cert = inputs[ca]
        assert cert["privateKeyPem"] == result.resources[f"{ca}-key"].outputs["privateKeyPem"]
        assert cert["isCaCertificate"] is True
        assert sorted(cert["allowedUses"]) == ["cert_signing", "crl_signing", "digital_signature"]
        assert cert["validityPeriodHours"] == 87600
        assert cert["subject"] == {"commonName": f"raya-{ca}"}

    zone = result.resources["primary"]
    assert inputs["primary"]["dnsName"] == "raya.example.com."
    assert inputs["primary"]["name"] == "raya-example-com"
    assert inputs["primary"]["forceDestroy"] is True
    assert inputs["delegation"] == {
        "managedZone": "example-com",
        "name": "raya.example.com.",
        "type": "NS",
        "ttl": 300,
        "rrdatas": zone.outputs["nameServers"],
    }
    for label, server in (("cp", "control-plane"), *((f"a{i}", f"agent-{i}") for i in range(3))):
        assert inputs[label] == {
            "managedZone": "raya-example-com",
            "name": f"{label}.raya.example.com.",
            "type": "A",
            "ttl": 300,
            "rrdatas": [result.resources[server].outputs["ipv4Address"]],
        }

    for purpose in ("external-dns", "cert-manager"):
        account = result.resources[purpose]
        assert inputs[purpose]["accountId"] == f"raya-{purpose}"
        assert inputs[f"{purpose}-key"]["serviceAccountId"] == account.outputs["name"]

    volume = inputs["control-plane-state"]
    assert volume == {
        "name": "raya-control-plane-state",
        "size": 10,
        "location": "nbg1",
        "labels": {"managed_by": "raya", "role": "control-plane-state"},
    }
    attachment = result.of_type("hcloud:index/volumeAttachment:VolumeAttachment")
    assert reveal(attachment["control-plane-volume"].inputs) == {
        "serverId": int(result.resources["control-plane"].id),
        "volumeId": int(result.resources["control-plane-state"].id),
        "automount": False,
    }
    assert result.outputs["drift"] == {}
    assert result.outputs["zone"] == "raya.example.com."
    assert result.outputs["nameServers"] == zone.outputs["nameServers"]
    assert result.outputs["servers"]["agent-1"] == {
        "serverId": result.resources["agent-1"].id,
        "dnsName": "a1.raya.example.com.",
        "privateIp": "10.0.1.21",
        "nodeIp": "10.0.1.21",
        "ipv4": result.resources["agent-1"].outputs["ipv4Address"],
        "ipv6": result.resources["agent-1"].outputs["ipv6Address"],
        "hostKey": result.resources["agent-1-host-key"].outputs["publicKeyOpenssh"],
    }
    assert sorted(result.outputs["servers"]) == sorted(expected_servers)
    for name in expected_servers:
        assert inputs[f"{name}-host-key"] == {"algorithm": "ED25519"}


def test_the_firewall_opens_only_the_documented_ports_to_the_cluster_servers() -> None:
    mocks = provider_mocks()
    result = run(mocks)
    firewall = reveal(result.resources["firewall"].inputs)
    anywhere = ["0.0.0.0/0", "::/0"]
    assert firewall["name"] == "raya" and firewall["labels"] == {"managed_by": "raya"}
    # By label: every server of the cluster, and every one added later.
    assert firewall["applyTos"] == [{"labelSelector": "managed_by=raya"}]
    for name, server in result.of_type(SERVER).items():
        assert reveal(server.inputs)["labels"]["managed_by"] == "raya"
        # Created after the firewall: covered from its first boot.
        assert any(urn.endswith("::firewall") for urn in mocks.dependencies[name]), name
    rules = {(rule["protocol"], rule.get("port")): rule for rule in firewall["rules"]}
    assert sorted(rules) == [("icmp", None), ("tcp", "22"), ("tcp", "443"), ("tcp", "6443"),
                             ("tcp", "80")]  # fmt: skip
    assert all(rule["direction"] == "in" for rule in rules.values())
    assert all(rule["sourceIps"] == anywhere for rule in rules.values())  # the defaults


def test_the_firewall_takes_its_sources_from_the_stack() -> None:
    config = dataclasses.replace(
        EXAMPLE.config,
        ssh_sources=(ipaddress.ip_network("203.0.113.0/24"), ipaddress.ip_network("2001:db8::/32")),
        api_sources=(),
    )
    result = run(provider_mocks(), dataclasses.replace(EXAMPLE, config=config))
    rules = reveal(result.resources["firewall"].inputs)["rules"]
    ports = {rule.get("port"): rule["sourceIps"] for rule in rules}
    assert ports["22"] == ["203.0.113.0/24", "2001:db8::/32"]
    assert "6443" not in ports  # an empty list closes the port
    assert ports["80"] == ports["443"] == ports[None] == ["0.0.0.0/0", "::/0"]


def test_user_data_is_secret_and_built_from_the_same_pki() -> None:
    result = run(provider_mocks())
    servers = result.of_type(SERVER)
    assert all(is_secret(server.inputs["userData"]) for server in servers.values())
    files = {name: ignition_files(text) for name, text in user_data(result).items()}

    control_plane = files.pop("control-plane")
    ca = control_plane[SERVER_CA]
    assert ca.decode() == result.resources["server-ca"].outputs["certPem"]
    config = yaml.safe_load(control_plane[CP_CONFIG])
    secret = result.resources["join-secret"].outputs["result"]
    agent_secret = result.resources["agent-secret"].outputs["result"]
    assert (config["token"], config["agent-token"]) == (secret, agent_secret)
    assert secret != agent_secret
    assert len(files) == 3
    for name, agent in files.items():
        token = yaml.safe_load(agent[CP_CONFIG])["token"]
        assert token == f"K10{hashlib.sha256(ca).hexdigest()}::node:{agent_secret}", name
        # Its own host key is the one private key an agent holds.
        host_key = agent.pop(HOST_KEY)
        assert host_key.decode() == result.resources[f"{name}-host-key"].outputs[
            "privateKeyOpenssh"
        ]
        everything = b"".join(agent.values())
        assert b"PRIVATE KEY" not in everything and b"service_account" not in everything
        assert secret.encode() not in everything


def test_the_add_ons_use_the_project_of_the_service_accounts_and_the_zone() -> None:
    result = run(provider_mocks())
    control_plane = ignition_files(user_data(result)["control-plane"])
    manifests = "/var/lib/raya/k3s-server-seed/manifests"  # copied onto the volume at boot
    zone = EXAMPLE.config.zone_dns_name.rstrip(".")
    charts = {
        doc["metadata"]["name"]: doc
        for doc in yaml.safe_load_all(control_plane[f"{manifests}/raya-helm-charts.yaml"])
    }
    values = yaml.safe_load(charts["external-dns"]["spec"]["valuesContent"])
    # The project the mocks create the service accounts (and every GCP resource) in.
    assert f"--google-project={PROJECT}" in values["extraArgs"]
    assert values["domainFilters"] == [zone]
    for issuer in yaml.safe_load_all(control_plane[f"{manifests}/raya-cluster-issuers.yaml"]):
        (solver,) = issuer["spec"]["acme"]["solvers"]
        assert solver["dns01"]["cloudDNS"]["project"] == PROJECT
        assert solver["selector"]["dnsZones"] == [zone]
    for name in ("external-dns", "cert-manager"):
        email = result.resources[name].outputs["email"]
        assert email.endswith(f"@{PROJECT}.iam.gserviceaccount.com")
    # The cloud controller's Secret: the stack's token, and the network the program creates.
    (secret,) = yaml.safe_load_all(control_plane[f"{manifests}/raya-hcloud-credentials.yaml"])
    network = reveal(result.resources["network"].inputs)["name"]
    assert secret["stringData"] == {"token": CLUSTER_TOKEN, "network": network}


def test_the_engine_is_told_which_outputs_are_secret() -> None:
    result = run(provider_mocks())
    expected = {
        SERVER: "userData",
        "random:index/randomPassword:RandomPassword": "result",
        "tls:index/privateKey:PrivateKey": "privateKeyPem",
        "gcp:serviceaccount/key:Key": "privateKey",
    }
    for resource in result.resources.values():
        if resource.typ in expected:
            assert expected[resource.typ] in resource.secret_outputs, resource.name
    # 4 servers, 2 join secrets, 2 CA keys + the admin's + 4 host keys, 2 service account keys
    assert sum(r.typ in expected for r in result.resources.values()) == 4 + 2 + 7 + 2


def test_same_state_gives_identical_user_data_and_fresh_state_does_not() -> None:
    mocks = provider_mocks()
    first, second = run(mocks), run(mocks)
    assert user_data(first) == user_data(second)
    assert first.outputs == second.outputs
    fresh = user_data(run(provider_mocks()))
    # The PKI and secret are generated anew without state, so every config differs.
    assert all(fresh[name] != text for name, text in user_data(first).items())


def test_adding_an_agent_adds_its_resources_and_changes_no_other_config() -> None:
    mocks = provider_mocks()
    before = run(mocks)
    after = run(mocks, with_agents(EXAMPLE, ("cx23", "cx23", "cx33", "cx43")))
    assert sorted(set(after.resources) - set(before.resources)) == [
        "a3",
        "agent-3",
        "agent-3-host-key",
    ]
    assert set(before.resources) <= set(after.resources)
    old, new = user_data(before), user_data(after)
    assert {name: new[name] for name in old} == old
    assert reveal(after.resources["agent-3"].inputs)["networks"][0]["ip"] == "10.0.1.23"
    for name, resource in before.resources.items():
        assert after.resources[name].outputs == resource.outputs, name


def test_changing_an_agents_server_type_changes_nothing_else() -> None:
    """docs/deploy.md: only that server's `serverType` changes, which the hcloud provider
    applies in place (it replaces a server for image, location, user_data, SSH keys)."""
    mocks = provider_mocks()
    before = run(mocks)
    after = run(mocks, with_agents(EXAMPLE, ("cx23", "cx33", "cx33")))
    assert set(after.resources) == set(before.resources)
    assert user_data(after) == user_data(before)
    for name, server in before.of_type(SERVER).items():
        old, new = reveal(server.inputs), reveal(after.resources[name].inputs)
        changed = {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}
        assert changed == ({"serverType"} if name == "agent-1" else set()), name
    assert reveal(after.resources["agent-1"].inputs)["serverType"] == "cx33"


def test_removing_an_agent_from_the_middle_removes_the_last_one() -> None:
    """An agent is its position: dropping entry 1 of three deletes agent-2 (its server, host
    key and record) and gives agent-1 the next entry's server type; agent-1 keeps its name, address
    and Ignition."""
    mocks = provider_mocks()
    before = run(mocks)
    after = run(mocks, with_agents(EXAMPLE, ("cx23", "cx33")))
    assert sorted(set(before.resources) - set(after.resources)) == [
        "a2",
        "agent-2",
        "agent-2-host-key",
    ]
    assert set(after.resources) <= set(before.resources)
    old, new = user_data(before), user_data(after)
    assert new == {name: old[name] for name in new}
    one_before = reveal(before.resources["agent-1"].inputs)
    one_after = reveal(after.resources["agent-1"].inputs)
    assert (one_before["serverType"], one_after["serverType"]) == ("cx23", "cx33")
    assert one_after["networks"] == one_before["networks"]


def test_parent_zone_found_once_among_others() -> None:
    result = run(provider_mocks([Zone("other", "other.org."), Zone("parent", "example.com.")]))
    assert reveal(result.resources["delegation"].inputs)["managedZone"] == "parent"


@pytest.mark.parametrize(
    ("zones", "found"),
    [
        ([Zone("other", "other.org."), Zone("sub", "raya.example.com.")], "found none"),
        (
            [Zone("b-zone", "example.com."), Zone("a-zone", "example.com.")],
            "found 2 (a-zone, b-zone)",
        ),
    ],
)
def test_parent_zone_missing_or_ambiguous(zones: list[Zone], found: str) -> None:
    mocks = provider_mocks(zones)
    with pytest.raises(DeployError, match=re.escape(found)) as error:
        run(mocks)
    assert "raya:parentZone example.com." in str(error.value)
    assert mocks.resources == {}  # failed before declaring anything


def test_missing_snapshot_says_to_build_the_image() -> None:
    mocks = provider_mocks()
    # Only an ARM snapshot, one of other pins, one still being created: none can serve.
    mocks.snapshots = [s for s in mocks.snapshots if s.id in (43, 44, 45)]
    with pytest.raises(DeployError, match=r"run `raya image build`") as error:
        run(mocks)
    assert "x86" in str(error.value) and "fcos_version=" in str(error.value)
    assert mocks.resources == {}


def test_render_failure_names_the_node() -> None:
    def render(cluster: Any, node: Any, secrets: Any, *, volume_id: Any = None) -> Any:
        if node.name == "agent-1":
            raise RenderError("user_data is 40000 bytes, over 32768")
        return render_node(cluster, node, secrets, charts=CHARTS, volume_id=volume_id)

    with pytest.raises(pulumi.RunError, match=r"agent-1: .*40000 bytes"):
        run(provider_mocks(), render=render)


def test_agents_never_see_control_plane_keys() -> None:
    seen: dict[str, Any] = {}

    def render(cluster: Any, node: Any, secrets: Any, *, volume_id: Any = None) -> Any:
        seen[node.name] = secrets
        return render_node(cluster, node, secrets, charts=CHARTS, volume_id=volume_id)

    result = run(provider_mocks(), render=render)
    cp = seen.pop("control-plane")
    assert "PRIVATE KEY" in cp.server_ca.key_pem and "PRIVATE KEY" in cp.client_ca.key_pem
    assert '"service_account"' in cp.external_dns_key and '"service_account"' in cp.cert_manager_key
    assert cp.external_dns_key != cp.cert_manager_key
    assert cp.client_ca.cert_pem == result.resources["client-ca"].outputs["certPem"]
    assert list(cp.host_keys) == ["control-plane"]
    for name, agent in seen.items():
        assert list(agent.host_keys) == [name]  # its own, never another node's
        assert agent.join_secret == "" and agent.agent_secret == cp.agent_secret
        assert agent.server_ca.cert_pem == cp.server_ca.cert_pem
        assert agent.server_ca.key_pem == agent.external_dns_key == agent.cert_manager_key == ""
        assert agent.client_ca == type(cp.client_ca)(cert_pem="", key_pem="")


@pytest.mark.parametrize("cluster_name", ["ab", "raya", "a" * 32, "very-long-cluster-name-2026-x"])
def test_service_account_ids_fit_gcp_rules(cluster_name: str) -> None:
    ids = {account_id(cluster_name, purpose) for purpose in ("external-dns", "cert-manager")}
    assert len(ids) == 2
    for value in ids:
        assert re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", value), value
    assert account_id(cluster_name + "b", "cert-manager") not in ids


@pytest.mark.parametrize(
    ("dns_name", "expected"),
    [
        ("raya.example.com.", "raya-example-com"),
        ("1k8s.example.com.", "z-1k8s-example-com"),
        ("a" * 40 + "." + "b" * 40 + ".example.com.", None),
    ],
)
def test_zone_names_fit_cloud_dns_rules(dns_name: str, expected: str | None) -> None:
    name = zone_resource_name(dns_name)
    assert re.fullmatch(r"[a-z][a-z0-9-]{0,61}[a-z0-9]", name), name
    if expected is not None:
        assert name == expected
    else:
        # Long names that only differ past the cut still get different zone names.
        other = zone_resource_name(dns_name.replace(".com.", ".org."))
        assert name.startswith("a" * 40) and other.startswith("a" * 40) and name != other
