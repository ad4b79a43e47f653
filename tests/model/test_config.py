"""The stack config: defaults, every validation rule, and the messages that name the fault."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest

from raya.errors import ConfigError
from raya.model.config import (
    KEYS,
    LOCATIONS,
    BackupS3,
    LoadBalancer,
    check_secret_settings,
    load_stack_config,
    parse_stack_config,
    server_type_problem,
    stack_file,
)
from raya.model.fleet import build_cluster, server_name
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK
from tests.support import REPO

SOURCE = "Pulumi.test.yaml"
MINIMAL: dict[str, Any] = {
    "authorizedUsers": ["octo-alice"],
    "managedSubdomain": "raya",
    "parentZone": "example.com",
    "acmeEmail": "ops@example.org",
}


def parse(**changes: Any) -> Any:
    values = {**MINIMAL, **changes}
    return parse_stack_config({k: v for k, v in values.items() if v is not None}, SOURCE)


def error_of(**changes: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse(**changes)
    return str(caught.value)


def test_defaults_are_the_specs() -> None:
    config = parse()
    assert config.cluster_name == "raya"
    assert config.location == "nbg1"
    assert config.network_zone == "eu-central"
    assert config.control_plane_server_type == "cx33"
    assert config.authorized_users == ("octo-alice",)
    assert config.network_range == ipaddress.IPv4Network("10.0.0.0/16")
    assert config.nodes_subnet == ipaddress.IPv4Network("10.0.1.0/24")
    assert config.control_plane_ip == ipaddress.IPv4Address("10.0.1.10")
    # The cloud controller's balancers: the /24 after nodesSubnet's.
    assert config.load_balancer_subnet == ipaddress.IPv4Network("10.0.2.0/24")
    assert config.gateway == ipaddress.IPv4Address("10.0.0.1")
    assert config.parent_zone == "example.com."
    assert config.zone_dns_name == "raya.example.com."
    assert config.control_plane_schedulable is False
    anywhere = (ipaddress.IPv4Network("0.0.0.0/0"), ipaddress.IPv6Network("::/0"))
    assert config.ssh_sources == config.api_sources == anywhere
    assert config.acme_email == "ops@example.org"
    assert config.network == "private" and not config.public


LISTS = "(a YAML list, or its JSON text as `pulumi config set` stores it)"
SHAPE = (
    "a list of mappings, each with a name and optionally a type (default lb11) and a "
    f"location (default raya:location) {LISTS}"
)


@pytest.mark.parametrize(
    ("balancers", "problem"),
    [
        ("mqtt", f"is 'mqtt'; accepted: {SHAPE}"),
        (["mqtt"], f"has 'mqtt'; accepted: {SHAPE}"),
        ([{"type": "lb11"}], "field 'name' is required"),
        (
            [{"name": "mqtt", "size": 1}],
            "field 'size' is not a known field; accepted: name, type, location",
        ),
        (
            [{"name": "Mqtt"}],
            "name is 'Mqtt'; accepted: 1-30 lowercase letters, digits or '-', a letter first, "
            "no '-' last (the balancer is named <clusterName>-<name> in Hetzner)",
        ),
        ([{"name": "m" * 31}], f"name is {'m' * 31!r}; accepted: 1-30 lowercase letters"),
        (
            [{"name": "ingress"}],
            "name is 'ingress', Traefik's balancer's, which raya makes already; accepted: "
            "another name",
        ),
        ([{"name": "db"}, {"name": "db", "type": "lb21"}], "lists 'db' twice"),
        (
            [{"name": "db", "type": "lb41"}],
            "db: type is 'lb41'; accepted: lb11, lb21, lb31 (Hetzner's load balancer types)",
        ),
        (
            [{"name": "db", "location": "fra1"}],
            "db: location is 'fra1'; accepted: fsn1, nbg1, hel1, ash, hil, sin",
        ),
        (
            [{"name": "db", "location": ["fsn1"]}],
            "db: location is ['fsn1']; accepted: fsn1, nbg1, hel1, ash, hil, sin",
        ),
        (
            [{"name": "db", "type": ["lb21"]}],
            "db: type is ['lb21']; accepted: lb11, lb21, lb31",
        ),
    ],
)
def test_the_users_balancers_are_checked(balancers: object, problem: str) -> None:
    error = error_of(network="public", loadBalancers=balancers)
    assert error.startswith(f"{SOURCE}: raya:loadBalancers {problem}")


def test_the_users_balancers_are_refused_in_the_private_mode() -> None:
    # There the cloud controller's balancers reach the NodePorts over the network, which
    # Hetzner's firewalls do not filter: nothing to declare, and nothing half-meant.
    assert error_of(loadBalancers=[{"name": "mqtt"}]) == (
        f"{SOURCE}: raya:loadBalancers is set and raya:network is private: there the cloud "
        "controller's balancers reach the NodePorts over the cluster's network, which "
        "Hetzner's firewalls do not filter, so there is nothing to declare; accepted: no "
        "raya:loadBalancers, or raya:network: public in a new stack"
    )
    assert parse(loadBalancers=[]).load_balancers == ()
    assert parse(network="public").load_balancers == ()


@pytest.mark.parametrize("value", ["Public", "large", "", True, ["public"], 0])
def test_the_network_mode_is_private_or_public(value: object) -> None:
    assert error_of(network=value) == (
        f"{SOURCE}: raya:network is {value!r}; accepted: private (one Hetzner network, at most "
        "100 nodes) or public (the nodes talk over their public addresses, WireGuard between "
        "them)"
    )


def test_every_setting_can_be_given() -> None:
    given: dict[str, Any] = dict(
        clusterName="lab-2",
        location="hel1",
        networkZone="eu-central",
        controlPlaneServerType="cpx31",
        authorizedUsers=["Octo-Alice", "bob-1", "c"],
        managedSubdomain="k8s",
        parentZone="corp.example.org.",
        networkRange="10.8.0.0/16",
        nodesSubnet="10.8.4.0/22",
        controlPlaneIp="10.8.4.5",
        loadBalancerSubnet="10.8.0.64/26",
        controlPlaneSchedulable=True,
        sshSources=["203.0.113.0/24", "2001:db8::/32"],
        apiSources=[],
        controlPlaneVolumeSize=20,
        controlPlanes=3,
        acmeEmail="Certs+lab@Corp.Example.org",
        backupSchedule="@daily",
        backupRetention=14,
        backupS3={"endpoint": "minio.lab:9000", "bucket": "lab-backups"},
        recoveryKit="~/vault/lab-2.kit.json",
        fromRecoveryKit="kits/lab-1.kit.json",
        network="public",
        loadBalancers=[{"name": "mqtt", "type": "lb21", "location": "fsn1"}, {"name": "db"}],
    )
    # The settings docs/config.md lists: the call above gives each of them.
    assert (
        sorted(KEYS)
        == sorted(given)
        == [
            "acmeEmail",
            "apiSources",
            "authorizedUsers",
            "backupRetention",
            "backupS3",
            "backupSchedule",
            "clusterName",
            "controlPlaneIp",
            "controlPlaneSchedulable",
            "controlPlaneServerType",
            "controlPlaneVolumeSize",
            "controlPlanes",
            "fromRecoveryKit",
            "loadBalancerSubnet",
            "loadBalancers",
            "location",
            "managedSubdomain",
            "network",
            "networkRange",
            "networkZone",
            "nodesSubnet",
            "parentZone",
            "recoveryKit",
            "sshSources",
        ]
    )
    config = parse(**given)
    assert config.recovery_kit == "~/vault/lab-2.kit.json"
    assert config.from_recovery_kit == "kits/lab-1.kit.json"
    assert config.cluster_name == "lab-2"
    assert config.location == "hel1"
    assert config.control_plane_server_type == "cpx31"
    assert config.authorized_users == ("Octo-Alice", "bob-1", "c")
    assert config.zone_dns_name == "k8s.corp.example.org."
    assert config.gateway == ipaddress.IPv4Address("10.8.0.1")
    assert config.nodes_subnet == ipaddress.IPv4Network("10.8.4.0/22")
    assert config.control_plane_ip == ipaddress.IPv4Address("10.8.4.5")
    assert config.load_balancer_subnet == ipaddress.IPv4Network("10.8.0.64/26")
    assert config.control_plane_schedulable is True
    assert config.ssh_sources == (
        ipaddress.IPv4Network("203.0.113.0/24"),
        ipaddress.IPv6Network("2001:db8::/32"),
    )
    assert config.api_sources == ()
    assert config.acme_email == "Certs+lab@Corp.Example.org"
    assert config.control_plane_volume_size == 20
    assert config.control_planes == 3
    assert config.network == "public" and config.public
    # The type lb11 and the stack's location unless given.
    assert config.load_balancers == (
        LoadBalancer("mqtt", "lb21", "fsn1"),
        LoadBalancer("db", "lb11", "hel1"),
    )
    assert (config.backup_schedule, config.backup_retention) == ("@daily", 14)
    assert config.backup_s3 == BackupS3("minio.lab:9000", "lab-backups", "us-east-1", "lab-2")


# Hetzner's locations and their network zones (Hetzner Cloud API, GET /locations).
HETZNER_ZONES = [
    ("ash", "us-east"),
    ("fsn1", "eu-central"),
    ("hel1", "eu-central"),
    ("hil", "us-west"),
    ("nbg1", "eu-central"),
    ("sin", "ap-southeast"),
]


def test_every_hetzner_location_is_known() -> None:
    assert sorted(LOCATIONS) == [location for location, _ in HETZNER_ZONES]


@pytest.mark.parametrize(("location", "zone"), HETZNER_ZONES)
def test_network_zone_follows_the_location(location: str, zone: str) -> None:
    assert parse(location=location).network_zone == zone
    assert parse(location=location, networkZone=zone).network_zone == zone


def test_unknown_setting() -> None:
    secret = [
        "clusterHcloudToken", "backupS3AccessKey", "backupS3SecretKey", "autoscalerHcloudToken"
    ]
    accepted = ", ".join(sorted([*KEYS, *secret]))
    assert error_of(clusterNmae="x") == (
        f"{SOURCE}: raya:clusterNmae is not a known setting; accepted: {accepted}"
    )


def test_the_secret_setting_is_known_but_not_in_the_model() -> None:
    """`raya:clusterHcloudToken` is read by the program as a Pulumi secret; the stack file's
    validation accepts it, and the model never holds it."""
    config = parse(clusterHcloudToken={"secure": "v1:AAAA"})
    assert "hcloud" not in repr(config).lower()


STACK = "config:\n  raya:authorizedUsers: [octo-alice]\n"


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("", "raya:clusterHcloudToken is not set; accepted: a Hetzner Cloud API token"),
        (
            "  raya:clusterHcloudToken: " + "x" * 64 + "\n",
            "raya:clusterHcloudToken is in clear text; accepted: an encrypted value, set with "
            "`pulumi config set --secret raya:clusterHcloudToken <token>`",
        ),
        ("  raya:clusterHcloudToken:\n    secure: v1:AAAABBBB\n", None),
    ],
    ids=["missing", "clear", "encrypted"],
)
def test_the_cluster_token_must_be_set_encrypted(
    tmp_path: Path, setting: str, problem: str | None
) -> None:
    path = stack_file(tmp_path, "test")
    path.write_text(STACK + setting)
    if problem is None:
        check_secret_settings(path)
        return
    with pytest.raises(ConfigError) as caught:
        check_secret_settings(path)
    assert str(caught.value).startswith(f"{path}: {problem}")
    assert "x" * 64 not in str(caught.value)  # never the token itself


ENCRYPTED = "  raya:clusterHcloudToken:\n    secure: v1:AAAABBBB\n"


@pytest.mark.parametrize(
    ("setting", "autoscaled", "problem"),
    [
        ("", False, None),  # no autoscaled pool: not needed
        ("", True, "raya:autoscalerHcloudToken is not set; accepted: a Hetzner Cloud API "
                   "token (read and write) for the cluster autoscaler"),
        ("  raya:autoscalerHcloudToken: " + "y" * 64 + "\n", False,
         "raya:autoscalerHcloudToken is in clear text; accepted: an encrypted value"),
        ("  raya:autoscalerHcloudToken: " + "y" * 64 + "\n", True,
         "raya:autoscalerHcloudToken is in clear text; accepted: an encrypted value"),
        ("  raya:autoscalerHcloudToken:\n    secure: v1:CCCC\n", True, None),
    ],
    ids=["not-needed", "missing", "clear-unused", "clear", "encrypted"],
)
def test_the_autoscalers_token_is_set_encrypted_with_an_autoscaled_pool(
    tmp_path: Path, setting: str, autoscaled: bool, problem: str | None
) -> None:
    path = stack_file(tmp_path, "test")
    path.write_text(STACK + ENCRYPTED + setting)
    if problem is None:
        check_secret_settings(path, autoscaled=autoscaled)
        return
    with pytest.raises(ConfigError) as caught:
        check_secret_settings(path, autoscaled=autoscaled)
    assert str(caught.value).startswith(f"{path}: {problem}")
    assert "y" * 64 not in str(caught.value)  # never the token itself


@pytest.mark.parametrize("key", ["authorizedUsers", "managedSubdomain", "parentZone", "acmeEmail"])
def test_required_settings(key: str) -> None:
    assert error_of(**{key: None}) == f"{SOURCE}: raya:{key} is required"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"clusterName": "Raya"},
            "raya:clusterName is 'Raya'; accepted: 2-32 lowercase letters, digits or '-'",
        ),
        ({"clusterName": "r"}, "raya:clusterName is 'r'; accepted: 2-32"),
        ({"clusterName": "raya-"}, "raya:clusterName is 'raya-'; accepted: 2-32"),
        ({"clusterName": "1raya"}, "raya:clusterName is '1raya'; accepted: 2-32"),
        ({"clusterName": "r" * 33}, "raya:clusterName is 'rrr"),
        ({"clusterName": 7}, "raya:clusterName is 7; accepted: 2-32"),
        (
            {"location": "fra1"},
            "raya:location is 'fra1'; accepted: fsn1, nbg1, hel1, ash, hil, sin",
        ),
        ({"location": ["nbg1"]}, "raya:location is ['nbg1']; accepted: fsn1"),
        (
            {"location": "ash", "networkZone": "eu-central"},
            "raya:networkZone is 'eu-central' but location ash is in 'us-east'",
        ),
        (
            {"controlPlaneServerType": ""},
            "raya:controlPlaneServerType is ''; accepted: a Hetzner server type such as cx23",
        ),
        (
            {"controlPlaneServerType": "CX33"},
            "raya:controlPlaneServerType is 'CX33'; accepted: a Hetzner server type",
        ),
        (
            {"controlPlaneServerType": "cx 33"},
            "raya:controlPlaneServerType is 'cx 33'; accepted: a Hetzner server type",
        ),
        (
            {"controlPlaneServerType": "xc33"},
            "raya:controlPlaneServerType is 'xc33', of no Hetzner server family; accepted: a "
            "type of cx, cpx, cax, ccx",
        ),
        (
            {"authorizedUsers": []},
            "raya:authorizedUsers is []; accepted: a non-empty list of GitHub handles",
        ),
        (
            {"authorizedUsers": "octo-alice"},
            "raya:authorizedUsers is 'octo-alice'; accepted: a non-empty list of GitHub handles "
            "(a YAML list, or its JSON text as `pulumi config set` stores it)",
        ),
        (
            {"authorizedUsers": ["-alice"]},
            "raya:authorizedUsers has '-alice', not a GitHub login "
            "(1-39 letters, digits or single inner '-')",
        ),
        ({"authorizedUsers": ["alice-"]}, "raya:authorizedUsers has 'alice-', not a GitHub"),
        ({"authorizedUsers": ["al--ice"]}, "raya:authorizedUsers has 'al--ice', not a GitHub"),
        ({"authorizedUsers": ["al_ice"]}, "raya:authorizedUsers has 'al_ice', not a GitHub"),
        ({"authorizedUsers": ["a" * 40]}, "raya:authorizedUsers has 'aaaa"),
        ({"authorizedUsers": [""]}, "raya:authorizedUsers has '', not a GitHub login"),
        ({"authorizedUsers": [42]}, "raya:authorizedUsers has 42, not a GitHub login"),
        (
            {"authorizedUsers": ["octo", "bob", "Octo"]},
            "raya:authorizedUsers lists 'Octo' twice (also as 'octo')",
        ),
        (
            {"managedSubdomain": "raya.lab"},
            "raya:managedSubdomain is 'raya.lab'; accepted: one lowercase DNS label such as 'raya'",
        ),
        ({"managedSubdomain": "-raya"}, "raya:managedSubdomain is '-raya'; accepted: one"),
        (
            {"parentZone": "com"},
            "raya:parentZone is 'com'; accepted: a lowercase DNS name such as example.com",
        ),
        ({"parentZone": "Example.com"}, "raya:parentZone is 'Example.com'; accepted: a lowercase"),
        ({"parentZone": "example..com"}, "raya:parentZone is 'example..com'; accepted:"),
        ({"parentZone": "example.com.."}, "raya:parentZone is 'example.com..'; accepted:"),
        ({"parentZone": 5}, "raya:parentZone is 5; accepted: a lowercase DNS name"),
        (
            {"networkRange": "10.0.0.0/33"},
            "raya:networkRange is '10.0.0.0/33'; accepted: an IPv4 CIDR such as 10.0.1.0/24",
        ),
        ({"networkRange": "10.0.0.1/16"}, "raya:networkRange is '10.0.0.1/16'; accepted: an IPv4"),
        ({"networkRange": "10.0.0.0"}, "raya:networkRange is '10.0.0.0'; accepted: an IPv4 CIDR"),
        ({"networkRange": 167772160}, "raya:networkRange is 167772160; accepted: an IPv4 CIDR"),
        ({"networkRange": "fd00::/8"}, "raya:networkRange is 'fd00::/8'; accepted: an IPv4 CIDR"),
        (
            {"networkRange": "192.168.0.0/16", "nodesSubnet": "192.168.1.0/24"},
            "raya:networkRange is 192.168.0.0/16; it must lie inside 10.0.0.0/8",
        ),
        ({"nodesSubnet": "nope"}, "raya:nodesSubnet is 'nope'; accepted: an IPv4 CIDR"),
        (
            {"nodesSubnet": "10.1.1.0/24"},
            "raya:nodesSubnet is 10.1.1.0/24, outside networkRange 10.0.0.0/16",
        ),
        (
            {"nodesSubnet": "10.0.0.0/15"},
            "raya:nodesSubnet is 10.0.0.0/15, outside networkRange 10.0.0.0/16",
        ),
        (
            {"controlPlaneIp": "10.0.1.300"},
            "raya:controlPlaneIp is '10.0.1.300'; accepted: an IPv4 address",
        ),
        ({"controlPlaneIp": 167772426}, "raya:controlPlaneIp is 167772426; accepted: an IPv4"),
        (
            {"controlPlaneIp": "10.0.2.10"},
            "raya:controlPlaneIp is 10.0.2.10; accepted: a host address of nodesSubnet "
            "10.0.1.0/24 other than the gateway 10.0.0.1",
        ),
        ({"controlPlaneIp": "10.0.1.0"}, "raya:controlPlaneIp is 10.0.1.0; accepted: a host"),
        ({"controlPlaneIp": "10.0.1.255"}, "raya:controlPlaneIp is 10.0.1.255; accepted: a host"),
        *(
            (
                {"acmeEmail": value},
                f"raya:acmeEmail is {value!r}; accepted: an e-mail address such as ops@example.org",
            )
            for value in (
                "ops",
                "ops@localhost",
                "ops@@example.org",
                "o ps@example.org",
                '"ops"@example.org',
                "ops@example.org\n",
                "ops@-example.org",
                "ops@example.o",
                "",
                ["ops@example.org"],
            )
        ),
        (
            {"nodesSubnet": "10.0.0.0/24", "controlPlaneIp": "10.0.0.1"},
            "raya:controlPlaneIp is 10.0.0.1; accepted: a host address of nodesSubnet "
            "10.0.0.0/24 other than the gateway 10.0.0.1",
        ),
        (
            {"controlPlaneSchedulable": "no"},
            "raya:controlPlaneSchedulable is 'no'; accepted: true or false",
        ),
        (
            {"sshSources": "0.0.0.0/0"},
            "raya:sshSources is '0.0.0.0/0'; accepted: a list of IPv4 or IPv6 CIDRs",
        ),
        ({"sshSources": ["203.0.113.7"]}, "raya:sshSources has '203.0.113.7'; accepted: a list"),
        ({"apiSources": ["10.0.0.1/8"]}, "raya:apiSources has '10.0.0.1/8'; accepted: a list"),
        ({"apiSources": ["2001:db8::/129"]}, "raya:apiSources has '2001:db8::/129'; accepted"),
        ({"apiSources": ["example.com/24"]}, "raya:apiSources has 'example.com/24'; accepted"),
        ({"apiSources": [24]}, "raya:apiSources has 24; accepted"),
        (
            {"sshSources": ["2001:db8::/32", "2001:0db8::/32"]},
            "raya:sshSources lists 2001:db8::/32 twice",
        ),
    ],
)
def test_bad_setting(changes: dict[str, Any], message: str) -> None:
    assert error_of(**changes).startswith(f"{SOURCE}: {message}")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # Given, overlapping the nodes' subnet (a pool's block, the control planes' addresses).
        (
            {"loadBalancerSubnet": "10.0.1.128/25"},
            "raya:loadBalancerSubnet is 10.0.1.128/25, which overlaps nodesSubnet 10.0.1.0/24",
        ),
        (
            {"loadBalancerSubnet": "10.0.0.0/16"},
            "raya:loadBalancerSubnet is 10.0.0.0/16, which overlaps nodesSubnet 10.0.1.0/24",
        ),
        (
            {"loadBalancerSubnet": "10.1.0.0/24"},
            "raya:loadBalancerSubnet is 10.1.0.0/24, outside networkRange 10.0.0.0/16",
        ),
        # Unset, with no room after nodesSubnet: its default would leave the network.
        (
            {"nodesSubnet": "10.0.255.0/24", "controlPlaneIp": "10.0.255.10"},
            "raya:loadBalancerSubnet is unset and defaults to 10.1.0.0/24 (the block of "
            "nodesSubnet's size after it), outside networkRange 10.0.0.0/16",
        ),
        (
            {"loadBalancerSubnet": "10.0.2.1/24"},
            "raya:loadBalancerSubnet is '10.0.2.1/24'; accepted: an IPv4 CIDR",
        ),
    ],
)
def test_the_balancers_subnet_must_be_its_own(changes: dict[str, Any], message: str) -> None:
    found = error_of(**changes)
    assert found.startswith(f"{SOURCE}: {message}")
    if "accepted: an IPv4 CIDR such as" not in found:
        assert found.endswith(
            "; accepted: an IPv4 CIDR inside networkRange 10.0.0.0/16 disjoint from nodesSubnet "
            f"{changes.get('nodesSubnet', '10.0.1.0/24')}, set with `pulumi config set "
            "raya:loadBalancerSubnet <cidr>`"
        )


def test_the_balancers_subnet_follows_the_nodes_subnet() -> None:
    config = parse(nodesSubnet="10.0.8.0/22", controlPlaneIp="10.0.8.10")
    assert config.load_balancer_subnet == ipaddress.IPv4Network("10.0.12.0/22")


ACCEPTED_RANGES = (
    "accepted: a range inside 10.0.0.0/8 that overlaps neither 10.42.0.0/16 nor 10.43.0.0/16"
)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # k3s' defaults, which raya's k3s configs keep: pods 10.42.0.0/16, services 10.43.0.0/16.
        (
            {
                "networkRange": "10.42.0.0/16",
                "nodesSubnet": "10.42.1.0/24",
                "controlPlaneIp": "10.42.1.10",
            },
            "raya:nodesSubnet is 10.42.1.0/24, which overlaps k3s' cluster CIDR 10.42.0.0/16",
        ),
        (
            {
                "networkRange": "10.43.0.0/16",
                "nodesSubnet": "10.43.255.0/24",
                "controlPlaneIp": "10.43.255.10",
            },
            "raya:nodesSubnet is 10.43.255.0/24, which overlaps k3s' service CIDR 10.43.0.0/16",
        ),
        # The subnet clear of both, the network around them: still refused, by its name.
        (
            {"networkRange": "10.0.0.0/8"},
            "raya:networkRange is 10.0.0.0/8, which overlaps k3s' cluster CIDR 10.42.0.0/16",
        ),
        (
            {
                "networkRange": "10.40.0.0/13",
                "nodesSubnet": "10.40.1.0/24",
                "controlPlaneIp": "10.40.1.10",
            },
            "raya:networkRange is 10.40.0.0/13, which overlaps k3s' cluster CIDR 10.42.0.0/16",
        ),
        (
            {
                "networkRange": "10.43.128.0/17",
                "nodesSubnet": "10.43.128.0/24",
                "controlPlaneIp": "10.43.128.10",
            },
            "raya:nodesSubnet is 10.43.128.0/24, which overlaps k3s' service CIDR 10.43.0.0/16",
        ),
    ],
)
def test_ranges_overlapping_k3s_pods_or_services_are_refused(
    changes: dict[str, Any], message: str
) -> None:
    assert error_of(**changes) == f"{SOURCE}: {message}; {ACCEPTED_RANGES}"


def test_ranges_next_to_k3s_pods_and_services_are_accepted() -> None:
    # 10.41.255.255 and 10.44.0.0 are the addresses either side of 10.42.0.0-10.43.255.255.
    below = parse(
        networkRange="10.40.0.0/15",
        nodesSubnet="10.41.255.0/24",
        controlPlaneIp="10.41.255.10",
        loadBalancerSubnet="10.40.0.0/24",
    )
    above = parse(
        networkRange="10.44.0.0/16", nodesSubnet="10.44.0.0/24", controlPlaneIp="10.44.0.10"
    )
    assert below.nodes_subnet.broadcast_address == ipaddress.IPv4Address("10.41.255.255")
    assert above.network_range.network_address == ipaddress.IPv4Address("10.44.0.0")


@pytest.mark.parametrize("value", ["cx23", "cpx11", "ccx63", "cx22", "ccx13", "cpx21"])
def test_good_server_types(value: str) -> None:
    assert server_type_problem(value) is None


@pytest.mark.parametrize("value", ["cx11", "cx21", "cx51", "ccx11", "ccx51"])
def test_types_naming_the_private_nic_ens10_are_refused(value: str) -> None:
    """The node configs activate enp7s0; on these older types it would never appear."""
    assert server_type_problem(value) == (
        f"is {value!r}, an older type whose private NIC is ens10; accepted: a current "
        "type (private NIC enp7s0) such as cx23"
    )


def write(tmp_path: Path, text: str) -> Path:
    path = stack_file(tmp_path, "test")
    path.write_text(text)
    return path


def test_load_reads_only_the_raya_namespace(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "config:\n"
        "  hcloud:token:\n    secure: AAABAxyz\n"
        "  gcp:project: my-project\n"
        "  raya:authorizedUsers: [octo-alice, octo-bob]\n"
        "  raya:managedSubdomain: lab\n"
        "  raya:parentZone: example.net\n"
        "  raya:acmeEmail: ops@example.net\n"
        "  raya:location: fsn1\n",
    )
    config = load_stack_config(path)
    assert path.name == "Pulumi.test.yaml"
    assert config.authorized_users == ("octo-alice", "octo-bob")
    assert config.zone_dns_name == "lab.example.net."
    assert config.location == "fsn1"


def test_load_names_the_file_in_setting_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "config:\n  raya:managedSubdomain: raya\n  raya:parentZone: x.io\n")
    with pytest.raises(ConfigError) as caught:
        load_stack_config(path)
    assert str(caught.value) == f"{path}: raya:authorizedUsers is required"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            None,
            "{path}: stack file not found; a new stack is made with `pulumi stack init` and "
            "its settings set with `pulumi config set` (docs/stacks.md)",
        ),
        ("config: [", "{path}: not a YAML stack file: "),
        ("", "{path}: expected a top-level 'config:' mapping with raya: values"),
        ("- config", "{path}: expected a top-level 'config:' mapping with raya: values"),
        ("config: 3", "{path}: expected a top-level 'config:' mapping with raya: values"),
        ("config: {}", "{path}: raya:authorizedUsers is required"),
    ],
)
def test_bad_stack_file(tmp_path: Path, text: str | None, message: str) -> None:
    path = stack_file(tmp_path, "test")
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_stack_config(path)
    assert str(caught.value).startswith(message.format(path=path))


@pytest.mark.parametrize(
    ("root", "stack"), [(EXAMPLE_ROOT, EXAMPLE_STACK), (REPO, "prod")], ids=["example", "prod"]
)
def test_shipped_stacks_are_valid(root: Path, stack: str) -> None:
    config = load_stack_config(stack_file(root, stack))
    assert config.authorized_users
    assert config.zone_dns_name.endswith(".")


@pytest.mark.parametrize(("value", "size"), [(None, 10), (10, 10), (250, 250), ("40", 40)])
def test_control_plane_volume_size(value: Any, size: int) -> None:
    assert parse(controlPlaneVolumeSize=value).control_plane_volume_size == size


@pytest.mark.parametrize("value", [9, 10241, "ten", True, 12.5, "-1"])
def test_control_plane_volume_size_out_of_hetzners_range(value: Any) -> None:
    assert error_of(controlPlaneVolumeSize=value) == (
        f"{SOURCE}: raya:controlPlaneVolumeSize is {value!r}; accepted: a whole number of GB "
        "from 10 to 10240"
    )


def test_every_cluster_name_gives_valid_hetzner_server_names() -> None:
    """The server names are `<clusterName>-<node>`: hostnames, RFC 1123 labels of at most 63
    characters, whatever the accepted clusterName and however many agents fit a subnet."""
    label = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
    for name in ("ab", "a-b", "k8s-prod-2026", "a" + "b-" * 15 + "c"):
        # The largest network clear of k3s' ranges, 10.128.0.0/9, and in it the largest
        # nodes' subnet that leaves room for the balancers' beside it: 10.128.0.0/10.
        config = parse(
            clusterName=name,
            networkRange="10.128.0.0/9",
            nodesSubnet="10.128.0.0/10",
            controlPlaneIp="10.128.0.10",
        )
        cluster = build_cluster(config, ("cx23",) * 3, "agents.json")
        longest = f"{name}-agent-{(1 << 22) - 1}"  # the last agent a /10 addresses
        for server in (*(server_name(name, node.name) for node in cluster.nodes), longest):
            assert label.fullmatch(server), server
    assert server_name("raya", cluster.control_plane.name) == "raya-control-plane"


@pytest.mark.parametrize(("value", "count"), [(None, 1), (1, 1), (3, 3), (5, 5), ("3", 3)])
def test_control_planes(value: Any, count: int) -> None:
    assert parse(controlPlanes=value).control_planes == count


@pytest.mark.parametrize("value", [0, 2, 4, 6, 7, -1, "two", True, 3.0, "03x"])
def test_control_planes_other_than_one_three_or_five_are_refused(value: Any) -> None:
    message = error_of(controlPlanes=value)
    assert message.startswith(f"{SOURCE}: raya:controlPlanes is {value!r}; accepted: 1, 3 or 5")
    assert "etcd needs a majority" in message


def test_several_control_planes_need_room_for_their_load_balancer() -> None:
    # Five control planes and the load balancer: 10.0.1.10 to 10.0.1.15 by default.
    assert [str(ip) for ip in parse(controlPlanes=5).reserved_ips] == [
        f"10.0.1.{host}" for host in range(10, 16)
    ]
    assert str(parse(controlPlanes=3).registration_ip) == "10.0.1.15"
    assert str(parse().registration_ip) == "10.0.1.10"
    # 10.0.1.250 + 5 is the subnet's broadcast address: refused, even for three.
    assert error_of(controlPlanes=3, controlPlaneIp="10.0.1.250") == (
        f"{SOURCE}: raya:controlPlanes is 3, which needs 10.0.1.250-10.0.1.255 (the control "
        "planes and their private load balancer), but 10.0.1.255 is not a host address of "
        "nodesSubnet 10.0.1.0/24; accepted: a lower raya:controlPlaneIp or fewer control planes"
    )
    assert parse(controlPlanes=3, controlPlaneIp="10.0.1.249").registration_ip == (
        ipaddress.IPv4Address("10.0.1.254")
    )
    # One control plane holds its own address only, as before.
    assert parse(controlPlaneIp="10.0.1.254").reserved_ips == (
        ipaddress.IPv4Address("10.0.1.254"),
    )


@pytest.mark.parametrize("key", ["recoveryKit", "fromRecoveryKit"])
@pytest.mark.parametrize("value", ["", "  ", 42, ["kit.json"], "kit\0.json"])
def test_a_kit_path_that_is_no_path_is_refused(key: str, value: Any) -> None:
    assert error_of(**{key: value}) == (
        f"{SOURCE}: raya:{key} is {value!r}; accepted: a file path, relative to the project "
        "folder or absolute"
    )
