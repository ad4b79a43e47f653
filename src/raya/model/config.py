"""The stack config: the spec's `variables.tf` + `prod.tfvars`, read from `Pulumi.<stack>.yaml`.

Values live under the `raya:` namespace of the stack file's `config:` mapping, the same
mapping the Pulumi program reads through `pulumi.Config("raya")`; both go through
`parse_stack_config`, so the offline render and the deployment see one validated model.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from raya.errors import ConfigError
from raya.model.cron import CronError, Schedule
from raya.model.jsonfile import DuplicateKey, StrictLoader, check_keys, loads_json, loads_yaml

NAMESPACE = "raya"
# The spec's route: every private subnet raya may ever use is reached through the gateway.
PRIVATE_ROUTE = ipaddress.IPv4Network("10.0.0.0/8")
# The smallest network Hetzner creates (its API, POST /networks `ip_range`).
NETWORK_PREFIX_MAX = 24
# k3s' pod and service ranges. raya's k3s configs set neither `cluster-cidr` nor
# `service-cidr`, so k3s' defaults hold (k3s-io/k3s, pkg/cli/server/server.go, `run`): a
# node address inside either is routed into flannel or kube-proxy, not to the node.
K3S_RANGES = {
    "cluster CIDR": ipaddress.IPv4Network("10.42.0.0/16"),
    "service CIDR": ipaddress.IPv4Network("10.43.0.0/16"),
}
# Hetzner locations and the network zone each belongs to.
LOCATIONS = {
    "fsn1": "eu-central",
    "nbg1": "eu-central",
    "hel1": "eu-central",
    "ash": "us-east",
    "hil": "us-west",
    "sin": "ap-southeast",
}
DEFAULTS: dict[str, Any] = {
    "clusterName": "raya",
    "location": "nbg1",
    "controlPlaneServerType": "cx33",
    "networkRange": "10.0.0.0/16",
    "nodesSubnet": "10.0.1.0/24",
    "controlPlaneIp": "10.0.1.10",
    "controlPlaneSchedulable": False,
    # Anywhere: SSH takes keys only and the API client certificates only, and the deploy
    # workflow's runners have no fixed address. Narrow them where operators have one.
    "sshSources": ["0.0.0.0/0", "::/0"],
    "apiSources": ["0.0.0.0/0", "::/0"],
    "controlPlaneVolumeSize": 10,
    "controlPlanes": 1,
    # k3s' etcd snapshots: every 6 hours, 28 kept on each control plane and 28 in the bucket
    # (a week of them with one control plane).
    "backupSchedule": "0 */6 * * *",
    "backupRetention": 28,
    "network": "private",
}
REQUIRED = ("authorizedUsers", "managedSubdomain", "parentZone", "acmeEmail")
# Paths, relative to the project folder or absolute: where `raya up` writes the stack's
# recovery kit (default: raya.cloud.kit.path), and the kit a stack is built from.
KIT_KEYS = ("recoveryKit", "fromRecoveryKit")
# The cloud controller's load balancers' subnet; its default is derived from nodesSubnet.
LOAD_BALANCER_SUBNET = "loadBalancerSubnet"
# The public mode's load balancers for LoadBalancer Services besides Traefik's.
LOAD_BALANCERS = "loadBalancers"
KEYS = (
    *DEFAULTS,
    "networkZone",
    LOAD_BALANCER_SUBNET,
    LOAD_BALANCERS,
    "backupS3",
    *KIT_KEYS,
    *REQUIRED,
)
# The cluster's own Hetzner API token, for its cloud controller and CSI driver: separate from
# the deployment's (`hcloud:token`) so that it can be revoked alone.
CLUSTER_HCLOUD_TOKEN = "clusterHcloudToken"
# Secret settings (`pulumi config set --secret`): the program alone reads them, decrypted;
# they are accepted here so that a stack file holding them is valid, never part of the model.
# The cluster autoscaler's own Hetzner token: needed only with an autoscaled pool.
AUTOSCALER_HCLOUD_TOKEN = "autoscalerHcloudToken"
SECRET_KEYS = (
    CLUSTER_HCLOUD_TOKEN,
    "backupS3AccessKey",
    "backupS3SecretKey",
    AUTOSCALER_HCLOUD_TOKEN,
)
BACKUP_RETENTION = range(1, 1001)
# host[:port], as k3s' etcd-s3-endpoint: a DNS name (RFC 1123 labels, 253 characters at most)
# or an IPv4 address, and a TCP port from 1 to 65535 written without a leading 0.
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_S3_ENDPOINT = re.compile(
    rf"(?P<host>{_HOST_LABEL}(?:\.{_HOST_LABEL})*)(?::(?P<port>[1-9][0-9]{{0,4}}))?"
)
_PORTS = range(1, 65536)
# S3 bucket names (AWS' rules, which GCS and Hetzner Object Storage share): 3-63 characters.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# What S3 refuses besides the characters (AWS' "General purpose bucket naming rules"): names
# shaped like an IPv4 address, reserved prefixes and suffixes; and what is not a DNS name,
# which virtual-host requests (k3s' S3 client on AWS and GCS) need: two dots in a row, a dot
# next to a '-'.
_BUCKET_RULES = (
    (re.compile(r"[0-9]+(\.[0-9]+){3}"), "shaped like an IPv4 address"),
    (re.compile(r".*(\.\.|\.-|-\.).*"), "with two dots in a row or a dot next to a '-'"),
    (re.compile(r"(xn--|sthree-|amzn-s3-demo-).*"), "with a prefix S3 reserves"),
    (re.compile(r".*(-s3alias|--ol-s3|\.mrap|--x-s3|--table-s3)"), "with a suffix S3 reserves"),
)
_BUCKET_RULES_TEXT = (
    "not shaped like an IPv4 address, no '..', '.-' or '-.', no prefix xn--, sthree- or "
    "amzn-s3-demo- and no suffix -s3alias, --ol-s3, .mrap, --x-s3 or --table-s3"
)
# What GCS refuses besides S3's rules (cloud.google.com/storage/docs/buckets, "Bucket names"):
# a name that begins with "goog", or holds "google" or a close misspelling such as "g00gle".
_GCS_RESERVED = re.compile(r"goog.*|.*g[o0][o0]g[l1]e.*")
# Google Cloud Storage's S3 endpoint (raya.cloud.program.backups makes the bucket there).
GCS_ENDPOINT = "storage.googleapis.com"
_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_LIST_FORMS = "(a YAML list, or its JSON text as `pulumi config set` stores it)"
_MAPPING_FORMS = "(a YAML mapping, or its JSON text as `pulumi config set` stores it)"

GITHUB_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# It prefixes the Hetzner server names, `<clusterName>-control-plane` and
# `<clusterName>-agent-<i>`, which must be hostnames (RFC 1123 labels, at most 63 characters):
# 32 characters leave room for 9-digit agent numbers.
_CLUSTER_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}[a-z0-9]")
# etcd commits a write once a majority of its members has it: n members survive (n - 1) // 2
# losses, so an even count survives no more than the odd count below it, and more than five
# members slow every write for no gain (etcd's FAQ, "cluster size"; k3s' HA embedded etcd docs).
CONTROL_PLANE_COUNTS = (1, 3, 5)
# With several control planes, a private load balancer takes the address after the last one
# they may ever hold, so growing from 3 to 5 moves nothing (docs/control-plane.md).
CONTROL_PLANE_BLOCK = max(CONTROL_PLANE_COUNTS) + 1
# How the nodes reach each other: `private`, over one Hetzner network (which holds at most 100
# servers); `public`, over their public addresses, pod traffic in WireGuard (docs/fleet.md,
# "Beyond 100 nodes").
NETWORK_MODES = ("private", "public")
# Hetzner's load balancer types (LB11, LB21 and LB31 on its Load Balancer page, lower case in
# its API), and the one the cloud controller creates when neither the Service nor its
# configuration names another (hcloud-cloud-controller-manager v1.35.0,
# internal/hcops/load_balancer.go, `Create`).
LOAD_BALANCER_TYPES = ("lb11", "lb21", "lb31")
DEFAULT_LOAD_BALANCER_TYPE = "lb11"
# Traefik's balancer, `<clusterName>-ingress` (raya.nodes.addons.ingress_balancer_name): no
# raya:loadBalancers entry may take its name.
INGRESS_BALANCER = "ingress"
# A raya:loadBalancers name: `<clusterName>-<name>` is the balancer's Hetzner name, an RFC 1123
# label (at most 63 characters) as the servers' names are, with a clusterName of up to 32.
_BALANCER_NAME = re.compile(r"[a-z](?:[a-z0-9-]{0,28}[a-z0-9])?")
# Hetzner's volume sizes, in GB.
VOLUME_SIZES = range(10, 10241)
_SERVER_TYPE = re.compile(r"([a-z]+)[0-9]+[a-z]*")
# Hetzner's server families and the architecture of each (`x86` or `arm`, as Hetzner names
# them in its images' `architecture`): shared vCPU Intel/AMD, AMD, Ampere, dedicated vCPU.
FAMILIES = {"cx": "x86", "cpx": "x86", "cax": "arm", "ccx": "x86"}
# The older generations CX*1 and CCX*1 name the private NIC ens10; the node configs are for
# enp7s0, the name on every current type (Hetzner's networks documentation).
_ENS10_TYPE = re.compile(r"c?cx[0-9]1")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_ZONE_NAME_MAX = 63
# An address Let's Encrypt can write to: a plain local part, one @, a dotted domain.
_EMAIL = re.compile(
    r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}"
)


@dataclass(frozen=True)
class BackupS3:
    """An existing S3-compatible bucket for the snapshots (`raya:backupS3`)."""

    endpoint: str  # host[:port], as k3s' etcd-s3-endpoint
    bucket: str
    region: str
    folder: str  # the cluster's folder in the bucket


@dataclass(frozen=True)
class LoadBalancer:
    """A load balancer raya makes for a LoadBalancer Service of the user's (`raya:loadBalancers`,
    the public mode): Hetzner's `<clusterName>-<name>`, which the Service's
    `load-balancer.hetzner.cloud/name` annotation hands to the cloud controller."""

    name: str
    type: str  # one of LOAD_BALANCER_TYPES
    location: str  # one of LOCATIONS


@dataclass(frozen=True)
class StackConfig:
    cluster_name: str
    location: str
    network_zone: str
    control_plane_server_type: str
    authorized_users: tuple[str, ...]
    managed_subdomain: str
    parent_zone: str  # absolute DNS name, trailing dot
    network_range: ipaddress.IPv4Network
    nodes_subnet: ipaddress.IPv4Network
    control_plane_ip: ipaddress.IPv4Address
    # Where Hetzner gives the cloud controller's load balancers their private address: a
    # subnet of its own beside nodesSubnet, so no balancer takes a node's planned address.
    load_balancer_subnet: ipaddress.IPv4Network
    control_plane_schedulable: bool  # False: the control plane is tainted NoSchedule
    ssh_sources: tuple[IPNetwork, ...]  # may reach 22/tcp through the Hetzner firewall
    api_sources: tuple[IPNetwork, ...]  # may reach 6443/tcp
    control_plane_volume_size: int  # GB
    acme_email: str  # the Let's Encrypt account's contact
    backup_schedule: str  # cron, as k3s' etcd-snapshot-schedule-cron
    backup_retention: int  # scheduled snapshots kept on each control plane, and in the bucket
    backup_s3: BackupS3 | None  # an existing bucket; None: the deployment makes one in GCS
    control_planes: int = 1  # k3s servers, each an etcd member: 1, 3 or 5
    recovery_kit: str | None = None  # where `raya up` writes the kit; None: the default
    # The kit this stack's server token, CA pairs and bucket come from (raya.cloud.kit).
    from_recovery_kit: str | None = None
    network: str = "private"  # one of NETWORK_MODES
    # The public mode's balancers for LoadBalancer Services besides Traefik's.
    load_balancers: tuple[LoadBalancer, ...] = ()

    @property
    def public(self) -> bool:
        """The nodes talk over their public addresses, with no Hetzner network (the large mode)."""
        return self.network == "public"

    @property
    def control_plane_ips(self) -> tuple[ipaddress.IPv4Address, ...]:
        """The control planes' private addresses: controlPlaneIp and the ones after it."""
        return tuple(self.control_plane_ip + k for k in range(self.control_planes))

    @property
    def balancer_ip(self) -> ipaddress.IPv4Address:
        """The private load balancer's address once there are several control planes; every
        server's certificate names it from the start, so growing changes no existing one."""
        return self.control_plane_ip + CONTROL_PLANE_BLOCK - 1

    @property
    def registration_ip(self) -> ipaddress.IPv4Address:
        """Where agents and joining servers register: the one control plane, or the private
        load balancer in front of several (k3s' "fixed registration address")."""
        return self.control_plane_ip if self.control_planes == 1 else self.balancer_ip

    @property
    def reserved_ips(self) -> tuple[ipaddress.IPv4Address, ...]:
        """What the control plane side holds in nodesSubnet: its servers' addresses and, with
        several, the whole block up to the load balancer's."""
        if self.control_planes == 1:
            return (self.control_plane_ip,)
        return tuple(self.control_plane_ip + k for k in range(CONTROL_PLANE_BLOCK))

    @property
    def zone_dns_name(self) -> str:
        """The managed zone's DNS name, e.g. `raya.example.com.`."""
        return f"{self.managed_subdomain}.{self.parent_zone}"

    @property
    def zone_name(self) -> str:
        """The managed zone's name in Cloud DNS (`zone_resource_name`)."""
        return zone_resource_name(self.zone_dns_name)

    @property
    def network_name(self) -> str:
        """The private network's name in Hetzner: the cloud controller finds it by this."""
        return self.cluster_name

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        """Hetzner's gateway is the first address of the network, not of the subnet."""
        return self.network_range.network_address + 1


def zone_resource_name(dns_name: str) -> str:
    """A Cloud DNS zone name (1-63 of a-z 0-9 -, a letter first) for `dns_name`:
    `raya.example.com.` becomes `raya-example-com`."""
    name = dns_name.rstrip(".").replace(".", "-")
    if not name[0].isalpha():
        name = f"z-{name}"
    if len(name) > _ZONE_NAME_MAX:
        digest = hashlib.sha256(dns_name.encode()).hexdigest()[:8]
        name = f"{name[: _ZONE_NAME_MAX - len(digest) - 1].rstrip('-')}-{digest}"
    return name


def server_type_problem(value: object) -> str | None:
    """What is wrong with `value` as the server type of a node, or None if nothing."""
    match = _SERVER_TYPE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return f"is {value!r}; accepted: a Hetzner server type such as cx23"
    if match[1] not in FAMILIES:
        return (
            f"is {value!r}, of no Hetzner server family; accepted: a type of "
            f"{', '.join(FAMILIES)} such as cx23 or cax21"
        )
    if _ENS10_TYPE.fullmatch(match[0]):
        return (
            f"is {value!r}, an older type whose private NIC is ens10; accepted: a current "
            "type (private NIC enp7s0) such as cx23"
        )
    return None


def architecture(server_type: str) -> str:
    """The architecture (`x86`, `arm`) of a server type `server_type_problem` accepts."""
    match = _SERVER_TYPE.fullmatch(server_type)
    assert match is not None, server_type
    return FAMILIES[match[1]]


def stack_file(root: Path, stack: str) -> Path:
    return root / f"Pulumi.{stack}.yaml"


def load_stack_config(path: Path) -> StackConfig:
    """Read and validate the `raya:` values of a Pulumi stack file."""
    try:
        document, texts = _read_stack(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: stack file not found; a new stack is made with `pulumi stack init` and "
            "its settings set with `pulumi config set` (docs/stacks.md)"
        ) from None
    except DuplicateKey as error:
        raise ConfigError(f"{path}: {error}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: not a YAML stack file: {error}") from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a top-level 'config:' mapping with raya: values")
    prefix = f"{NAMESPACE}:"
    values = {
        key.removeprefix(prefix): texts.get(key, value)
        for key, value in config.items()
        if str(key).startswith(prefix)
    }
    return parse_stack_config(values, str(path))


def _read_stack(text: str) -> tuple[Any, dict[str, str]]:
    """The stack file's document, and the text of each scalar directly under `config:`.

    Pulumi's CLI hands the program a top-level scalar as the text written in the file, not as
    YAML typed it (pulumi/pulumi, sdk/go/common/resource/config/value.go,
    `Value.unmarshalValue`: it decodes the node into a string first), and its SDK's getters
    read that text. Reading the same text here gives `20`, `"20"`, `true` and `"True"` the
    meaning Pulumi gives them, where PyYAML alone would read YAML 1.1 (`yes`, `0x14`, `010`).
    """
    loader = StrictLoader(text)  # a key written twice refused (raya.model.jsonfile)
    try:
        root = loader.get_single_node()
        document = loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()
    texts: dict[str, str] = {}
    config = _mapping_item(root, "config")
    for key, node in config.value if isinstance(config, yaml.MappingNode) else ():
        if not isinstance(key, yaml.ScalarNode):
            continue
        texts.pop(key.value, None)  # a later duplicate wins, as in the document
        if isinstance(node, yaml.ScalarNode) and node.tag != "tag:yaml.org,2002:null":
            texts[key.value] = node.value
    return document, texts


def _mapping_item(node: yaml.Node | None, name: str) -> yaml.Node | None:
    """The value of `name` in a mapping node; the last one, as the constructed document has."""
    if not isinstance(node, yaml.MappingNode):
        return None
    found = [v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == name]
    return found[-1] if found else None


# Pulumi hands the program every setting as text, and its Python SDK's typed getters read it
# (pulumi/pulumi, sdk/python/lib/pulumi/config.py): `Config._get_bool` takes "true", "True",
# "false" and "False"; `_get_int` Python's int() of the text; `_get_object` json.loads of it
# (a list or mapping is handed over as JSON). A stack file holds either that text
# (`pulumi config set raya:controlPlanes 3` stores "3"; JSON given on the command line stays
# text) or a YAML value (`--path` and `--type` store true, 3, lists and mappings; so does an
# editor): the readers below give both the same meaning.
_PULUMI_BOOLS = {"true": True, "True": True, "false": False, "False": False}


def _pulumi_bool(value: object) -> object:
    return _PULUMI_BOOLS.get(value, value) if isinstance(value, str) else value


def _pulumi_int(value: object) -> object:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value)
    return value


def _pulumi_object(value: object) -> object:
    if isinstance(value, str):
        with contextlib.suppress(ValueError, RecursionError):
            return json.loads(value)
    return value


def _is_encrypted(value: object) -> bool:
    """Whether `value` holds a `secure:` value anywhere, as Pulumi recognises one
    (pulumi/pulumi, sdk/go/common/resource/config/value.go, `isSecureValue`)."""
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get("secure"), str):
            return True
        return any(map(_is_encrypted, value.values()))
    return isinstance(value, list) and any(map(_is_encrypted, value))


def check_secret_settings(path: Path, *, autoscaled: bool = False) -> None:
    """The stack file at `path` holds the cluster's Hetzner token, encrypted (`secure:`), as
    `pulumi config set --secret` writes it: a deployment without it would give the cluster
    add-ons that crash-loop; and, with an `autoscaled` pool, the cluster autoscaler's, the
    same way. (The object storage keys are needed only with `backupS3`.)"""
    document = loads_yaml(path.read_text(encoding="utf-8"))  # read once already
    config = document.get("config") if isinstance(document, dict) else None
    _check_token(path, config, CLUSTER_HCLOUD_TOKEN, "of the cluster's own", required=True)
    # The autoscaler's is needed with an autoscaled pool only, but never in clear text.
    _check_token(
        path, config, AUTOSCALER_HCLOUD_TOKEN, "for the cluster autoscaler", required=autoscaled
    )


def _check_token(path: Path, config: object, key: str, whose: str, *, required: bool) -> None:
    value = config.get(f"{NAMESPACE}:{key}") if isinstance(config, dict) else None
    how = f"`pulumi config set --secret {NAMESPACE}:{key} <token>`"
    if value is None:
        if not required:
            return
        raise ConfigError(
            f"{path}: {NAMESPACE}:{key} is not set; accepted: a Hetzner Cloud API token "
            f"(read and write) {whose}, set with {how} (docs/config.md)"
        )
    if not (isinstance(value, dict) and isinstance(value.get("secure"), str)):
        raise ConfigError(
            f"{path}: {NAMESPACE}:{key} is in clear text; accepted: an encrypted value, "
            f"set with {how}"
        )


def parse_stack_config(values: Mapping[str, Any], source: str) -> StackConfig:
    """Validate the `raya:` values (keys without the namespace) of the stack named `source`."""

    def fail(key: str, problem: str) -> ConfigError:
        return ConfigError(f"{source}: {NAMESPACE}:{key} {problem}")

    check_keys(values, sorted((*KEYS, *SECRET_KEYS)), REQUIRED, fail, "a known setting")
    for key in sorted(set(values) - set(SECRET_KEYS)):
        if _is_encrypted(values[key]):
            # raya reads the model offline (`raya render`), without the stack's passphrase.
            raise fail(
                key,
                f"is encrypted (secure:); accepted: a plain value, set with `pulumi config set "
                f"{NAMESPACE}:{key} <value>` (the secret settings are {', '.join(SECRET_KEYS)})",
            )
        # A list or mapping `pulumi config set` stores as JSON text: a key written twice in it
        # is refused as in the stack file (its value is not shown: it may be a secret's).
        if isinstance(values[key], str):
            try:
                loads_json(values[key])
            except DuplicateKey as error:
                raise fail(key, f"is JSON text: {error}") from None
            except (ValueError, RecursionError):
                pass  # not JSON: text, read as such below
    merged = {**DEFAULTS, **values}

    def text(key: str, pattern: re.Pattern[str], accepted: str) -> str:
        value = merged[key]
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise fail(key, f"is {value!r}; accepted: {accepted}")
        return value

    cluster_name = text(
        "clusterName",
        _CLUSTER_NAME,
        "2-32 lowercase letters, digits or '-', a letter first, no '-' last (it prefixes the "
        "Hetzner server names, e.g. <clusterName>-control-plane)",
    )
    location = merged["location"]
    if not isinstance(location, str) or location not in LOCATIONS:
        raise fail("location", f"is {location!r}; accepted: {', '.join(LOCATIONS)}")
    network_zone = merged.get("networkZone", LOCATIONS[location])
    if network_zone != LOCATIONS[location]:
        raise fail(
            "networkZone",
            f"is {network_zone!r} but location {location} is in {LOCATIONS[location]!r}",
        )
    server_type = merged["controlPlaneServerType"]
    problem = server_type_problem(server_type)
    if problem:
        raise fail("controlPlaneServerType", problem)

    users = _pulumi_object(merged["authorizedUsers"])
    if not isinstance(users, list) or not users:
        raise fail(
            "authorizedUsers",
            f"is {merged['authorizedUsers']!r}; accepted: a non-empty list of GitHub handles "
            f"{_LIST_FORMS}",
        )
    seen: dict[str, str] = {}
    for user in users:
        if not isinstance(user, str) or not GITHUB_LOGIN.fullmatch(user):
            raise fail(
                "authorizedUsers",
                f"has {user!r}, not a GitHub login (1-39 letters, digits or single inner '-')",
            )
        if user.lower() in seen:  # GitHub logins are case-insensitive
            raise fail("authorizedUsers", f"lists {user!r} twice (also as {seen[user.lower()]!r})")
        seen[user.lower()] = user

    acme_email = text("acmeEmail", _EMAIL, "an e-mail address such as ops@example.org")
    subdomain = text("managedSubdomain", _DNS_LABEL, "one lowercase DNS label such as 'raya'")
    parent = merged["parentZone"]
    labels = parent.removesuffix(".").split(".") if isinstance(parent, str) else []
    if len(labels) < 2 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        raise fail(
            "parentZone", f"is {parent!r}; accepted: a lowercase DNS name such as example.com"
        )

    def network(key: str) -> ipaddress.IPv4Network:
        value = merged[key]
        # Only text with a prefix length: ipaddress takes an integer or a bare address too.
        if isinstance(value, str) and "/" in value:
            with contextlib.suppress(ValueError):
                return ipaddress.IPv4Network(value)
        raise fail(key, f"is {value!r}; accepted: an IPv4 CIDR such as 10.0.1.0/24")

    network_range = network("networkRange")
    if not network_range.subnet_of(PRIVATE_ROUTE):
        raise fail("networkRange", f"is {network_range}; it must lie inside {PRIVATE_ROUTE}")
    if network_range.prefixlen > NETWORK_PREFIX_MAX:
        raise fail(
            "networkRange",
            f"is {network_range}, smaller than Hetzner creates; accepted: a /{NETWORK_PREFIX_MAX} "
            "or larger (Hetzner's networks API: \"Minimum network size is /24\")",
        )
    subnet = network("nodesSubnet")
    if not subnet.subnet_of(network_range):
        raise fail("nodesSubnet", f"is {subnet}, outside networkRange {network_range}")
    # The subnet first: it is inside networkRange, and the narrower name says more.
    for key, addresses in (("nodesSubnet", subnet), ("networkRange", network_range)):
        for name, k3s_range in K3S_RANGES.items():
            if addresses.overlaps(k3s_range):
                raise fail(
                    key,
                    f"is {addresses}, which overlaps k3s' {name} {k3s_range}; accepted: a "
                    f"range inside {PRIVATE_ROUTE} that overlaps neither "
                    f"{' nor '.join(map(str, K3S_RANGES.values()))}",
                )
    balancers = _load_balancer_subnet(merged, network_range, subnet, network, fail)
    value = merged["controlPlaneIp"]
    try:
        cp_ip = ipaddress.IPv4Address(value if isinstance(value, str) else "")
    except ValueError:
        raise fail("controlPlaneIp", f"is {value!r}; accepted: an IPv4 address") from None
    gateway = network_range.network_address + 1
    if cp_ip not in subnet or cp_ip in (subnet.network_address, subnet.broadcast_address, gateway):
        raise fail(
            "controlPlaneIp",
            f"is {cp_ip}; accepted: a host address of nodesSubnet {subnet} "
            f"other than the gateway {gateway}",
        )

    schedulable = _pulumi_bool(merged["controlPlaneSchedulable"])
    if not isinstance(schedulable, bool):
        raise fail(
            "controlPlaneSchedulable",
            f"is {merged['controlPlaneSchedulable']!r}; accepted: true or false (also as the "
            "text 'true', 'True', 'false' or 'False')",
        )

    def sources(key: str) -> tuple[IPNetwork, ...]:
        value = _pulumi_object(merged[key])
        accepted = "a list of IPv4 or IPv6 CIDRs such as 203.0.113.0/24 or 2001:db8::/32"
        if not isinstance(value, list):
            raise fail(
                key,
                f"is {merged[key]!r}; accepted: {accepted} {_LIST_FORMS} (an empty list "
                "closes the port)",
            )
        found: list[IPNetwork] = []
        for item in value:
            # strict: host bits set (10.0.0.1/8) is a typo more often than a network.
            try:
                if not isinstance(item, str) or "/" not in item:
                    raise ValueError
                cidr = ipaddress.ip_network(item, strict=True)
            except ValueError:
                raise fail(
                    key, f"has {item!r}; accepted: {accepted}, without host bits"
                ) from None
            if cidr in found:
                raise fail(key, f"lists {cidr} twice")
            found.append(cidr)
        return tuple(found)

    def whole(key: str, accepted: range | tuple[int, ...], what: str) -> int:
        value = _pulumi_int(merged[key])
        if isinstance(value, bool) or not isinstance(value, int) or value not in accepted:
            raise fail(key, f"is {merged[key]!r}; accepted: {what}")
        return value

    size = whole(
        "controlPlaneVolumeSize",
        VOLUME_SIZES,
        f"a whole number of GB from {VOLUME_SIZES.start} to {VOLUME_SIZES.stop - 1}",
    )
    count = whole(
        "controlPlanes",
        CONTROL_PLANE_COUNTS,
        "1, 3 or 5 (every control plane is an etcd member, and etcd needs a majority of them "
        "up: 3 survive the loss of 1, 5 of 2, while an even count survives no more losses "
        "than the odd count below it)",
    )
    block = [cp_ip + k for k in range(CONTROL_PLANE_BLOCK if count > 1 else 1)]
    outside = [ip for ip in block if ip not in subnet or ip == subnet.broadcast_address]
    if outside:
        raise fail(
            "controlPlanes",
            f"is {count}, which needs {block[0]}-{block[-1]} (the control planes and their "
            f"private load balancer), but {outside[0]} is not a host address of nodesSubnet "
            f"{subnet}; accepted: a lower raya:controlPlaneIp or fewer control planes",
        )
    schedule = merged["backupSchedule"]
    try:
        Schedule(schedule if isinstance(schedule, str) else "").longest_gap()
    except CronError as error:
        raise fail("backupSchedule", f"{error} (k3s' etcd-snapshot-schedule-cron)") from None
    retention = whole(
        "backupRetention",
        BACKUP_RETENTION,
        f"a whole number of snapshots from {BACKUP_RETENTION.start} to "
        f"{BACKUP_RETENTION.stop - 1}",
    )
    # k3s prunes the bucket to this many scheduled snapshots across every control plane,
    # after each upload, and each run of the schedule uploads one per control plane: below
    # 2n - 1 a run's first uploads prune a control plane's only snapshot before its own.
    least = 2 * count - 1
    if retention < least:
        raise fail(
            "backupRetention",
            f"is {retention} with {count} control planes; accepted: at least {least} "
            f"(2 x {count} - 1): k3s keeps that many scheduled snapshots in the bucket for "
            "the whole cluster, pruning after each upload, and each run of the schedule "
            "uploads one per control plane, so fewer would leave a control plane without "
            "one while a run uploads (docs/backups.md)",
        )

    network_mode = merged["network"]
    if network_mode not in NETWORK_MODES:
        raise fail(
            "network",
            f"is {network_mode!r}; accepted: private (one Hetzner network, at most 100 nodes) "
            "or public (the nodes talk over their public addresses, WireGuard between them)",
        )

    service_balancers = _load_balancers(
        _pulumi_object(merged.get(LOAD_BALANCERS, [])), network_mode, location, fail
    )
    backup_s3 = _backup_s3(_pulumi_object(merged.get("backupS3")), cluster_name, fail)
    if backup_s3 is None:
        # The deployment makes the bucket in GCS, named after the cluster
        # (raya.cloud.snapshots.bucket_name: `<clusterName>-etcd-<digest>`).
        problem = bucket_problem(f"{cluster_name}-etcd", gcs=True)
        if problem:
            raise fail(
                "clusterName",
                f"is {cluster_name!r}, which names the snapshots' GCS bucket "
                f"({cluster_name}-etcd-...), {problem}; accepted: another name, or "
                f"{NAMESPACE}:backupS3",
            )

    return StackConfig(
        cluster_name=cluster_name,
        location=location,
        network_zone=network_zone,
        control_plane_server_type=server_type,
        authorized_users=tuple(users),
        managed_subdomain=subdomain,
        parent_zone=".".join(labels) + ".",
        network_range=network_range,
        nodes_subnet=subnet,
        control_plane_ip=cp_ip,
        load_balancer_subnet=balancers,
        control_plane_schedulable=schedulable,
        ssh_sources=sources("sshSources"),
        api_sources=sources("apiSources"),
        control_plane_volume_size=size,
        acme_email=acme_email,
        control_planes=count,
        backup_schedule=schedule,
        backup_retention=retention,
        backup_s3=backup_s3,
        recovery_kit=_kit_path(merged.get("recoveryKit"), "recoveryKit", fail),
        from_recovery_kit=_kit_path(merged.get("fromRecoveryKit"), "fromRecoveryKit", fail),
        network=network_mode,
        load_balancers=service_balancers,
    )


def _load_balancer_subnet(
    merged: Mapping[str, Any],
    network_range: ipaddress.IPv4Network,
    nodes: ipaddress.IPv4Network,
    network: Callable[[str], ipaddress.IPv4Network],
    fail: Callable[[str, str], ConfigError],
) -> ipaddress.IPv4Network:
    """raya:loadBalancerSubnet, by default the block of nodesSubnet's size right after it.

    Every address raya plans (control planes, registration balancer, agents, pools' blocks)
    lies inside nodesSubnet, so a subnet disjoint from it is disjoint from all of them; and
    Hetzner keeps a network's subnets apart (its API refuses an overlapping one)."""
    key = LOAD_BALANCER_SUBNET
    if key in merged:
        subnet = network(key)
        given = f"is {subnet}"
    else:
        subnet = ipaddress.IPv4Network((int(nodes.broadcast_address) + 1, nodes.prefixlen))
        given = f"is unset and defaults to {subnet} (the block of nodesSubnet's size after it)"
    accepted = (
        f"accepted: an IPv4 CIDR inside networkRange {network_range} disjoint from nodesSubnet "
        f"{nodes}, set with `pulumi config set {NAMESPACE}:{key} <cidr>`"
    )
    if not subnet.subnet_of(network_range):
        raise fail(key, f"{given}, outside networkRange {network_range}; {accepted}")
    if subnet.overlaps(nodes):
        raise fail(
            key,
            f"{given}, which overlaps nodesSubnet {nodes} (the nodes' and the registration "
            f"balancer's addresses); {accepted}",
        )
    return subnet


def _load_balancers(
    value: object, network_mode: str, location: str, fail: Callable[[str, str], ConfigError]
) -> tuple[LoadBalancer, ...]:
    """raya:loadBalancers: a list of mappings with a name, and optionally a type and a location."""
    key = LOAD_BALANCERS
    shape = (
        "a list of mappings, each with a name and optionally a type (default "
        f"{DEFAULT_LOAD_BALANCER_TYPE}) and a location (default raya:location) {_LIST_FORMS}"
    )
    if not isinstance(value, list):
        raise fail(key, f"is {value!r}; accepted: {shape}")
    if value and network_mode != "public":
        raise fail(
            key,
            f"is set and raya:network is {network_mode}: there the cloud controller's balancers "
            "reach the NodePorts over the cluster's network, which Hetzner's firewalls do not "
            "filter, so there is nothing to declare; accepted: no raya:loadBalancers, or "
            "raya:network: public in a new stack",
        )
    found: dict[str, LoadBalancer] = {}
    for item in value:
        if not isinstance(item, dict):
            raise fail(key, f"has {item!r}; accepted: {shape}")
        check_keys(
            item,
            ("name", "type", "location"),
            ("name",),
            lambda field, problem: fail(key, f"field {field!r} {problem}"),
            "a known field",
        )
        name = item["name"]
        if not isinstance(name, str) or not _BALANCER_NAME.fullmatch(name):
            raise fail(
                key,
                f"name is {name!r}; accepted: 1-30 lowercase letters, digits or '-', a letter "
                "first, no '-' last (the balancer is named <clusterName>-<name> in Hetzner)",
            )
        if name == INGRESS_BALANCER:
            raise fail(
                key,
                f"name is {name!r}, Traefik's balancer's, which raya makes already; accepted: "
                "another name",
            )
        if name in found:
            raise fail(key, f"lists {name!r} twice")
        kind = item.get("type", DEFAULT_LOAD_BALANCER_TYPE)
        if kind not in LOAD_BALANCER_TYPES:
            raise fail(
                key,
                f"{name}: type is {kind!r}; accepted: {', '.join(LOAD_BALANCER_TYPES)} "
                "(Hetzner's load balancer types)",
            )
        where = item.get("location", location)
        if not isinstance(where, str) or where not in LOCATIONS:
            raise fail(key, f"{name}: location is {where!r}; accepted: {', '.join(LOCATIONS)}")
        found[name] = LoadBalancer(name=name, type=kind, location=where)
    return tuple(found.values())


def bucket_problem(name: str, *, gcs: bool) -> str | None:
    """What S3 (and with `gcs`, Google Cloud Storage) refuses in the bucket name `name`, of
    valid characters and length, or None."""
    for pattern, problem in _BUCKET_RULES:
        if pattern.fullmatch(name):
            return problem
    if gcs and _GCS_RESERVED.fullmatch(name):
        return "which begins with 'goog' or holds 'google' or a misspelling of it (GCS refuses it)"
    return None


def _kit_path(value: object, key: str, fail: Callable[[str, str], ConfigError]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\0" in value or len(value) > 4096:
        raise fail(
            key,
            f"is {value!r}; accepted: a file path, relative to the project folder or absolute",
        )
    return value


def _backup_s3(
    value: object, cluster_name: str, fail: Callable[[str, str], ConfigError]
) -> BackupS3 | None:
    if value is None:
        return None
    shape = "a mapping with endpoint and bucket (region, folder optional)"
    if not isinstance(value, dict):
        raise fail("backupS3", f"is {value!r}; accepted: {shape} {_MAPPING_FORMS}")
    check_keys(
        value,
        ("endpoint", "bucket", "region", "folder"),
        ("endpoint", "bucket"),
        lambda key, problem: fail("backupS3", f"field {key!r} {problem}"),
        "a known field",
    )
    checks = {
        "endpoint": (_S3_ENDPOINT, "a host name or IPv4 address with an optional port "
                     "(1-65535), no scheme, such as fsn1.your-objectstorage.com"),
        "bucket": (_BUCKET, "an S3 bucket name: 3-63 of a-z 0-9 . -, a letter or digit at "
                   "both ends"),
        "region": (re.compile(r"[a-z0-9-]{1,32}"), "a region such as fsn1 or us-east-1"),
        "folder": (_FOLDER, "one path segment of letters, digits, . _ -"),
    }  # fmt: skip
    for key, (pattern, accepted) in checks.items():
        if key in value and not (isinstance(value[key], str) and pattern.fullmatch(value[key])):
            raise fail("backupS3", f"{key} is {value[key]!r}; accepted: {accepted}")
    endpoint = _S3_ENDPOINT.fullmatch(value["endpoint"])
    assert endpoint is not None  # checked above
    if len(endpoint["host"]) > 253 or int(endpoint["port"] or 443) not in _PORTS:
        raise fail(
            "backupS3",
            f"endpoint is {value['endpoint']!r}; accepted: {checks['endpoint'][1]}, the host "
            "at most 253 characters",
        )
    bucket = value["bucket"]
    gcs = endpoint["host"].lower() == GCS_ENDPOINT
    problem = bucket_problem(bucket, gcs=gcs)
    if problem:
        raise fail(
            "backupS3",
            f"bucket is {bucket!r}, {problem}; accepted: {checks['bucket'][1]}, "
            f"{_BUCKET_RULES_TEXT}" + (", not 'goog' first, no 'google' in it" if gcs else ""),
        )
    return BackupS3(
        endpoint=value["endpoint"],
        bucket=value["bucket"],
        # k3s' own default region (pkg/etcd/s3: defaultEtcdS3).
        region=value.get("region", "us-east-1"),
        folder=value.get("folder", cluster_name),
    )
