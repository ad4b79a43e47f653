"""`raya status`: each source against a local stand-in (Hetzner's API, authoritative DNS
servers, a Kubernetes API over real TLS requiring the cluster's client CA), the judgement of
each part, and the command's table, JSON and exit status."""

from __future__ import annotations

import datetime
import functools
import ipaddress
import json
import secrets
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import pytest

from raya.cloud import deploy
from raya.cloud.program.backups import BUCKET_ROLES
from raya.model.fleet import Fleet, Pool, build_cluster
from raya.model.pins import snapshot_labels
from raya.nodes import addons
from raya.nodes.identity import generate_example_secrets
from raya.operate import status as st
from tests.cloud import hetzner_api as hetzner_standin
from tests.cloud.program import fakes
from tests.cloud.program.hetzner import Hetzner
from tests.cloud.program.mocks import Run
from tests.cloud.program.test_autoscaler import deployed_config, deployed_env
from tests.cloud.program.test_program import EXAMPLE, PINS
from tests.operate import autoscaler_double
from tests.operate import kube_api as ka
from tests.operate.s3 import ObjectStorage, k3s_upload
from tests.runner import invoke
from tests.support import Reply, Respond, http_server, routes

VERSION = PINS.k3s.version
LABELS = snapshot_labels(PINS, "raya")
NAMES = ("control-plane", "agent-0", "agent-1", "agent-2")
NAME = "cp.raya.example.com"  # the API's name in the kubeconfig, k3s' tls-san


def _healthy_facts(outputs: dict[str, Any]) -> dict[str, Any]:
    servers = outputs["servers"]
    return {
        "servers": {n: st.ServerFacts("running", "cx23", LABELS) for n in servers},
        "records": {n: [servers[n]["ipv4"]] for n in servers},
        "delegation": list(outputs["nameServers"]),
        "nodes": {
            n: st.NodeFacts(
                True,
                VERSION,
                "Fedora CoreOS",
                {"InternalIP": "10.0.1.10"},
                provider_id=f"hcloud://{servers[n]['serverId']}",
            )
            for n in servers
        },
        "drift": {},
    }


def test_a_healthy_cluster(deployed: Run) -> None:
    report = st.assess(deployed.outputs, PINS, "raya", **_healthy_facts(deployed.outputs))
    assert [row.node for row in report.rows] == list(NAMES)
    assert report.healthy
    assert all(list(row.checks) == list(st.COLUMNS) for row in report.rows)


@pytest.mark.parametrize(
    ("change", "node", "column", "state", "text"),
    [
        (
            {"servers": {"agent-1": st.ServerFacts("off", "cx23", LABELS)}},
            "agent-1",
            "server",
            st.UNHEALTHY,
            "off cx23",
        ),
        ({"servers": {"agent-1": None}}, "agent-1", "server", st.UNHEALTHY, "no such server"),
        (
            {"servers": {"agent-1": "Hetzner API unreachable: x"}},
            "agent-1",
            "image",
            st.UNKNOWN,
            "server unknown",
        ),
        (
            {
                "servers": {
                    "agent-1": st.ServerFacts(
                        "running", "cx23", {**LABELS, "k3s_version": "v1-0-0-k3s1"}
                    )
                }
            },
            "agent-1",
            "image",
            st.UNHEALTHY,
            f"(pins: {LABELS['k3s_version']})",
        ),
        (
            {"servers": {"agent-1": st.ServerFacts("running", "cx23", None)}},
            "agent-1",
            "image",
            st.UNHEALTHY,
            "snapshot deleted",
        ),
        (
            {"drift": {"agent-2": ("users", "config")}},
            "agent-2",
            "drift",
            st.UNHEALTHY,
            "users, config differ",
        ),
        (
            {"drift": "preview failed: no credentials"},
            "agent-0",
            "drift",
            st.UNKNOWN,
            "preview failed",
        ),
        (
            {"records": {"agent-0": ["192.0.2.1"]}},
            "agent-0",
            "dns",
            st.UNHEALTHY,
            "-> 192.0.2.1, expected",
        ),
        (
            {"records": {"agent-0": "ns-cloud-a1 (1.2.3.4): timeout"}},
            "agent-0",
            "dns",
            st.UNKNOWN,
            "timeout",
        ),
        (
            {"nodes": "API https://cp:6443 unreachable"},
            "control-plane",
            "kubernetes",
            st.UNKNOWN,
            "unreachable",
        ),
        ({"nodes": {}}, "agent-0", "kubernetes", st.UNHEALTHY, "not registered"),
        (
            {"nodes": {"agent-0": st.NodeFacts(False, VERSION, "FCOS", {})}},
            "agent-0",
            "kubernetes",
            st.UNHEALTHY,
            "NotReady",
        ),
        (
            {"nodes": {"agent-0": st.NodeFacts(True, "v1.0.0+k3s1", "FCOS", {})}},
            "agent-0",
            "kubernetes",
            st.UNHEALTHY,
            f"(pin {VERSION})",
        ),
        (
            {"nodes": {"agent-0": st.NodeFacts(True, VERSION, "FCOS", {}, unschedulable=True)}},
            "agent-0",
            "kubernetes",
            st.UNHEALTHY,
            "(cordoned)",
        ),
        (  # registered into the Node of a server since replaced: the old server's ID
            {"nodes": {"agent-0": st.NodeFacts(True, VERSION, "FCOS", {}, provider_id="hcloud://1")}},
            "agent-0",
            "kubernetes",
            st.UNHEALTHY,
            "provider ID hcloud://1, not its server's hcloud://",
        ),
        (
            {"nodes": {"agent-0": st.NodeFacts(True, VERSION, "FCOS", {})}},
            "agent-0",
            "kubernetes",
            st.UNHEALTHY,
            "provider ID none, not its server's hcloud://",
        ),
    ],
)
def test_each_problem_is_shown_where_it_is_and_makes_the_cluster_unhealthy(
    deployed: Run, change: dict[str, Any], node: str, column: str, state: str, text: str
) -> None:
    facts = _healthy_facts(deployed.outputs)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(facts[key], dict) and value:
            facts[key] = {**facts[key], **value}
        else:
            facts[key] = value
    report = st.assess(deployed.outputs, PINS, "raya", **facts)
    (row,) = [row for row in report.rows if row.node == node]
    assert row.checks[column].state == state
    assert text in row.checks[column].text
    assert not report.healthy


def test_a_wrong_delegation_is_unhealthy(deployed: Run) -> None:
    facts = {**_healthy_facts(deployed.outputs), "delegation": ["ns1.elsewhere.example."]}
    report = st.assess(deployed.outputs, PINS, "raya", **facts)
    assert report.cluster["delegation"].state == st.UNHEALTHY
    assert "parent delegates to ns1.elsewhere.example." in report.cluster["delegation"].text


def listing(*servers: dict[str, Any]) -> Respond:
    """GET /v1/servers as Hetzner answers a list (one page here), whatever the query."""
    body = json.dumps({"servers": list(servers), "meta": {"pagination": {
        "page": 1, "per_page": 50, "previous_page": None, "next_page": None, "last_page": 1,
        "total_entries": len(servers)}}}).encode()  # fmt: skip
    return lambda _: (200, body, "application/json")


def cluster_list(mapping: dict[str, bytes | Respond], listed: Respond) -> Respond:
    """`routes(mapping)`, and the cluster's list of servers (by its label) from `listed`."""
    by_path = routes(mapping)

    def respond(request: BaseHTTPRequestHandler) -> Reply:
        if request.path.startswith(f"/v1/servers?label_selector={LISTED}&"):
            return listed(request)
        return by_path(request)

    return respond


LISTED = "managed_by%3Draya"  # the label selector `managed_by=raya`, as hcloud-python sends it


def test_hetzner_servers_against_a_local_api(deployed: Run) -> None:
    asked: list[str] = []

    def gone(request: BaseHTTPRequestHandler) -> Reply:
        asked.append(request.path)
        missing = {"error": {"code": "not_found", "message": "server not found"}}
        return 404, json.dumps(missing).encode(), "application/json"

    servers: dict[str, bytes | Respond] = {"/v1/servers/3": gone}
    listed = listing(
        fakes.hetzner_server(1, "raya-agent-0", "running", LABELS),
        fakes.hetzner_server(2, "raya-agent-1", "off", None),
    )
    ids = {"agent-0": "1", "agent-1": "2", "agent-2": "3"}
    with http_server(cluster_list(servers, listed)) as url:
        found, groups = st.hetzner_servers("token", f"{url}/v1", ids, "raya")
    assert found == {
        "agent-0": st.ServerFacts("running", "cx23", LABELS),
        "agent-1": st.ServerFacts("off", "cx23", None),
        "agent-2": None,
    }
    assert groups == {}  # no server of the list has a node group's label
    assert asked == ["/v1/servers/3"]  # only the one the list lacks, by its id
    assert st.hetzner_servers("", "http://127.0.0.1:9/v1", ids, "raya") == (
        dict.fromkeys(ids, "HCLOUD_TOKEN not set"), "HCLOUD_TOKEN not set"
    )
    unreachable, no_groups = st.hetzner_servers(
        "token", "http://127.0.0.1:9/v1", {"agent-0": "1"}, "raya"
    )
    assert str(unreachable["agent-0"]).startswith("Hetzner API unreachable")
    assert str(no_groups).startswith("Hetzner API unreachable")


def test_the_servers_of_200_agents_are_five_requests(
    hetzner_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Hetzner stand-in (tests/cloud/hetzner_api.py): 203 servers of this cluster, 50 a
    # page, and another cluster's, which the label leaves out.
    model = Hetzner()
    names = ["control-plane", "control-plane-1", "control-plane-2",
             *(f"agent-{i}" for i in range(200))]  # fmt: skip
    for name in names:
        model.create_server(f"raya-{name}", (), {"managed_by": "raya", "role": "agent"})
    model.create_server("other-agent-0", (), {"managed_by": "other", "role": "agent"})
    monkeypatch.setattr(hetzner_standin, "MODEL", model)
    ids = {name: str(model.server_named(f"raya-{name}").id) for name in names}  # type: ignore[union-attr]
    found, _ = st.hetzner_servers(hetzner_standin.TOKEN, hetzner_api.url, ids, "raya")
    assert {name: getattr(facts, "status", facts) for name, facts in found.items()} == (
        dict.fromkeys(names, "running")
    )
    assert hetzner_standin.BUDGET.requests == ["GET /v1/servers"] * 5  # ceil(203 / 50)


def _ready(*names: str, ready: bool = True) -> dict[str, st.NodeFacts]:
    return {n: st.NodeFacts(ready, VERSION, "Fedora CoreOS", {}) for n in names}


@pytest.mark.parametrize(
    ("servers", "nodes", "state", "text"),
    [
        (["raya-burst-2b", "raya-burst-1a"], _ready("raya-burst-1a", "raya-burst-2b", "x"),
         st.HEALTHY, "2 server(s) (min 1, max 3), 2 registered, 2 Ready"),
        # One booting (not registered yet), one registered but not Ready.
        (["raya-burst-1a", "raya-burst-2b", "raya-burst-3c"],
         {**_ready("raya-burst-1a"), **_ready("raya-burst-2b", ready=False)}, st.UNHEALTHY,
         "3 server(s) (min 1, max 3), 2 registered, 1 Ready; not Ready: raya-burst-2b, "
         "raya-burst-3c"),
        ([], {}, st.UNHEALTHY, "0 server(s) (min 1, max 3), 0 registered, 0 Ready; outside 1..3"),
        ("Hetzner API: unable to authenticate", {}, st.UNKNOWN,
         "Hetzner API: unable to authenticate"),
        (["raya-burst-1a"], "API https://cp:6443 unreachable: timeout", st.UNKNOWN,
         "API https://cp:6443 unreachable: timeout"),
    ],
)  # fmt: skip
def test_an_autoscaled_pools_row(
    servers: list[str] | str, nodes: dict[str, st.NodeFacts] | str, state: str, text: str
) -> None:
    row = st.pool_row("burst", 1, 3, servers, nodes)
    assert (row.pool, row.minimum, row.maximum) == ("burst", 1, 3)
    assert row.check == st.Check(state, text)
    report = st.Report((), {}, (row,))
    assert report.healthy is (state == st.HEALTHY)
    assert report.as_json()["pools"]["burst"]["state"] == state


def test_a_long_list_of_pending_pods_is_counted_past_ten() -> None:
    pods = tuple(f"jobs/batch-{i:02d}" for i in range(12))
    report = st.Report((), {}, (), pods)
    assert report.unschedulable_text() == (
        f"12: {', '.join(pods[:10])} and 2 more"
    )
    assert report.as_json()["unschedulable"]["pods"] == list(pods)  # all of them


@pytest.mark.parametrize(
    ("pending", "servers", "state", "text"),
    [
        (["default/a", "default/b"], 2, st.HEALTHY,
         "2 server(s) (min 1, max 3), 2 registered, 2 Ready, 2 pending pod(s) it could take"),
        # At its max: the autoscaler cannot grow it for them.
        (["default/a"], 3, st.UNHEALTHY,
         "3 server(s) (min 1, max 3), 3 registered, 3 Ready, 1 pending pod(s) it could take; "
         "at its max with pods pending (default/a): raise its max"),
        ([], 3, st.HEALTHY, "3 server(s) (min 1, max 3), 3 registered, 3 Ready"),
        (None, 3, st.HEALTHY, "3 server(s) (min 1, max 3), 3 registered, 3 Ready"),
    ],
)  # fmt: skip
def test_an_autoscaled_pools_pending_pods(
    pending: list[str] | None, servers: int, state: str, text: str
) -> None:
    names = [f"raya-burst-{i}" for i in range(servers)]
    row = st.pool_row("burst", 1, 3, names, _ready(*names), pending)
    assert row.check == st.Check(state, text)
    assert row.as_json()["pending"] == pending


POOL = Pool("burst", "cpx31", 0, ipaddress.IPv4Network("10.0.16.0/24"),
            labels=(("tier", "burst"), ("size", "8")),
            taints=("burst=yes:NoSchedule", "spot:PreferNoSchedule"),
            min_size=0, max_size=4)  # fmt: skip
ARM_POOL = Pool("arm", "cax21", 0, ipaddress.IPv4Network("10.0.17.0/24"), location="fsn1",
                min_size=0, max_size=2)  # fmt: skip
AUTOSCALED = build_cluster(EXAMPLE.config, Fleet(agents=("cx23",), pools=(POOL, ARM_POOL)), "f")


def test_a_new_node_of_a_pool_has_the_labels_the_autoscaler_gives_it() -> None:
    # kubernetes/autoscaler `hetzner_node_group.go`, `buildNodeGroupLabels`, and the
    # kubelet's kubernetes.io/os; the example stack is in nbg1.
    assert st.pool_node(AUTOSCALED, POOL) == (
        {"node.kubernetes.io/instance-type": "cpx31", "topology.kubernetes.io/region": "nbg1",
         "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
         "csi.hetzner.cloud/location": "nbg1", "hcloud/node-group": "raya-burst",
         "tier": "burst", "size": "8"},
        [{"key": "burst", "value": "yes", "effect": "NoSchedule"},
         {"key": "spot", "value": "", "effect": "PreferNoSchedule"}],
    )  # fmt: skip
    labels, taints = st.pool_node(AUTOSCALED, ARM_POOL)
    assert (labels["kubernetes.io/arch"], labels["topology.kubernetes.io/region"]) == (
        "arm64", "fsn1"
    )
    assert labels["hcloud/node-group"] == "raya-arm" and taints == []


TOLERATES_BURST = (st.Toleration("burst", "Exists", "", "NoSchedule"),)


def _term(*requirements: st.Requirement) -> tuple[tuple[st.Requirement, ...], ...]:
    return (requirements,)


@pytest.mark.parametrize(
    ("pod", "admitted"),
    [
        # The NoSchedule taint must be tolerated; PreferNoSchedule is no filter.
        (st.PendingPod("d/p"), False),
        (st.PendingPod("d/p", tolerations=TOLERATES_BURST), True),
        (st.PendingPod("d/p", tolerations=(st.Toleration("burst", "Equal", "no", ""),)), False),
        (st.PendingPod("d/p", tolerations=(st.Toleration("burst", "", "yes", ""),)), True),
        (st.PendingPod("d/p", tolerations=(st.Toleration("", "Exists", "", ""),)), True),
        (st.PendingPod("d/p", tolerations=(st.Toleration("burst", "Exists", "", "NoExecute"),)),
         False),
        # nodeSelector: every entry on the new node's labels.
        (st.PendingPod("d/p", {"kubernetes.io/arch": "amd64", "tier": "burst"},
                       tolerations=TOLERATES_BURST), True),
        (st.PendingPod("d/p", {"kubernetes.io/arch": "arm64"}, tolerations=TOLERATES_BURST),
         False),
        # Required node affinity: any term, each expression of it.
        (st.PendingPod("d/p", terms=_term(st.Requirement(
            "node.kubernetes.io/instance-type", "In", ("cpx31", "cx33"))),
            tolerations=TOLERATES_BURST), True),
        (st.PendingPod("d/p", terms=_term(st.Requirement("tier", "NotIn", ("burst",))),
                       tolerations=TOLERATES_BURST), False),
        (st.PendingPod("d/p", terms=(
            (st.Requirement("gpu", "Exists"),), (st.Requirement("gpu", "DoesNotExist"),)),
            tolerations=TOLERATES_BURST), True),
        (st.PendingPod("d/p", terms=_term(st.Requirement("size", "Gt", ("4",))),
                       tolerations=TOLERATES_BURST), True),
        (st.PendingPod("d/p", terms=_term(st.Requirement("size", "Lt", ("4",))),
                       tolerations=TOLERATES_BURST), False),
        (st.PendingPod("d/p", terms=((),), tolerations=TOLERATES_BURST), False),  # empty term
        # A field names the node, whose name the autoscaler draws: a DaemonSet's pod for
        # another node is never one a new node takes.
        (st.PendingPod("d/p", terms=_term(st.Requirement(
            "metadata.name", "In", ("agent-0",), on_field=True)),
            tolerations=TOLERATES_BURST), False),
    ],
)  # fmt: skip
def test_which_pending_pods_a_pools_labels_and_taints_admit(
    pod: st.PendingPod, admitted: bool
) -> None:
    labels, taints = st.pool_node(AUTOSCALED, POOL)
    assert st.admits(labels, taints, pod) is admitted


def test_the_unschedulable_pods_are_one_list_of_the_pods_without_a_node(
    deployed: Run, tmp_path: Path
) -> None:
    state = ka.Cluster(nodes={"agent-0": ka.node_object("agent-0", VERSION)})
    state.nodes["agent-0"]["spec"]["taints"] = [
        {"key": "dedicated", "value": "db", "effect": "NoSchedule"}
    ]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["burst"]}],
            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["x"]}]}]}}}
    tolerations = [{"key": "burst", "operator": "Exists", "effect": "NoSchedule"},
                   {"key": "dedicated", "value": "db"}]  # fmt: skip
    gate = [{"name": "example.com/quota"}]
    for name, spec in [("db-0", {"tolerations": [{"key": "dedicated", "value": "db"}]}),
                       ("burst-0", {"affinity": affinity, "tolerations": tolerations,
                                    "nodeSelector": {"kubernetes.io/os": "linux"}}),
                       ("plain-0", {}),
                       # Held back by its own gate, not by the nodes: no node would help.
                       ("gated-0", {"schedulingGates": gate})]:  # fmt: skip
        made = ka.pod(name, "jobs", "")
        made["spec"].update(spec)
        made["status"] = {"phase": "Pending"}
        state.pods.append(made)
    state.pods.append(ka.pod("web-0", "default", "agent-0"))  # running: not asked for
    kubeconfig = deployed.outputs["kubeconfig"]
    with ka.deployment_api(state, deployed.resources, tmp_path) as url:
        found = st.kubernetes_unschedulable(kubeconfig, server=url)
    # db-0 tolerates agent-0's taint and runs; the two others cannot go there; gated-0
    # waits for its gate.
    assert found == [
        st.PendingPod(
            "jobs/burst-0",
            {"kubernetes.io/os": "linux"},
            ((st.Requirement("tier", "In", ("burst",)),
              st.Requirement("metadata.name", "NotIn", ("x",), on_field=True)),),
            (st.Toleration("burst", "Exists", "", "NoSchedule"),
             st.Toleration("dedicated", "", "db", "")),
        ),
        st.PendingPod("jobs/plain-0"),
    ]  # fmt: skip
    # One request, filtered by the API server to the pods without a node.
    assert [path for _, _, path in state.log] == [
        f"/api/v1/pods?fieldSelector={quote(st.UNBOUND_PODS, safe='')}"
    ]
    assert st.admits(*st.pool_node(AUTOSCALED, POOL), found[0])
    refused = st.kubernetes_unschedulable(kubeconfig, server="https://127.0.0.1:9")
    assert isinstance(refused, str) and refused.startswith("API https://127.0.0.1:9 unreachable")


def test_the_planned_and_the_autoscaled_servers_are_one_list(
    hetzner_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Hetzner stand-in: the cluster's planned server, two node groups of its autoscaler
    # (made by the autoscaler 1.36.1 from the config raya deployed: the pools' server labels,
    # managed_by the cluster, and the group's), and another cluster's group, which the
    # cluster's label leaves out.
    model = Hetzner()
    model.create_server("raya-agent-0", (), {"managed_by": "raya", "role": "agent"})
    burst = Pool("burst", "cpx31", 0, ipaddress.IPv4Network("10.0.16.0/24"), min_size=0,
                 max_size=4)  # fmt: skip
    web = Pool("web", "cpx31", 0, ipaddress.IPv4Network("10.0.17.0/24"), min_size=0, max_size=4)
    for name, group, cluster in [("raya-burst-1a", "raya-burst", "raya"),
                                 ("raya-web-2b", "raya-web", "raya"),
                                 ("raya-burst-3c", "raya-burst", "raya"),
                                 ("other-burst-4d", "other-burst", "other")]:  # fmt: skip
        pools = (burst, web)
        config, env = deployed_config(cluster, pools), deployed_env(cluster, pools)
        autoscaler_double.create_server(model, config, env, group, name)
    monkeypatch.setattr(hetzner_standin, "MODEL", model)
    agent = str(model.server_named("raya-agent-0").id)  # type: ignore[union-attr]
    found, groups = st.hetzner_servers(
        hetzner_standin.TOKEN, hetzner_api.url, {"agent-0": agent}, "raya"
    )
    assert getattr(found["agent-0"], "status", None) == "running"
    assert groups == {"raya-burst": ["raya-burst-1a", "raya-burst-3c"], "raya-web": ["raya-web-2b"]}
    assert hetzner_standin.BUDGET.requests == ["GET /v1/servers"]  # one list, one page
    refused = st.hetzner_servers("wrong", hetzner_api.url, {"agent-0": agent}, "raya")[1]
    assert isinstance(refused, str) and refused.startswith("Hetzner API: ")


@pytest.fixture
def dns(deployed: Run) -> Iterator[tuple[st.Dns, fakes._Zones]]:
    servers = deployed.outputs["servers"]
    records = {entry["dnsName"]: [entry["ipv4"]] for entry in servers.values()}
    delegations = {"raya.example.com.": list(deployed.outputs["nameServers"])}
    with fakes.dns_server(records, delegations) as (port, zones):
        yield st.Dns(address_of=lambda name: ["127.0.0.1"], port=port), zones


def test_records_are_asked_of_the_zones_servers_without_recursion(
    deployed: Run, dns: tuple[st.Dns, fakes._Zones]
) -> None:
    resolver, zones = dns
    entry = deployed.outputs["servers"]["agent-1"]
    assert resolver.a_records(["ns-cloud-a1.googledomains.com."], entry["dnsName"]) == [
        entry["ipv4"]
    ]
    assert zones.asked == [(entry["dnsName"], "A", False)]
    assert resolver.a_records(["ns."], "nothing.raya.example.com.") == []
    referral = resolver.delegation(["ns.example.com."], "raya.example.com.")
    assert referral == sorted(deployed.outputs["nameServers"])


def test_dns_that_cannot_be_reached_is_a_reason_not_an_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    resolver = st.Dns(address_of=lambda name: ["127.0.0.1"], port=port)
    answer = resolver.a_records(["ns-cloud-a1.googledomains.com."], "cp.raya.example.com.")
    assert isinstance(answer, str) and "ns-cloud-a1.googledomains.com. (127.0.0.1)" in answer

    def unknown_host(name: str) -> list[str]:
        raise socket.gaierror("Name or service not known")

    assert "Name or service not known" in str(
        st.Dns(address_of=unknown_host, port=port).a_records(["ns."], "x.")
    )


def test_kubernetes_nodes_through_the_kubeconfig(deployed: Run, tmp_path: Path) -> None:
    node = ka.node_object("agent-0", VERSION, unschedulable=True, server=4711)
    state = ka.Cluster(nodes={"agent-0": node})
    with ka.deployment_api(state, deployed.resources, tmp_path) as url:
        found = st.kubernetes_nodes(deployed.outputs["kubeconfig"], server=url)
    assert found == {
        "agent-0": st.NodeFacts(
            True,
            VERSION,
            "Fedora CoreOS 43.20261101.3.0",
            {"InternalIP": "10.0.1.20"},
            True,
            "hcloud://4711",
        )
    }
    refused = st.kubernetes_nodes(deployed.outputs["kubeconfig"], server="https://127.0.0.1:9")
    assert isinstance(refused, str) and refused.startswith("API https://127.0.0.1:9 unreachable")


def addons_installed(state: ka.Cluster, failing: str | None = None) -> None:
    """The add-ons as k3s leaves them once installed: each HelmChart's job complete (or
    `failing`'s failed) and what it runs ready, each ClusterIssuer Ready."""
    for chart in addons.CHARTS:
        base = f"/apis/helm.cattle.io/v1/namespaces/{addons.NAMESPACE}/helmcharts/{chart.name}"
        job = f"helm-install-{chart.name}"
        state.objects[base] = {"kind": "HelmChart", "status": {"jobName": job}}
        outcome = (
            {"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}
            if chart.name == failing
            else {"type": "Complete", "status": "True"}
        )
        state.objects[f"/apis/batch/v1/namespaces/{addons.NAMESPACE}/jobs/{job}"] = {
            "kind": "Job",
            "status": {"conditions": [outcome]},
        }
        for workload in chart.workloads:
            path = f"/apis/apps/v1/namespaces/{addons.NAMESPACE}/{workload}"
            state.objects[path] = (
                {"status": {"desiredNumberScheduled": 4, "numberReady": 4}}
                if workload.startswith("daemonsets/")
                else {"spec": {"replicas": 1}, "status": {"readyReplicas": 1}}
            )
    for name in addons.ISSUERS:
        state.objects[f"/apis/cert-manager.io/v1/clusterissuers/{name}"] = {
            "kind": "ClusterIssuer",
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ACME"}]},
        }


def test_addons_through_the_kubeconfig(deployed: Run, tmp_path: Path) -> None:
    state = ka.Cluster()
    kubeconfig = deployed.outputs["kubeconfig"]
    with ka.deployment_api(state, deployed.resources, tmp_path) as url:
        nothing_yet = st.kubernetes_addons(kubeconfig, server=url)
        addons_installed(state, failing="external-dns")
        installed = st.kubernetes_addons(kubeconfig, server=url)
    assert {check.state for check in nothing_yet.values()} == {st.UNHEALTHY}
    assert len(nothing_yet) == len(addons.CHARTS) + len(addons.ISSUERS)
    assert installed["HelmChart cert-manager"] == st.ok("job helm-install-cert-manager complete")
    # Hetzner's cloud controller and CSI driver, with what they run.
    assert installed["HelmChart hcloud-cloud-controller-manager"] == st.ok(
        "job helm-install-hcloud-cloud-controller-manager complete; "
        "deployment hcloud-cloud-controller-manager 1/1 ready"
    )
    assert installed["HelmChart hcloud-csi"] == st.ok(
        "job helm-install-hcloud-csi complete; deployment hcloud-csi-controller 1/1 ready; "
        "daemonset hcloud-csi-node 4/4 ready"
    )
    assert installed["HelmChart external-dns"] == st.bad(
        "job helm-install-external-dns failed: BackoffLimitExceeded"
    )
    assert {installed[f"ClusterIssuer {name}"].state for name in addons.ISSUERS} == {
        st.HEALTHY
    }
    gone = st.kubernetes_addons(kubeconfig, server="https://127.0.0.1:9")
    assert list(gone) == ["add-ons"] and gone["add-ons"].state == st.UNKNOWN



@pytest.mark.parametrize(("days", "state"), [(31, st.HEALTHY), (29, st.UNHEALTHY)])
def test_the_api_certificate_is_unhealthy_in_its_last_30_days(
    deployed: Run, tmp_path: Path, days: int, state: str
) -> None:
    client_ca = deployed.resources["client-ca"].outputs["certPem"]
    server_ca = ka.deployment_authority(deployed.resources, "server-ca")
    valid = datetime.timedelta(days=days)
    with ka.kubernetes_api(ka.Cluster(), server_ca, client_ca, tmp_path, NAME, valid) as url:
        check = st.api_certificate(deployed.outputs["kubeconfig"], server=url)
    expires = datetime.datetime.now(datetime.UTC) + valid
    assert check.state == state
    assert check.text.startswith(f"expires {expires:%Y-%m-%d} (in {days - 1} days)")
    assert ("`raya roll control-plane`" in check.text) is (state == st.UNHEALTHY)


def test_the_api_certificate_is_read_trusting_only_the_clusters_ca(
    deployed: Run, tmp_path: Path
) -> None:
    other = generate_example_secrets(())
    client_ca = deployed.resources["client-ca"].outputs["certPem"]
    with ka.kubernetes_api(ka.Cluster(), other.server_ca, client_ca, tmp_path, NAME) as url:
        check = st.api_certificate(deployed.outputs["kubeconfig"], server=url)
    assert check.state == st.UNKNOWN
    address = url.removeprefix("https://")
    assert check.text == f"API {address} unreachable: CERTIFICATE_VERIFY_FAILED"


def test_the_command_end_to_end(
    deployed: Run,
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    s3: ObjectStorage,
) -> None:
    servers = deployed.outputs["servers"]
    # An autoscaled pool beside the planned nodes: two servers of its node group, registered;
    # the label tier=burst given to the pool since (the two keep the labels they had).
    fleet = project / "deploy" / "fleet" / "agents.json"
    fleet.write_text(json.dumps({**json.loads(fleet.read_text()), "pools": [
        {"name": "burst", "type": "cpx31", "min": 1, "max": 4, "addresses": "10.0.16.0/24",
         "labels": {"tier": "burst"}}
    ]}))  # fmt: skip
    grown = {"raya-burst-5f": 901, "raya-burst-6e": 902}
    # One list holds both: the planned servers and the autoscaler's (labelled managed_by too,
    # as the autoscaler 1.36.1 labels them from the pool's config).
    burst = Pool("burst", "cpx31", 0, ipaddress.IPv4Network("10.0.16.0/24"), min_size=1,
                 max_size=4, labels=(("tier", "burst"),))  # fmt: skip
    grown_labels = autoscaler_double.server_labels(deployed_config("raya", (burst,)), "raya-burst")
    hetzner = listing(
        *(fakes.hetzner_server(int(entry["serverId"]), name, "running", LABELS)
          for name, entry in servers.items()),
        *({**fakes.hetzner_server(number, name, "running", LABELS),
           "labels": grown_labels}
          for name, number in grown.items()),
    )  # fmt: skip
    hetzner_asked: list[str] = []

    def hetzner_api(request: BaseHTTPRequestHandler) -> Reply:
        hetzner_asked.append(request.path)
        return cluster_list({}, hetzner)(request)

    state = ka.Cluster(
        nodes={
            name: ka.node_object(name, VERSION, server=int(entry["serverId"]))
            for name, entry in [*servers.items(),
                                *((n, {"serverId": i}) for n, i in grown.items())]
        }
    )  # fmt: skip
    # Pods the scheduler is given: one any node takes, one for the pool's new label (only a
    # new node of the pool has it), one for an arm64 node (the pool's cpx31 is x86).
    for name, selector in [("web-0", {}), ("tiered-0", {"tier": "burst"}),
                           ("arm-0", {"kubernetes.io/arch": "arm64"})]:  # fmt: skip
        made = ka.pod(name, "default", "")
        made["spec"]["nodeSelector"] = selector
        made["status"] = {"phase": "Pending"}
        state.pods.append(made)
    ka.Etcd.of(state, {"control-plane": servers["control-plane"]["privateIp"]})
    addons_installed(state)
    records = {entry["dnsName"]: [entry["ipv4"]] for entry in servers.values()}
    delegations = {"raya.example.com.": list(deployed.outputs["nameServers"])}
    # The bucket on a local S3 server, with the keys the deployment made; one snapshot an
    # hour old, as k3s uploads it.
    # A bucket of this test's own: the S3 server is shared by the session.
    bucket = f"status-{secrets.token_hex(4)}"
    backups = {**deployed.outputs["backups"], "endpoint": s3.endpoint, "bucket": bucket}
    s3.client().create_bucket(Bucket=backups["bucket"])
    s3.writer(bucket, BUCKET_ROLES.values(), backups["accessKey"], backups["secretKey"])
    an_hour_ago = int(time.time()) - 3600
    snapshot = f"etcd-snapshot-control-plane-{an_hour_ago}"
    join_secret = deployed.resources["join-secret"].outputs["result"]
    k3s_upload(s3.endpoint, backups["bucket"], "raya", snapshot, b"etcd" * 100, join_secret)
    outputs = {**deployed.outputs, "backups": backups}
    monkeypatch.setattr(deploy, "stack_outputs", lambda root, stack: outputs)
    previews: list[tuple[str, Path, str]] = []

    def preview(action: str, root: Path, stack: str, on_output: Any, **_: Any) -> Any:
        previews.append((action, root, stack))
        return SimpleNamespace(drift={"agent-2": ("users",)})

    monkeypatch.setattr(deploy, "run", preview)
    monkeypatch.setattr(st, "system_address_of", lambda name: ["127.0.0.1"])
    monkeypatch.setattr(st, "parent_name_servers", lambda zone: ["ns1.example.com."])
    monkeypatch.setenv("HCLOUD_TOKEN", "token")
    with (
        http_server(hetzner_api) as hcloud_url,
        fakes.dns_server(records, delegations) as (port, _),
        ka.deployment_api(state, deployed.resources, tmp_path) as api_url,
    ):
        monkeypatch.setattr(st, "DNS_PORT", port)
        for source in (
            "kubernetes_nodes",
            "kubernetes_addons",
            "api_certificate",
            "kubernetes_control_planes",
            "kubernetes_unschedulable",
        ):
            patched = functools.partial(getattr(st, source), server=api_url)
            monkeypatch.setattr(st, source, patched)
        arguments = ["status", "--root", str(project), "--hcloud-endpoint", f"{hcloud_url}/v1"]
        table = invoke(arguments, env={"COLUMNS": "250"})
        as_json = invoke([*arguments, "--json"])
        without_drift = invoke([*arguments, "--json", "--no-drift"])
    assert previews == [("preview", project, "prod")] * 2
    # agent-2 drifted: everything else is healthy, and the exit status says it is not.
    assert table.exit_code == 1, table.output
    assert "users differ" in table.output and "not healthy" in table.output
    report = json.loads(as_json.stdout)
    assert as_json.exit_code == 1 and report["healthy"] is False
    unhealthy = {
        (node, column)
        for node, checks in report["nodes"].items()
        for column, check in checks.items()
        if check["state"] != st.HEALTHY
    }
    assert unhealthy == {("agent-2", "drift")}
    assert report["pools"] == {"burst": {
        "min": 1, "max": 4, "servers": ["raya-burst-5f", "raya-burst-6e"],
        "registered": ["raya-burst-5f", "raya-burst-6e"], "pending": ["default/tiered-0"],
        "state": st.HEALTHY,
        "text": "2 server(s) (min 1, max 4), 2 registered, 2 Ready, 1 pending pod(s) it "
                "could take",
    }}  # fmt: skip
    assert report["unschedulable"] == {
        "pods": ["default/arm-0", "default/tiered-0"],
        "text": "2: default/arm-0, default/tiered-0",
    }
    assert "│ burst           │ 1   │ 4   │ 2       │ 2          │ 1            │ 2 server(s)" in (
        table.output
    )
    assert "unschedulable pods: 2: default/arm-0, default/tiered-0" in table.output
    # Each run: one list of the cluster's servers (planned and autoscaled alike), and one of
    # the pods without a node.
    assert [path.split("?")[0] for path in hetzner_asked] == ["/v1/servers"] * 3
    pod_lists = [path for _, method, path in state.log if path.startswith("/api/v1/pods")]
    assert pod_lists == [
        "/api/v1/pods?fieldSelector=spec.nodeName%3D%3D%2Cstatus.phase%21%3DSucceeded"
        "%2Cstatus.phase%21%3DFailed"
    ] * 3
    assert report["cluster"]["delegation"]["state"] == st.HEALTHY
    # The one control plane's newest snapshot, an hour old: within twice the 6 h schedule.
    assert report["cluster"]["backups control-plane"] == {
        "state": st.HEALTHY, "text": f"newest {snapshot}, 60 min old"
    }
    assert "backups control-plane: newest etcd-snapshot-control-plane-" in table.output
    assert report["cluster"]["ClusterIssuer letsencrypt-production"]["state"] == st.HEALTHY
    assert "HelmChart external-dns" in table.output
    assert report["cluster"]["API certificate"]["text"].startswith("expires ")
    assert report["cluster"]["API certificate"]["state"] == st.HEALTHY
    assert report["nodes"]["agent-0"]["kubernetes"]["text"].startswith(f"Ready {VERSION}")
    # One control plane, one etcd member, one API server.
    etcd_member = report["cluster"]["etcd control-plane"]
    assert etcd_member["state"] == st.HEALTHY
    assert etcd_member["text"].startswith("voter, Ready, member control-plane-")
    assert report["cluster"]["API servers"] == {
        "state": st.HEALTHY, "text": f"control-plane ({servers['control-plane']['privateIp']})"
    }
    assert "etcd control-plane: voter, Ready" in table.output
    # Without the preview, drift is not judged, and the rest is healthy.
    skipped = json.loads(without_drift.stdout)
    assert {c["drift"]["state"] for c in skipped["nodes"].values()} == {st.SKIPPED}
    assert without_drift.exit_code == 0 and skipped["healthy"] is True
