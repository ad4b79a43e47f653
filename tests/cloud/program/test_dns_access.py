"""What the cluster's DNS keys open: each account changes records in the cluster's zone alone,
external-dns alone lists the project's zones, nothing else; and both add-ons' calls, replayed
in their order against Cloud DNS' IAM rules (tests/cloud/program/clouddns.py), succeed with
those rights and no fewer, while the parent zone stays out of reach."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import yaml

from raya.cloud.program import dns as program_dns
from raya.nodes.addons import CHARTS_MANIFEST, ISSUERS_MANIFEST
from tests.cloud.program.clouddns import (
    CloudDns,
    DnsError,
    RecordSet,
    Zone,
    cert_manager_clean_up,
    cert_manager_present,
    external_dns_apply,
    external_dns_records,
    granted,
)
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import PROJECT, Run, reveal
from tests.cloud.program.test_program import provider_mocks, run, user_data

ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
ZONE_MEMBER = "gcp:dns/dnsManagedZoneIamMember:DnsManagedZoneIamMember"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
ZONE = "raya-example-com"  # the example stack's zone, raya.example.com.
PARENT = "example-com"
# What the add-ons' own docs give as least privilege:
# cert-manager (cert-manager.io/docs/configuration/acme/dns01/google/, "Set up a Service
# Account"): a custom role of dns.resourceRecordSets.*, dns.changes.*, dns.managedZones.list.
CERT_MANAGER_DOCUMENTED = {
    *(f"dns.resourceRecordSets.{verb}" for verb in ("create", "delete", "get", "list", "update")),
    *(f"dns.changes.{verb}" for verb in ("create", "get", "list")),
    "dns.managedZones.list",
}
# external-dns (kubernetes-sigs/external-dns docs/tutorials/gke.md, Terraform of "Workload
# Identity"): roles/dns.reader on the project, roles/dns.admin on the zone. dns.admin holds
# every dns.* permission, dns.reader dns.managedZones.list among its reads (IAM "Cloud DNS
# roles and permissions").
EXTERNAL_DNS_ZONE_DOCUMENTED_PREFIX = "dns."
EXTERNAL_DNS_PROJECT_DOCUMENTED = {"dns.managedZones.list"}


def members(result: Run) -> dict[str, str]:
    return {purpose: result.resources[purpose].outputs["member"]
            for purpose in ("external-dns", "cert-manager")}  # fmt: skip


def test_each_account_changes_records_in_the_cluster_zone_alone() -> None:
    result = run(provider_mocks())
    roles = {name: {**reveal(r.inputs), **r.outputs} for name, r in result.of_type(ROLE).items()}
    assert set(roles) == {"dns-records", "dns-zone-list"}
    records, lister = roles["dns-records"], roles["dns-zone-list"]
    assert sorted(records["permissions"]) == [
        "dns.changes.create",
        "dns.changes.get",
        "dns.resourceRecordSets.create",
        "dns.resourceRecordSets.delete",
        "dns.resourceRecordSets.list",
        "dns.resourceRecordSets.update",
    ]
    assert lister["permissions"] == ["dns.managedZones.list"]
    # Their ids end in the stack's random suffix: a destroy then up makes new ones.
    suffix = result.resources["dns-roles"].outputs["hex"]
    assert (records["roleId"], lister["roleId"]) == (
        f"raya_dnsRecords_{suffix}",
        f"raya_dnsZoneList_{suffix}",
    )
    member = members(result)
    zone_bindings = sorted(
        (b["managedZone"], b["role"], b["member"], b["project"])
        for b in (reveal(r.inputs) for r in result.of_type(ZONE_MEMBER).values())
    )
    assert zone_bindings == sorted(
        (ZONE, records["name"], member[purpose], PROJECT) for purpose in member
    )
    project_bindings = [reveal(r.inputs) for r in result.of_type(PROJECT_MEMBER).values()]
    assert project_bindings == [
        {"project": PROJECT, "role": lister["name"], "member": member["external-dns"]}
    ]
    # No predefined role anywhere, and nothing else names the accounts.
    bound = [reveal(r.inputs) for r in result.resources.values() if "member" in r.inputs]
    assert not [b for b in bound if b["role"].startswith("roles/dns")]
    assert len([b for b in bound if b["member"] in member.values()]) == 3


def test_the_rights_are_within_what_each_add_on_documents() -> None:
    result = run(provider_mocks())
    roles = {name: reveal(r.inputs)["permissions"] for name, r in result.of_type(ROLE).items()}
    assert set(roles["dns-records"]) < CERT_MANAGER_DOCUMENTED
    # Left out of cert-manager's list: what no call of its solver needs once the issuer
    # names the zone (the replays below make every call the solver makes).
    assert CERT_MANAGER_DOCUMENTED - set(roles["dns-records"]) == {
        "dns.changes.list", "dns.resourceRecordSets.get", "dns.managedZones.list"
    }  # fmt: skip
    assert all(p.startswith(EXTERNAL_DNS_ZONE_DOCUMENTED_PREFIX) for p in roles["dns-records"])
    assert set(roles["dns-zone-list"]) == EXTERNAL_DNS_PROJECT_DOCUMENTED


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the control plane's manifests give each add-on, as it reads them."""

    filters: list[str]  # external-dns' domainFilters
    external_dns_project: str  # its --google-project
    hosted_zone: str  # the issuers' cloudDNS.hostedZoneName ("" when unset)
    cert_manager_project: str  # their cloudDNS.project


def settings(result: Run) -> Settings:
    files = ignition_files(user_data(result)["control-plane"])
    charts = next(text for path, text in files.items() if path.endswith(CHARTS_MANIFEST))
    (chart,) = [doc for doc in yaml.safe_load_all(charts) if doc["metadata"]["name"] == (
        "external-dns"
    )]  # fmt: skip
    values = yaml.safe_load(chart["spec"]["valuesContent"])
    (project_arg,) = [a for a in values["extraArgs"] if a.startswith("--google-project=")]
    issuers = next(text for path, text in files.items() if path.endswith(ISSUERS_MANIFEST))
    solvers = {
        yaml.dump(solver["dns01"]["cloudDNS"])
        for issuer in yaml.safe_load_all(issuers)
        for solver in issuer["spec"]["acme"]["solvers"]
    }
    (solver,) = [yaml.safe_load(text) for text in solvers]  # both issuers solve alike
    return Settings(
        filters=values["domainFilters"],
        external_dns_project=project_arg.split("=", 1)[1],
        hosted_zone=solver.get("hostedZoneName", ""),
        cert_manager_project=solver["project"],
    )


def test_the_issuers_name_the_zone() -> None:
    assert settings(run(provider_mocks())).hosted_zone == ZONE


def cloud(result: Run) -> CloudDns:
    """The project as the program leaves it: the parent zone, the cluster's, a private zone
    of someone else's, and the rights the program granted."""
    api = CloudDns(PROJECT)
    api.zones = {
        PARENT: Zone(PARENT, "example.com."),
        ZONE: Zone(ZONE, "raya.example.com."),
        "internal": Zone("internal", "internal.example.com.", visibility="private"),
    }
    granted(api, result)
    return api


A = RecordSet("app.raya.example.com.", "A", 300, ("203.0.113.7",))
OWNER = RecordSet("app.raya.example.com.", "TXT", 300, ('"heritage=external-dns,owner=x"',))


def external_dns_sync(api: CloudDns, caller: str, given: Settings) -> None:
    """Three runs of external-dns' controller loop (controller/controller.go `RunOnce`: the
    registry reads the records, then applies the plan): publish an Ingress, move it to
    another address, remove it."""
    moved = dataclasses.replace(A, rrdatas=("203.0.113.8",))
    plans = [
        {"create": [A, OWNER]},
        {"update_old": [A], "update_new": [moved]},
        {"delete": [moved, OWNER]},
    ]
    project, filters = given.external_dns_project, given.filters
    for plan in plans:
        external_dns_records(api, caller, project, filters)
        external_dns_apply(api, caller, project, filters, **plan)
        api.settle()


CHALLENGE = "_acme-challenge.app.raya.example.com."


def cert_manager_solve(api: CloudDns, caller: str, given: Settings) -> None:
    """Two challenges for one name (the name and its wildcard: one TXT set of two values),
    then their clean-ups."""
    project, zone = given.cert_manager_project, given.hosted_zone
    for value in ("token-one", "token-two"):
        cert_manager_present(api, caller, project, zone, CHALLENGE, value)
    for value in ("token-one", "token-two"):
        cert_manager_clean_up(api, caller, project, zone, CHALLENGE, value)
        api.settle()


def test_both_add_ons_work_with_their_rights() -> None:
    result = run(provider_mocks())
    api, member, given = cloud(result), members(result), settings(result)
    external_dns_sync(api, member["external-dns"], given)
    cert_manager_solve(api, member["cert-manager"], given)
    assert api.zones[ZONE].records == {}  # all published, moved, removed; challenges gone
    made = {(caller, method) for caller, method, _ in api.calls}
    assert made == {
        (member["external-dns"], "managedZones.list"),
        (member["external-dns"], "resourceRecordSets.list"),
        (member["external-dns"], "changes.create"),
        (member["cert-manager"], "resourceRecordSets.list"),
        (member["cert-manager"], "changes.create"),
        (member["cert-manager"], "changes.get"),
    }
    # Every call on a zone went to the cluster's.
    assert {zone for _, method, zone in api.calls if method != "managedZones.list"} == {ZONE}


@pytest.mark.parametrize(
    "permission",
    [
        "dns.changes.create",
        "dns.changes.get",
        "dns.resourceRecordSets.create",
        "dns.resourceRecordSets.delete",
        "dns.resourceRecordSets.list",
        "dns.resourceRecordSets.update",
    ],
)
def test_each_record_permission_is_needed(permission: str) -> None:
    """Without any one of them, one add-on or the other fails: none is granted for nothing."""
    result = run(provider_mocks())
    api, member = cloud(result), members(result)
    name = result.resources["dns-records"].outputs["name"]
    api.roles[name] = api.roles[name] - {permission}
    failures, given = [], settings(result)
    replays = ((external_dns_sync, "external-dns"), (cert_manager_solve, "cert-manager"))
    for replay, purpose in replays:
        try:
            replay(api, member[purpose], given)
        except DnsError as error:
            assert error.status == 403 and permission in str(error)
            failures.append(purpose)
    assert failures


def test_external_dns_needs_the_project_list() -> None:
    result = run(provider_mocks())
    api, member = cloud(result), members(result)
    api.project_policy.clear()
    with pytest.raises(DnsError, match=r"dns\.managedZones\.list on project"):
        external_dns_sync(api, member["external-dns"], settings(result))


def test_the_list_bound_on_the_zone_alone_lists_nothing() -> None:
    """dns.managedZones.list is the project's: granted in the zone's policy, it lists no zone."""
    result = run(provider_mocks())
    api, member = cloud(result), members(result)
    lister = result.resources["dns-zone-list"].outputs["name"]
    api.project_policy.clear()
    api.zone_policies[ZONE].append((lister, member["external-dns"]))
    with pytest.raises(DnsError, match="403"):
        external_dns_sync(api, member["external-dns"], settings(result))


Attempt = Callable[[CloudDns, str], object]
PARENT_RECORD = RecordSet("www.example.com.", "A", 300, ("198.51.100.1",))
ATTEMPTS: dict[str, Attempt] = {
    "read the parent's records": lambda api, caller: api.rrsets_list(caller, PROJECT, PARENT),
    "add to the parent": lambda api, caller: api.changes_create(
        caller, PROJECT, PARENT, additions=[PARENT_RECORD]
    ),
    "read a private zone": lambda api, caller: api.rrsets_list(caller, PROJECT, "internal"),
    "solve in the parent": lambda api, caller: cert_manager_present(
        api, caller, PROJECT, PARENT, "_acme-challenge.example.com.", "t"
    ),
    "list zones (cert-manager)": lambda api, caller: api.managed_zones_list(caller, PROJECT),
}


@pytest.mark.parametrize("attempt", sorted(ATTEMPTS))
@pytest.mark.parametrize("purpose", ["external-dns", "cert-manager"])
def test_a_leaked_key_reaches_no_other_zone(attempt: str, purpose: str) -> None:
    result = run(provider_mocks())
    api, member = cloud(result), members(result)
    if attempt == "list zones (cert-manager)" and purpose == "external-dns":
        assert api.managed_zones_list(member[purpose], PROJECT)  # its one project right
        return
    with pytest.raises(DnsError, match="Error 403"):
        ATTEMPTS[attempt](api, member[purpose])
    assert not api.changes and not api.calls


def test_cert_manager_without_the_zone_name_would_need_the_list() -> None:
    """Why the issuers name the zone: without `hostedZoneName` the solver lists zones first
    (`getHostedZone`), which its account may not."""
    result = run(provider_mocks())
    api, member = cloud(result), members(result)
    unnamed = dataclasses.replace(settings(result), hosted_zone="")
    with pytest.raises(DnsError, match=r"dns\.managedZones\.list"):
        cert_manager_solve(api, member["cert-manager"], unnamed)


def test_role_ids_fit_iam() -> None:
    """IAM's custom role ids: 3 to 64 letters, digits, `_` and `.` ("Create and manage custom
    roles", `roleId`); the longest cluster name and purpose fit."""
    longest = program_dns.role_id("a" * 30 + "-b", "dnsZoneList", "ffffffff")
    assert len(longest) <= 64
    assert longest.replace("_", "").replace(".", "").isalnum()


def deploy(api: CloudDns, day: int) -> Run:
    """The first `raya up` of a stack (or the first after a destroy) on `day`: the roles it
    declares created as the provider creates them."""
    result = run(provider_mocks())
    for role in result.of_type(ROLE).values():
        inputs = reveal(role.inputs)
        api.create_role(inputs["roleId"], inputs["permissions"], day)
    return result


def test_a_stack_destroyed_then_deployed_again_gets_its_roles_again() -> None:
    api = CloudDns(PROJECT)
    first = deploy(api, day=0)
    for role in first.of_type(ROLE).values():  # `raya destroy` on day 1
        api.delete_role(role.outputs["name"], day=1)
    # Day 10: the old ids are purged but still taken (7 to 37 days after the delete).
    second = deploy(api, day=10)
    old = {reveal(r.inputs)["roleId"] for r in first.of_type(ROLE).values()}
    new = {reveal(r.inputs)["roleId"] for r in second.of_type(ROLE).values()}
    assert len(new) == 2 and not old & new
    assert set(api.roles) == {r.outputs["name"] for r in second.of_type(ROLE).values()}
    # What a fixed id would have met.
    taken = sorted(old)[0]
    with pytest.raises(DnsError, match="Error 409"):
        api.create_role(taken, ["dns.managedZones.list"], day=10)


def test_an_update_keeps_the_roles() -> None:
    mocks = provider_mocks()
    first, again = run(mocks), run(mocks)
    ids = {name: reveal(r.inputs)["roleId"] for name, r in first.of_type(ROLE).items()}
    assert {name: reveal(r.inputs)["roleId"] for name, r in again.of_type(ROLE).items()} == ids
    assert not {"dns-roles", "dns-records", "dns-zone-list"} & set(again.replaced)
