"""Node configs: the model and the cluster's identity in, each node's Ignition bytes out.

One code path for the offline `raya render` and the deployment: a node's template context
is built here (nowhere else), laid out by the Jinja Butane templates in `templates/` and
transpiled in strict mode. Pure and deterministic: the same inputs give the same bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2

from raya.butane import transpile
from raya.defaults import GITHUB_URL
from raya.errors import ButaneError, RenderError
from raya.model.config import CONTROL_PLANE_COUNTS, PRIVATE_ROUTE
from raya.model.fleet import (
    CONTROL_PLANE_LABEL,
    Cluster,
    Node,
    Pool,
    Role,
    node_password,
    server_name,
)
from raya.model.pins import ChartPins
from raya.nodes.addons import GCP_SECRETS, HCLOUD_SECRET, LOCAL_PATH_CLASS
from raya.nodes.addons import manifests as addon_manifests
from raya.nodes.github_keys import KEY_FIELDS
from raya.nodes.identity import (
    ClusterSecrets,
    agent_token,
    check_certificate_authority,
    check_hcloud_token,
    check_host_key,
    check_join_secret,
    check_server_secrets,
    check_service_account_key,
    load_ca_certificate,
    server_token,
)

# Hetzner's `user_data` limit.
IGNITION_LIMIT = 32 * 1024
TEMPLATES = Path(__file__).parent / "templates"

PRIVATE_INTERFACE = "enp7s0"
PRIVATE_MTU = 1450  # Hetzner's private networks
METADATA_ADDRESS = "169.254.169.254"  # Hetzner's metadata service: it serves user_data
METADATA_URL = f"http://{METADATA_ADDRESS}/hetzner/v1/metadata"
K3S_BINARY = "/usr/local/bin/k3s"  # /usr/local is /var/usrlocal on FCOS
K3S_BINARY_REAL = "/var/usrlocal/bin/k3s"
# k3s' SELinux policy: the pinned k3s-selinux RPM image/install.sh puts in the image, and the
# module it installs (policy/coreos/k3s-selinux.spec: %{_datadir}/selinux/packages/k3s.pp).
K3S_SELINUX_RPM = "/usr/local/share/raya/k3s-selinux.rpm"
K3S_SELINUX_MODULE = "/usr/share/selinux/packages/k3s.pp"
K3S_PORT = 6443
SSH_KEY_DIR = "/home/core/.ssh/authorized_keys.d"  # read by FCOS' ssh-key-dir
# Fedora's sshd-keygen@ generates a host key type only when its file is missing or empty:
# this one is the deployment's, the others (rsa, ecdsa) are left to the node and never trusted.
SSH_HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"
# The users' handles, one a line: the only part of a node's config that depends on the users
# (their keys are fetched at boot, so a key rotated on GitHub changes no config).
SSH_HANDLES_FILE = "/etc/raya/ssh-key-handles"
# The control plane's k3s state lives on its own volume, which outlives the VM.
K3S_SERVER_DIR = "/var/lib/rancher/k3s/server"
VOLUME_LABEL = "raya-k3s-server"
# Where the first control plane's datastore guard puts `server:` when it joins a peer, until its
# volume holds a datastore again; `raya restore` removes it too before k3s' reset.
JOIN_DROPIN = "/etc/rancher/k3s/config.yaml.d/40-raya-join.yaml"
# What Ignition writes for the volume goes here first: the volume may be attached long after.
K3S_SERVER_SEED = "/var/lib/raya/k3s-server-seed"
# k3s renews a certificate when it starts if it expires within its renewal window: 90 days
# up to the May 2025 releases, 120 days since (k3s-io/k3s#12232). Checking against 90 days
# restarts k3s only when either window holds, so that the restart always renews.
CERTIFICATE_RENEW_DAYS = 90
# Each node's daily certificate check has its own slot (the control plane first, then the
# agents by index), with a random delay shorter than the gap between slots.
CERTS_FIRST_SLOT_MINUTES = 3 * 60
CERTS_SLOT_MINUTES = 30
CERTS_RANDOM_DELAY = "15min"
# The Secret k3s reads its snapshots' S3 settings from (`etcd-s3-config-secret`), and its file
# among the auto-deploy manifests.
SNAPSHOT_SECRET = "raya-etcd-s3"
SNAPSHOT_SECRET_FILE = f"{SNAPSHOT_SECRET}.yaml"
MAX_CONTROL_PLANES = max(CONTROL_PLANE_COUNTS)
# The first agent's slot: an autoscaled pool's nodes check their certificates then.
AUTOSCALED_CERTS_SLOT = 1
# The annotation an autoscaled node publishes its SSH host key in, on its own Node object, with
# its kubelet's credentials: k3s writes them to this kubeconfig, a client certificate the
# supervisor issues to this node's name alone once its node password checks out (k3s-io/k3s,
# pkg/agent/config/config.go, `get`: `kubelet.kubeconfig`, `getNodeNamedHostFile`).
HOST_KEY_ANNOTATION = "raya.dev/ssh-host-key-ed25519"
KUBELET_KUBECONFIG = "/var/lib/rancher/k3s/agent/kubelet.kubeconfig"


@dataclass(frozen=True)
class RenderedNode:
    node: Node
    butane: str  # the rendered Butane YAML
    ignition: bytes  # the Ignition JSON, compact, deterministic


def render_node(
    cluster: Cluster,
    node: Node,
    secrets: ClusterSecrets,
    *,
    charts: ChartPins,
    volume_id: str | None = None,
) -> RenderedNode:
    """One node's config. An agent's depends only on the cluster config, that agent, the agent
    secret, the server CA certificate and its own host key; the control plane's also on the
    id of the volume holding its k3s state (required for it, ignored for an agent) and the
    chart pins of its add-ons."""
    if node not in cluster.nodes:
        raise RenderError(f"{node.name}: not a node of cluster {cluster.config.cluster_name}")
    _check_inputs((node,), secrets, volume_id)
    return _render(cluster, node, secrets, volume_id or "", charts)


@dataclass(frozen=True)
class RenderedPool:
    pool: Pool
    group: str  # the autoscaler's node group: `<clusterName>-<pool>`
    butane: str
    ignition: bytes  # every node of the pool boots this one config


def render_pool(cluster: Cluster, pool: Pool, secrets: ClusterSecrets) -> RenderedPool:
    """The one config of every node of autoscaled `pool` (the autoscaler's `cloudInit` for
    its node group): it depends only on the cluster config, the pool, the agent secret and
    the server CA certificate, never on a node."""
    if pool not in cluster.autoscaled:
        raise RenderError(
            f"{pool.name}: not an autoscaled pool of cluster {cluster.config.cluster_name}"
        )
    check_join_secret("agent_secret", secrets.agent_secret)
    load_ca_certificate("server_ca", secrets.server_ca.cert_pem)
    group = server_name(cluster.config.cluster_name, pool.name)
    butane, ignition = _transpile(group, "agent.bu.j2", _pool_context(cluster, pool, secrets))
    return RenderedPool(pool=pool, group=group, butane=butane, ignition=ignition)


def render_cluster(
    cluster: Cluster,
    secrets: ClusterSecrets,
    *,
    charts: ChartPins,
    volume_id: str | Mapping[str, str],
) -> tuple[RenderedNode, ...]:
    """Every node's config, control planes first, then the agents in fleet order.
    `volume_id`: each control plane's volume id by node name, or the one id of a cluster
    with one control plane."""
    ids = (
        {cluster.control_plane.name: volume_id} if isinstance(volume_id, str) else volume_id
    )
    for node in cluster.control_planes:
        _check_inputs((node,), secrets, ids.get(node.name))
    _check_inputs(cluster.agents, secrets, None)
    return tuple(
        _render(cluster, node, secrets, ids.get(node.name, ""), charts) for node in cluster.nodes
    )


def _check_inputs(nodes: Sequence[Node], secrets: ClusterSecrets, volume_id: str | None) -> None:
    if any(node.role == "control-plane" for node in nodes) and not (
        volume_id and volume_id.isdigit()
    ):
        name = next(node.name for node in nodes if node.role == "control-plane")
        raise RenderError(
            f"{name}: volume_id is {volume_id!r}; accepted: a Hetzner volume id (digits)"
        )
    for node in nodes:
        check_host_key(node.name, secrets.host_keys)
    if any(node.role == "control-plane" for node in nodes):
        check_server_secrets(secrets)
        check_certificate_authority("server_ca", secrets.server_ca)
        check_certificate_authority("client_ca", secrets.client_ca)
        for field in GCP_SECRETS:
            check_service_account_key(field, getattr(secrets, field))
        check_hcloud_token(secrets.hcloud_token)
    else:  # an agent never sees the control plane's private keys nor the server token
        check_join_secret("agent_secret", secrets.agent_secret)
        load_ca_certificate("server_ca", secrets.server_ca.cert_pem)


def part_digests(ignition: bytes) -> dict[str, str]:
    """Digests of the parts of a node's config a change can come from, for drift reports:
    `users` (the handles file) and `config` (everything else). Short: they are server labels."""
    config = json.loads(ignition)
    files = config.get("storage", {}).get("files", [])
    handles = [entry for entry in files if entry["path"] == SSH_HANDLES_FILE]
    config["storage"]["files"] = [entry for entry in files if entry["path"] != SSH_HANDLES_FILE]

    def digest(value: object) -> str:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    return {"users": digest(handles), "config": digest(config)}


def volume_device(volume_id: str) -> str:
    """Where a Hetzner volume appears on its server (Hetzner's docs, "volumes")."""
    return f"/dev/disk/by-id/scsi-0HC_Volume_{volume_id}"


def _context(
    cluster: Cluster, node: Node, secrets: ClusterSecrets, volume_id: str, charts: ChartPins
) -> dict[str, Any]:
    config = cluster.config
    shared = _shared(cluster, node.role)
    common: dict[str, Any] = {
        **shared,
        "node": node,
        "planned": True,
        "node_address": None,
        "host_key": {
            "path": SSH_HOST_KEY,
            "private": secrets.host_keys[node.name].private_openssh,
            "public": secrets.host_keys[node.name].public_openssh.strip() + "\n",
        },
        # Decided by the deployment for every node: k3s keeps its hash per node name in the
        # datastore, and refuses a node that comes back (a replaced VM) with another one.
        "node_password_file": "/etc/rancher/node/password",
        "node_password": node_password(secrets.agent_secret, node.name),
        "certs": {**shared["certs"], "on_calendar": _certs_slot(node)},
    }
    registration = _registration(cluster)
    if node.role == "control-plane":
        first = node == cluster.control_plane
        return {
            **common,
            "k3s": {
                "unit": "k3s.service",
                "description": "k3s server (control plane)",
                "command": "server",
                "restart_sec": "5s",
                "volume": True,
                "datastore": first,
            },
            # The first control plane's decision, before each start of k3s, when its volume
            # holds no datastore (or one k3s sets aside) between starting the cluster and
            # joining the one its peers run (raya-k3s-datastore.sh).
            # At every size the same (the peers are the control plane block's other
            # addresses, whatever the count), so growing never changes the first's config.
            "datastore": {
                "script": "/usr/local/bin/raya-k3s-datastore",
                "join": "/etc/rancher/k3s/raya-join.yaml",
                "dropin": JOIN_DROPIN,
                "peers": [
                    f"{CONTROL_PLANE_LABEL}{k}.{config.zone_dns_name.rstrip('.')}"
                    if config.public
                    else str(config.control_plane_ip + k)
                    for k in range(1, MAX_CONTROL_PLANES)
                ],
                "token": server_token(secrets.server_ca.cert_pem, secrets.join_secret),
            }
            if first
            else None,
            "agent_secret": secrets.agent_secret,
            "schedulable": config.control_plane_schedulable,
            # Every server runs embedded etcd: the first starts it (and converts a SQLite
            # datastore it finds), the others join through the registration address, with
            # the full server token so that they check the CA they are served. k3s ignores
            # both settings once its volume holds an etcd datastore.
            "cluster_init": first,
            "server_url": None if first else registration,
            "token": secrets.join_secret
            if first
            else server_token(secrets.server_ca.cert_pem, secrets.join_secret),
            # The API name (all control planes answer it), this server's own name, and the
            # registration balancer's address, which any of them may be behind (named from
            # the start: growing from one control plane changes nothing of the first's).
            "tls_san": list(
                dict.fromkeys(
                    [
                        cluster.dns_name(cluster.control_plane).rstrip("."),
                        cluster.dns_name(node).rstrip("."),
                        *([] if config.public else [str(config.balancer_ip)]),
                    ]
                )
            ),
            "volume": {
                "device": volume_device(volume_id),
                "label": VOLUME_LABEL,
                "path": K3S_SERVER_DIR,
                "script": "/usr/local/bin/raya-k3s-volume",
                "unit": "raya-k3s-volume.service",
                "mount_unit": _path_unit(K3S_SERVER_DIR, "mount"),
                "device_unit": _path_unit(volume_device(volume_id), "device"),
                "seed": K3S_SERVER_SEED,
                "seed_unit": "raya-k3s-seed.service",
            },
            "tls_dir": f"{K3S_SERVER_SEED}/tls",
            "cas": [
                {"name": name, "cert_pem": ca.cert_pem, "key_pem": ca.key_pem}
                for name, ca in (("server-ca", secrets.server_ca), ("client-ca", secrets.client_ca))
            ],
            "manifests_dir": f"{K3S_SERVER_SEED}/manifests",
            "snapshots": {
                "schedule": config.backup_schedule,
                "retention": config.backup_retention,
                "store": secrets.snapshot_store,
                "file": SNAPSHOT_SECRET_FILE,
                "secret": SNAPSHOT_SECRET,
            },
            "gcp_secrets": [
                {"file": file, "name": name, "key": getattr(secrets, field)}
                for field, (file, name) in GCP_SECRETS.items()
            ],
            "local_path": {
                "unit": "raya-local-path.service",
                "storage_class": LOCAL_PATH_CLASS,
                "retry": "10",
            },
            "hcloud_secret": {
                "file": HCLOUD_SECRET[0],
                "name": HCLOUD_SECRET[1],
                "token": secrets.hcloud_token,
                "network": None if config.public else config.network_name,
            },
            "addons": sorted(
                addon_manifests(
                    cluster, charts, secrets.external_dns_key, secrets.cert_manager_key
                ).items()
            ),
        }
    assert node.index is not None
    return {**common, **_agent(cluster, secrets)}


def _registration(cluster: Cluster) -> str:
    """Where joining nodes register: the registration address, or in the public mode the
    API's name, which holds every control plane's address (k3s' fixed registration address
    may be round-robin DNS: docs.k3s.io, "High Availability Embedded etcd"; Go's dialer tries
    each address in turn)."""
    config = cluster.config
    api_name = cluster.dns_name(cluster.control_plane).rstrip(".")
    return f"https://{api_name if config.public else config.registration_ip}:{K3S_PORT}"


def _agent(cluster: Cluster, secrets: ClusterSecrets) -> dict[str, Any]:
    """How an agent runs k3s and joins: the agent token only, which pins the server CA."""
    return {
        "k3s": {
            "unit": "k3s-agent.service",
            "description": "k3s agent",
            "command": "agent",
            "restart_sec": "10s",
            "volume": False,
            "datastore": False,
        },
        "server_url": _registration(cluster),
        "token": agent_token(secrets.server_ca.cert_pem, secrets.agent_secret),
    }


def _pool_context(cluster: Cluster, pool: Pool, secrets: ClusterSecrets) -> dict[str, Any]:
    """The one config of every node of autoscaled `pool`: nothing of a node's own. Its name is
    its server's (the autoscaler's choice) and its address the one Hetzner's DHCP gives it in
    the pool's subnet, both read at boot (`node_address`); its SSH host key is the node's own
    (sshd-keygen makes it at first boot) and its node password k3s' own (k3s writes one at
    the agent's first start when the file is missing): every node is new to the cluster under
    a name never used before, so no stored hash can refuse it."""
    shared = _shared(cluster, "agent")
    return {
        **shared,
        **_agent(cluster, secrets),
        "node": pool,
        "planned": False,
        "node_address": {
            "unit": "raya-node-address.service",
            "script": "/usr/local/bin/raya-node-address",
            "dropin": "/etc/rancher/k3s/config.yaml.d/50-node-address.yaml",
        },
        "host_key_publish": {
            "unit": "raya-host-key-publish.service",
            "script": "/usr/local/bin/raya-host-key-publish",
            "kubeconfig": KUBELET_KUBECONFIG,
            "public": SSH_HOST_KEY + ".pub",
            "annotation": HOST_KEY_ANNOTATION,
        },
        # Every node of the pool has the same config, so the same slot: the random delay
        # spreads them, and an agent restarting k3s touches no etcd member.
        "certs": {**shared["certs"], "on_calendar": _slot_calendar(AUTOSCALED_CERTS_SLOT)},
    }


def _shared(cluster: Cluster, role: Role) -> dict[str, Any]:
    """What the context of every node of `role` holds whoever it is: a planned node adds its
    identity (`_context`), an autoscaled pool's one config none (`_pool_context`)."""
    config = cluster.config
    return {
        # The public mode: no Hetzner network; k3s on the public address the metadata service
        # names (the server's primary IP), pod traffic in WireGuard between the nodes.
        "public": config.public,
        "ssh_keys": {
            "dir": SSH_KEY_DIR,
            "file": f"{SSH_KEY_DIR}/raya",
            "handles_file": SSH_HANDLES_FILE,
            "handles": config.authorized_users,
            "base_url": GITHUB_URL,
            "types": list(KEY_FIELDS),
            "script": "/usr/local/bin/raya-ssh-keys",
            "unit": "raya-ssh-keys.service",
            "timer": "raya-ssh-keys.timer",
            "every": "15min",
        },
        "network": {
            "interface": PRIVATE_INTERFACE,
            "keyfile": f"/etc/NetworkManager/system-connections/{PRIVATE_INTERFACE}.nmconnection",
            "mtu": PRIVATE_MTU,
            "wait_unit": "raya-private-network.service",
            "gateway": config.gateway,
            "route": PRIVATE_ROUTE,
        },
        "node_metadata": {
            "unit": "raya-node-metadata.service",
            "script": "/usr/local/bin/raya-node-metadata",
            "url": METADATA_URL,
            "dropin": "/etc/rancher/k3s/config.yaml.d/50-node-metadata.yaml",
        },
        "metadata_guard": {
            "unit": "raya-metadata-guard.service",
            "rules": "/etc/nftables/raya-metadata-guard.nft",
            "table": "raya_metadata_guard",
            "address": METADATA_ADDRESS,
        },
        # Zincati's documented place for a drop-in overriding its defaults.
        "zincati_dropin": "/etc/zincati/config.d/90-raya-disable-auto-updates.toml",
        "k3s_binary": K3S_BINARY,
        "k3s_binary_real": K3S_BINARY_REAL,
        "selinux": {
            "rpm": K3S_SELINUX_RPM,
            "module": K3S_SELINUX_MODULE,
            # libselinux's local equivalences (file_contexts.subs): the policy's rules for
            # /usr/local (k3s-selinux: /usr/local/s?bin/k3s) label FCOS' real /var/usrlocal.
            "subs": "/etc/selinux/targeted/contexts/files/file_contexts.subs",
        },
        "k3s_config": "/etc/rancher/k3s/config.yaml",
        "k3s_dropin_dir": "/etc/rancher/k3s/config.yaml.d",
        "certs": {
            "unit": "raya-k3s-certs.service",
            "timer": "raya-k3s-certs.timer",
            "script": "/usr/local/bin/raya-k3s-certs",
            "days": CERTIFICATE_RENEW_DAYS,
            # What k3s serves from the certificates it renews at start: the kubelet on every
            # node, the API server (127.0.0.1 only) on a server.
            "urls": (["https://127.0.0.1:6444"] if role == "control-plane" else [])
            + ["https://127.0.0.1:10250"],
            "random_delay": CERTS_RANDOM_DELAY,
            # k3s' etcd client URL and client certificate (k3s `pkg/daemons/control/deps`:
            # tls/etcd/client.crt, signed by tls/etcd/server-ca.crt), for the quorum check.
            "etcd": (
                {"endpoint": "https://127.0.0.1:2379", "tls": f"{K3S_SERVER_DIR}/tls/etcd"}
                if role == "control-plane"
                else None
            ),
        },
    }


def _certs_slot(node: Node) -> str:
    """When `node` checks k3s' certificates each day (UTC): its own slot of the day. Agents
    from the first slot on, one after the other; control plane k (0 for the first) k slots
    before the first: no two control planes restart k3s in the same slot (the random delay
    is shorter than a slot), so at most one etcd member is away at a time."""
    if node.index is not None:
        slot = node.index + 1
    else:
        tail = node.name.rsplit("-", 1)[-1]
        slot = -int(tail) if tail.isdigit() else 0
    return _slot_calendar(slot)


def _slot_calendar(slot: int) -> str:
    """The systemd calendar time of certificate-check slot `slot` (0: the first control
    plane's), each day, UTC."""
    minutes = (CERTS_FIRST_SLOT_MINUTES + slot * CERTS_SLOT_MINUTES) % (24 * 60)
    return f"*-*-* {minutes // 60:02d}:{minutes % 60:02d}:00 UTC"


def _path_unit(path: str, kind: str) -> str:
    """The name systemd gives the `kind` unit of `path` (systemd-escape --path)."""
    return path.strip("/").replace("-", "\\x2d").replace("/", "-") + "." + kind


def _render(
    cluster: Cluster, node: Node, secrets: ClusterSecrets, volume_id: str, charts: ChartPins
) -> RenderedNode:
    context = _context(cluster, node, secrets, volume_id, charts)
    butane, ignition = _transpile(node.name, f"{node.role}.bu.j2", context)
    return RenderedNode(node=node, butane=butane, ignition=ignition)


def _transpile(name: str, template_name: str, context: Mapping[str, Any]) -> tuple[str, bytes]:
    """Config `name`'s Butane from `template_name` and its Ignition, within Hetzner's limit."""
    try:
        butane = _environment().get_template(template_name).render(context)
    except jinja2.TemplateError as error:
        where = getattr(error, "lineno", None)
        raise RenderError(
            f"{TEMPLATES / template_name}{f':{where}' if where else ''}: {name}: {error}"
        ) from None
    try:
        ignition = transpile(butane, strict=True, source=f"{name}.bu").encode()
    except ButaneError as error:
        raise RenderError(f"{name}: the rendered Butane was rejected: {error}") from None
    if len(ignition) > IGNITION_LIMIT:
        raise RenderError(
            f"{name}: Ignition config is {len(ignition)} bytes, over Hetzner's user_data "
            f"limit of {IGNITION_LIMIT}; largest parts: {', '.join(_largest_parts(ignition))}"
        )
    return butane, ignition


def _largest_parts(ignition: bytes, count: int = 4) -> list[str]:
    """What takes the most room: files grouped by folder (the manifests together weigh more
    than any one file), then units and users, as 'what (N bytes)'."""
    config = json.loads(ignition)
    sizes: dict[str, list[int]] = {}
    for kind, entries in (
        ("file", config.get("storage", {}).get("files", [])),
        ("unit", config.get("systemd", {}).get("units", [])),
        ("user", config.get("passwd", {}).get("users", [])),
    ):
        for entry in entries:
            group = f"{entry['path'].rsplit('/', 1)[0]}/*" if kind == "file" else f"{kind}s"
            sizes.setdefault(group, []).append(len(json.dumps(entry, separators=(",", ":"))))
    ranked = sorted(sizes.items(), key=lambda item: (-sum(item[1]), item[0]))[:count]
    return [f"{group} ({len(each)} entries, {sum(each):,} bytes)" for group, each in ranked]


@functools.cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        # The templates ship with raya: compiled once per process, never checked for changes
        # (each include would otherwise stat its file, for every node).
        auto_reload=False,
        # ...and all of them kept in a plain dict: a bounded cache is an LRU list that each
        # of a node's twenty includes would reorder under a lock.
        cache_size=-1,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(q=yaml_quoted, literal=yaml_literal)
    environment.globals["m"] = _ENTRIES
    return environment


# Characters a YAML double-quoted scalar must carry escaped: quote, backslash, C0/C1 controls,
# DEL, and what YAML 1.1 readers take for line breaks or a byte order mark.
_YAML_ESCAPES = {
    code: f"\\u{code:04x}"
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, 0xFEFF)
}
_YAML_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\"})


# What a literal block cannot carry as is: controls but tab and newline, and characters
# YAML readers take for line breaks or a byte order mark.
_NOT_LITERAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


def yaml_quoted(value: object) -> str:
    """`value` as a YAML double-quoted scalar that reads back exactly."""
    return '"' + str(value).translate(_YAML_ESCAPES) + '"'


# Pure, and called for every file and unit of every node: most are the same on every node.
@functools.lru_cache(maxsize=1024)
def yaml_literal(text: str, indent: int) -> str:
    """`text` as a YAML literal block scalar indented by `indent`, reading back exactly.

    Text a literal block cannot carry faithfully (leading blanks on its first line,
    whitespace-only lines, control characters) falls back to a quoted scalar.
    """
    body = text[:-1] if text.endswith("\n") else text
    lines = body.split("\n")
    filled = [line for line in lines if line]
    if (
        not filled
        or filled[0][0] in " \t"  # would read as indentation
        or any(line.isspace() for line in lines)
        or _NOT_LITERAL.search(body)
    ):
        return yaml_quoted(text)
    chomp = "-" if not text.endswith("\n") else "+" if text.endswith("\n\n") else ""
    pad = " " * indent
    return f"|{chomp}\n" + "\n".join(pad + line if line else "" for line in lines)


# The Butane list entries the node templates lay out with `m.file(...)` and the like, each
# without its final newline. Plain functions, not Jinja macros: each node's config lays out
# about 25 entries, and a macro call (argument binding, a context of its own) made about a
# quarter of the templates' render time for a 200-agent fleet.


def _file(path: str, mode: str, contents: str, overwrite: bool = False) -> str:
    return (
        f"    - path: {path}\n      mode: {mode}\n"
        + ("      overwrite: true\n" if overwrite else "")
        + f"      contents:\n        inline: {yaml_literal(contents, 10)}"
    )


def _directory(path: str, mode: str, owner: str | None = None) -> str:
    owned = f"      user: {{name: {owner}}}\n      group: {{name: {owner}}}\n" if owner else ""
    return f"    - path: {path}\n{owned}      mode: {mode}"


def _unit(name: str, contents: str, enabled: bool) -> str:
    return (
        f"    - name: {name}\n      enabled: {'true' if enabled else 'false'}\n"
        f"      contents: {yaml_literal(contents, 8)}"
    )


def _dropin(unit: str, name: str, contents: str) -> str:
    return (
        f"    - name: {yaml_quoted(unit)}\n      dropins:\n        - name: {name}\n"
        f"          contents: {yaml_literal(contents, 12)}"
    )


_ENTRIES = SimpleNamespace(file=_file, directory=_directory, unit=_unit, dropin=_dropin)
