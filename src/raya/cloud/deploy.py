"""`raya preview | up | destroy`: the Pulumi program driven through the Automation API.

A local workspace on the project folder runs `src/raya/cloud/program/` exactly as `pulumi up` in
the repository would, with the project's backend (local by default, `PULUMI_BACKEND_URL` for
a shared one). Progress streams through `on_output`, which only ever receives the CLI's own
display, where secrets show as `[secret]`.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import requests
import yaml
from hcloud import APIException, HCloudException
from pulumi import automation as auto

from raya.cloud import catalogue
from raya.cloud import kit as recovery
from raya.cloud.image import find_snapshots, hcloud_client
from raya.cloud.program import REPLACE_ENV, drift
from raya.cloud.program.cluster import CLUSTER_LABEL
from raya.defaults import HCLOUD_API_URL
from raya.errors import DeployError, RayaError
from raya.model.config import DEFAULTS, check_secret_settings, stack_file
from raya.model.fleet import (
    CONTROL_PLANE_NAME,
    Cluster,
    Node,
    fleet_file,
    load_fleet,
    server_name,
    sold_problem,
)
from raya.model.jsonfile import DuplicateKey, loads_yaml
from raya.model.pins import load_chart_pins, load_pins, snapshot_labels
from raya.model.progress import elapsed, progress
from raya.model.project import load_cluster
from raya.nodes.autoscaler import NODE_GROUP_LABEL, node_group
from raya.nodes.identity import generate_example_secrets
from raya.nodes.render import part_digests, render_cluster

Action = Literal["preview", "up", "destroy"]
OnOutput = Callable[[str], None]
INSTALL_TIMEOUT = 60.0  # seconds without an answer from get.pulumi.com
INSTALL_RETRY_AFTER = 600.0  # seconds a failed download of the CLI is not tried again
SHUTDOWN_TIMEOUT = 180.0  # seconds for a server to be off after an ACPI shutdown
SHUTDOWN_POLL = 2.0  # seconds between two lists of servers being shut down or deleted
# Seconds for Hetzner to finish deleting the cluster autoscaler's servers (a destroy).
DELETE_TIMEOUT = 300.0
INSTALL_HINT = (
    "install it with `curl -fsSL https://get.pulumi.com | sh` "
    "(see https://www.pulumi.com/docs/install/) and retry"
)


SERVER_TYPE = "hcloud:index/server:Server"
VOLUME_TYPE = "hcloud:index/volume:Volume"
PRIMARY_IP_TYPE = "hcloud:index/primaryIp:PrimaryIp"
# What an unattended `raya up` must never replace nor delete (by resource type and name): the
# control plane and its volume hold the cluster's state, the network and zone everything
# else's addresses and names.
PROTECTED = {
    (SERVER_TYPE, "control-plane"): "the control plane",
    ("hcloud:index/volume:Volume", "control-plane-state"): "the control plane's volume",
    (PRIMARY_IP_TYPE, "control-plane-ipv4"): "the control plane's address (public mode)",
    ("hcloud:index/network:Network", "network"): "the network",
    ("hcloud:index/networkSubnet:NetworkSubnet", "nodes"): "the network's subnet",
    ("gcp:dns/managedZone:ManagedZone", "primary"): "the DNS zone",
}
# Engine operations that end the life of an existing resource.
DESTRUCTIVE = frozenset(
    {
        auto.OpType.DELETE,
        auto.OpType.REPLACE,
        auto.OpType.CREATE_REPLACEMENT,
        auto.OpType.DELETE_REPLACED,
        auto.OpType.DISCARD,
        auto.OpType.DISCARD_REPLACED,
    }
)


@dataclass(frozen=True)
class Result:
    changes: dict[str, int]  # operation ("create", "same", ...) -> resources
    outputs: dict[str, str]  # stack outputs as printable text, secrets as "[secret]"
    # Per node, the parts it runs that differ from what the inputs render (users, image,
    # config); the program reports them, and nothing is replaced for them.
    drift: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Nodes whose servers the update deletes: in the stack's state, no longer in the inputs.
    leaving: tuple[str, ...] = ()
    # An update's `recoveryKit` output (raya.cloud.kit's document): secrets, never shown.
    recovery_kit: dict[str, Any] | None = field(default=None, repr=False)
    # A preview without secrets only: nodes the inputs declare that have no server in the
    # state yet (`up` creates them).
    arriving: tuple[str, ...] = ()
    # A destroy: the servers of the cluster autoscaler it deleted first, by name.
    autoscaled: tuple[str, ...] = ()


class Removal(Protocol):
    """What an update that deletes nodes does around Pulumi (raya.operate.remove): `before`
    drains them and removes their etcd members, and `confirm`, right before Pulumi runs,
    reads the members again; either raises to stop the update with nothing deleted; `after`
    deletes their node objects once their servers are gone."""

    def before(self, leaving: Sequence[str], kubeconfig: str | None) -> None: ...

    def confirm(self, leaving: Sequence[str]) -> None: ...

    def after(self, leaving: Sequence[str]) -> None: ...


def pulumi_command(now: Callable[[], float] = time.time) -> auto.PulumiCommand:
    """The Pulumi CLI on PATH; else the one matching this SDK under ~/.pulumi/versions,
    downloaded there first if it is not (which needs https://get.pulumi.com).

    A failed download is remembered (`install_stamp`) for `INSTALL_RETRY_AFTER` seconds of
    `now`: within them raya says so at once, instead of every command waiting on a network
    that just failed; a later successful install forgets it."""
    previous = socket.getdefaulttimeout()
    # The SDK's download sets no timeout: without one, a filtered network hangs forever.
    socket.setdefaulttimeout(INSTALL_TIMEOUT)
    stamp = install_stamp()
    try:
        if shutil.which("pulumi"):
            return auto.PulumiCommand()
        _check_no_recent_failure(stamp, now())
        command = auto.PulumiCommand.install()
    except DeployError:
        raise
    except Exception as error:  # download, install script, version check: all mean the same
        if not shutil.which("pulumi"):
            _remember_failure(stamp, now(), str(error))
        raise DeployError(
            f"the Pulumi CLI is missing or unusable and could not be installed ({error}); "
            + INSTALL_HINT
        ) from None
    finally:
        socket.setdefaulttimeout(previous)
    stamp.unlink(missing_ok=True)
    return command


def install_stamp() -> Path:
    """Where a failed download of the Pulumi CLI is remembered: the user's cache, as the
    CLI it stands for is the user's (~/.pulumi), whichever project asked for it."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "raya" / "pulumi-install-failed.json"


def _check_no_recent_failure(stamp: Path, now: float) -> None:
    try:
        failed = json.loads(stamp.read_text(encoding="utf-8"))
        at, why = float(failed["at"]), str(failed["error"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # none, or not one raya wrote: try the download
    if 0 <= now - at < INSTALL_RETRY_AFTER:
        raise DeployError(
            f"the Pulumi CLI is missing, and downloading it failed {now - at:.0f} s ago "
            f"({why}); raya tries again {INSTALL_RETRY_AFTER - (now - at):.0f} s from now "
            f"(or at once if {stamp} is deleted): " + INSTALL_HINT
        )


def _remember_failure(stamp: Path, now: float, error: str) -> None:
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps({"at": now, "error": error}), encoding="utf-8")
    except OSError:
        pass  # not remembered: the next command tries the download again, no worse than that


def open_stack(root: Path, name: str, create: bool) -> auto.Stack:
    """Stack `name` of the project at `root`, created in the backend if `create`."""
    opts = auto.LocalWorkspaceOptions(work_dir=str(root), pulumi_command=pulumi_command())
    try:
        if create:
            return auto.create_or_select_stack(name, work_dir=str(root), opts=opts)
        return auto.select_stack(name, work_dir=str(root), opts=opts)
    except auto.StackNotFoundError:
        raise DeployError(
            f"stack {name} does not exist in the Pulumi backend: nothing deployed yet (`raya "
            f"up --stack {name}` deploys it), or another backend than the one it is in "
            "(`pulumi whoami --verbose` names this one)"
        ) from None
    except auto.CommandError as error:
        raise DeployError(f"could not open stack {name}: {_last_line(error)}") from None


def run(
    action: Action,
    root: Path,
    stack_name: str,
    on_output: OnOutput,
    *,
    replace: Sequence[str] = (),
    no_destroy_protected: bool = False,
    delete_backups: bool = False,
    removal: Removal | None = None,
    targeted: bool = False,
    on_progress: OnOutput | None = None,
    now: Callable[[], float] = time.monotonic,
) -> Result:
    """Run `action` on the stack. Before a preview or an update, the stack file (its secret
    settings present, the recovery kit it is built from), fleet and pins are validated, so
    bad input fails here, in one line, before Pulumi starts; a destroy does not run the
    program, and must work whatever state those files are in.

    `replace` names nodes (`control-plane`, `agent-<i>`) to re-create with what the current
    inputs render (their drift), for a preview or an update: the program lifts its
    ignore_changes for them and the engine is asked to replace their servers (unprotected
    first when updating). No other server is ever replaced. `targeted` (an update with
    `replace`): the engine updates only their servers and what depends on them (`pulumi up
    --target URN... --target-dependents`; every other resource keeps its state, unread by
    any provider: pulumi/pulumi `pkg/resource/deploy/step_generator.go`,
    `isTargetedForUpdate`), as `raya roll` replaces a batch without a run over the whole
    stack.

    `no_destroy_protected` (an update only): preview first, and fail without changing
    anything if the preview replaces or deletes any of `PROTECTED` not named in `replace`.
    A destroy unprotects every resource first: it is asked for, and confirmed by the CLI.
    It leaves what the program retains on delete (the backups' bucket and its snapshots)
    unless `delete_backups`. Before the engine runs, it deletes the servers the cluster
    autoscaler made (`delete_autoscaled`, `Result.autoscaled`): no Pulumi resource, they
    hold the cluster's firewall, which Hetzner refuses to delete while applied to one.

    An update is refused, nothing changed, while servers of a node group that no autoscaled
    pool of the inputs has anymore exist (`orphaned_groups`): nothing would delete them.

    Nodes in the stack's state that the inputs no longer declare (a pool shrunk or gone,
    fewer control planes) are `Result.leaving`. An update deletes them only through
    `removal`: its `before` runs once everything else is checked and before Pulumi, and
    stops the update by raising; their servers (and a control plane's volume) are then
    unprotected for the engine to delete, and `after` runs once the update is done. An
    update that would delete nodes without a `removal` is refused.

    `on_progress` (an update): a line each time the engine is done with a server step
    (`ServerSteps`), then a summary, timed by `now`.
    """
    if replace and action == "destroy":
        raise DeployError("replace: a destroy replaces nothing")
    if targeted and not (replace and action == "up"):
        raise DeployError("targeted: only an update replacing nodes is targeted")
    urns: list[str] = []
    if action != "destroy":
        cluster = _checked_first(root, stack_name)
        urns = [_server_urn(root, stack_name, name) for name in _nodes(cluster, replace)]
        planes = [n.name for n in cluster.control_planes if n.name in replace]
        if len(planes) > 1:
            raise DeployError(
                f"replace: {', '.join(planes)} are control planes; replacing them together "
                "could leave etcd without a quorum: replace one at a time (`raya roll`, "
                "which waits until each is back as a voting member), nothing changed"
            )
    # Destroying a stack that was never deployed is a mistake, not a reason to create one.
    stack = open_stack(root, stack_name, action != "destroy")
    leaving: tuple[str, ...] = ()
    servers: list[str] = []
    if action != "destroy":
        check_sold(root, stack_name, cluster, stack, on_output, replace)
        if action == "up":
            check_no_orphans(root, stack_name, cluster, stack)
        try:  # decrypts: without the passphrase, the first place the CLI says so
            state = stack.export_stack()
        except auto.CommandError as error:
            why = _last_line(error)
            if action == "preview" and "PULUMI_CONFIG_PASSPHRASE" in why:
                why += "; without it, `raya preview --without-secrets` decrypts nothing"
            raise DeployError(f"pulumi {action} of stack {stack_name} failed: {why}") from None
        resources = (state.deployment or {}).get("resources", [])
        leaving = _leaving(resources, cluster)
        servers = [
            str(r["urn"]).rsplit("::", 1)[-1] for r in resources if r.get("type") == SERVER_TYPE
        ]
        if leaving and action == "up" and removal is None:
            raise DeployError(
                f"this update would delete {', '.join(leaving)}, which the inputs no longer "
                "declare, undrained: run `raya up`, which drains them first"
            )
    if replace:
        # The program reads which nodes to render without ignore_changes from there.
        stack.workspace.env_vars = {**stack.workspace.env_vars, REPLACE_ENV: ",".join(replace)}
    found: dict[str, tuple[str, ...]] = {}
    # The CLI's own display, where secrets read `[secret]`; plain text, raya prints it.
    options: dict[str, Any] = {
        "on_output": on_output,
        "on_error": on_output,
        "on_event": _drift_collector(found),
        "color": "never",
    }
    if urns:
        options["replace"] = urns
    if targeted:
        options["target"] = urns
        options["target_dependents"] = True
    # A leaving control plane's server and volume are protected in the state until `up` lifts
    # it, and the engine refuses to delete a protected resource in a preview too
    # (pulumi/pulumi `pkg/resource/deploy/step.go`, `DeleteStep.Apply`): previews leave them
    # out (`Result.leaving` tells), and what hangs on them.
    # In the public mode its primary IP too (raya.cloud.program.network). Nothing leaves in
    # a destroy, which reads no cluster.
    held = [(SERVER_TYPE, ""), (VOLUME_TYPE, "-state")]
    if leaving and cluster.config.public:
        held.append((PRIMARY_IP_TYPE, "-ipv4"))
    protected = sorted(
        _urn(root, stack_name, kind, f"{node}{suffix}")
        for node in leaving
        if node.startswith(f"{CONTROL_PLANE_NAME}-")
        for kind, suffix in held
    )
    previewed = (
        {**options, "exclude": protected, "exclude_dependents": True} if protected else options
    )
    try:
        if action == "preview":
            preview = stack.preview(**previewed)
            return Result(
                _counts(preview.change_summary), {}, dict(sorted(found.items())), leaving
            )
        if action == "up":
            if no_destroy_protected:
                _guard(stack, stack_name, {**previewed, "on_event": None}, set(replace))
            if removal is not None and leaving:
                kubeconfig = stack.outputs().get("kubeconfig")
                removal.before(
                    leaving, kubeconfig.value if kubeconfig is not None else None
                )
                removal.confirm(leaving)
            # Off before the engine deletes them (which, for a server still running after
            # about 31 s, the provider does anyway): once off, no removed member comes back.
            going = [*dict.fromkeys(replace), *leaving]
            if going:
                shut_down(_client(root, stack_name, stack), cluster.config.cluster_name, going)
            if urns or protected:
                _unprotect(stack, set(urns) | set(protected))
            # A targeted run creates nothing beyond the replacements.
            arriving = [] if targeted else [n.name for n in cluster.nodes if n.name not in servers]
            steps = ServerSteps(arriving, list(dict.fromkeys(replace)), leaving, now)
            up = stack.up(**{**options, "on_event": steps.collector(options["on_event"],
                                                                    on_progress)})  # fmt: skip
            if on_progress is not None:
                on_progress(steps.summary())
            if removal is not None and leaving:
                removal.after(leaving)
            kit = up.outputs.get("recoveryKit")
            return Result(
                _counts(up.summary.resource_changes),
                _printable(up.outputs),
                dict(sorted(found.items())),
                leaving,
                recovery_kit=kit.value if kit is not None else None,
            )
        autoscaled = delete_autoscaled(root, stack_name, stack)
        _unprotect(stack, None, release_retained=delete_backups)
        destroy = stack.destroy(on_output=on_output, on_error=on_output, color="never")
        return Result(
            changes=_counts(destroy.summary.resource_changes), outputs={}, autoscaled=autoscaled
        )
    except auto.CommandError as error:
        raise DeployError(
            f"pulumi {action} of stack {stack_name} failed: {_last_line(error)}"
        ) from None


def _checked_first(root: Path, stack_name: str) -> Cluster:
    """The cluster, once the stack file (its secret settings present, the recovery kit it is
    built from), fleet and pins are found valid. When they are not, the Pulumi CLI is
    looked for first: the fix of a stack value (`pulumi config set`) needs it, so a missing
    CLI is the first thing to say."""
    try:
        cluster = load_cluster(root, stack_name)
        check_secret_settings(stack_file(root, stack_name), autoscaled=bool(cluster.autoscaled))
        source = cluster.config.from_recovery_kit
        if source:  # the program reads it too; a kit of another cluster fails here first
            recovery.load(recovery.resolve(root, source), cluster.config)
        load_pins(root)
        load_chart_pins(root)
    except RayaError:
        pulumi_command()
        raise
    return cluster


def preview_without_secrets(root: Path, stack_name: str, on_output: OnOutput) -> Result:
    """What a job holding no secret of the stack can preview (a pull request's: the
    passphrase is the deploy job's alone, docs/security.md): each node's drift in the parts
    no secret enters (`users`, `image`), the nodes `up` would create, and those it would
    remove (`Result.leaving`). Nothing is decrypted, so no Pulumi preview runs: the CLI
    decrypts the whole state before the engine starts (pulumi/pulumi
    `pkg/resource/stack/deployment.go`, `DeserializeDeploymentV3`) and refuses to start
    without the passphrase (`pkg/secrets/passphrase/manager.go`, `readPassphrase`); nor can
    the `config` part be compared, the digest of an Ignition holding the cluster's keys and
    tokens. What is read: the inputs (validated as for a preview), the state with its secrets
    sealed (`export_sealed`), and Hetzner's API with `HCLOUD_TOKEN` (a Read token suffices):
    where each server type is sold, and the pins' snapshot."""
    token = os.environ.get("HCLOUD_TOKEN")
    if not token:
        raise DeployError(
            "a preview without secrets reads Hetzner's API with HCLOUD_TOKEN (a token with "
            "Read permission suffices), which is not set; it does not decrypt the stack's "
            "hcloud:token"
        )
    cluster = _checked_first(root, stack_name)
    stack = open_stack(root, stack_name, create=False)
    check_sold(root, stack_name, cluster, stack, on_output)
    resources = export_sealed(stack)
    servers = {
        str(resource["urn"]).rsplit("::", 1)[-1]: resource.get("outputs") or {}
        for resource in resources
        if resource.get("type") == SERVER_TYPE
    }
    endpoint = os.environ.get("HCLOUD_ENDPOINT") or HCLOUD_API_URL
    labels = snapshot_labels(load_pins(root), cluster.config.cluster_name)
    try:
        snapshots = [s for s in find_snapshots(token, labels, endpoint) if s.status == "available"]
    except RayaError as error:
        raise DeployError(f"the pins' snapshot: {error}") from None
    # The program's choice (`raya.cloud.program.cluster.find_snapshot`): the newest available.
    image = str(max(snapshots, key=lambda s: s.created).id) if snapshots else ""
    if not image:
        on_output(
            "no snapshot for the pins yet (`raya image build`, which main.yml runs after the "
            "merge, makes it): every node's image differs from them"
        )
    users = _users_digests(root, cluster)
    found: dict[str, tuple[str, ...]] = {}
    for node in cluster.nodes:
        outputs = servers.get(node.name)
        if outputs is None:
            continue
        running = outputs.get("labels") or {}
        parts = drift.drift_parts(
            running, str(outputs.get("image")), {"users": users[node.name]}, image
        )
        if parts:
            found[node.name] = parts
    return Result(
        changes={},
        outputs={},
        drift=found,
        leaving=_leaving(resources, cluster),
        arriving=tuple(node.name for node in cluster.nodes if node.name not in servers),
    )


def export_sealed(stack: auto.Stack) -> list[dict[str, Any]]:
    """The state's resources, each secret as its ciphertext: `pulumi stack export` without
    `--show-secrets`, which asks nothing of the secrets provider (pulumi/pulumi
    `pkg/cmd/pulumi/stack/stack_export.go`: only `--show-secrets` deserializes the deployment;
    `pkg/backend/diy/backend.go`, `ExportDeployment`, marshals the stored checkpoint). Not
    the SDK's `export_stack`, which always adds `--show-secrets` (pulumi
    `sdk/python/lib/pulumi/automation/_local_workspace.py`)."""
    workspace = stack.workspace
    try:
        result = workspace.pulumi_command.run(
            ["stack", "export", "--stack", stack.name], workspace.work_dir, workspace.env_vars
        )
        resources = json.loads(result.stdout)["deployment"].get("resources") or []
    except auto.CommandError as error:
        raise DeployError(f"could not export stack {stack.name}: {_last_line(error)}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise DeployError(f"stack export of {stack.name}: not a deployment ({error})") from None
    return list(resources)


def _users_digests(root: Path, cluster: Cluster) -> dict[str, str]:
    """Each node's `users` digest (`part_digests`), rendered with throwaway secrets: that
    part is the authorized users' handles file alone, whatever the secrets."""
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    volumes = {node.name: str(k) for k, node in enumerate(cluster.control_planes, 1)}
    rendered = render_cluster(cluster, secrets, charts=load_chart_pins(root), volume_id=volumes)
    return {node.node.name: part_digests(node.ignition)["users"] for node in rendered}


def shut_down(client: Any, cluster_name: str, nodes: Sequence[str]) -> None:
    """Shut the servers of `nodes` down through Hetzner's API (an ACPI shutdown) and wait
    until each is `off`, before the engine deletes them: the hcloud provider's
    `shutdown_before_deletion` waits about 31 s and then deletes a server that is still
    running (terraform-provider-hcloud `internal/server/resource.go`,
    `resourceServerDelete`: a warning, "deleting it anyways"). Raises, nothing deleted,
    when one is not off within `SHUTDOWN_TIMEOUT`. A server that does not exist is skipped.

    All of them at once, within Hetzner's request budget (raya.cloud.ratelimit): the
    cluster's servers found by one list (its label; a server without it by its name), one
    shutdown each, then one list every `SHUTDOWN_POLL` seconds until every one is off."""
    names = {server_name(cluster_name, node): node for node in nodes}

    def listed() -> dict[str, Any]:
        found = client.servers.get_all(label_selector=f"{CLUSTER_LABEL}={cluster_name}")
        return {str(server.name): server for server in found if server.name in names}

    try:
        servers = listed()
        for name in names.keys() - servers.keys():
            server = client.servers.get_by_name(name)
            if server is not None:
                servers[name] = server
        going = {  # in the order of `nodes`
            name: servers[name]
            for name in names
            if name in servers and servers[name].status != "off"
        }
        for server in going.values():
            client.servers.shutdown(server)
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT
        while going:
            time.sleep(SHUTDOWN_POLL)
            now = listed()
            going = {
                name: now.get(name) or client.servers.get_by_id(server.id)
                for name, server in going.items()
            }
            going = {name: server for name, server in going.items() if server.status != "off"}
            if going and time.monotonic() >= deadline:
                name, server = sorted(going.items())[0]
                raise DeployError(
                    f"{names[name]}: server {name} is still {server.status} "
                    f"{SHUTDOWN_TIMEOUT:g} s after an ACPI shutdown, so it was not deleted (the "
                    "hcloud provider would delete it running); nothing was deleted. See its "
                    "console; to accept an ungraceful stop, power it off (`hcloud server "
                    f"poweroff {name}`) and run again"
                )
    except (HCloudException, requests.RequestException) as error:
        raise DeployError(f"Hetzner API: shutting down before deletion: {error}") from None


def autoscaled_servers(client: Any, cluster_name: str) -> list[Any]:
    """The servers the cluster autoscaler made for cluster `cluster_name`: the provider labels
    each with its node group (`NODE_GROUP_LABEL`), and the pool's server labels
    (raya.nodes.autoscaler.cluster_config) with the cluster's, so that another cluster's
    groups in the same Hetzner project are never counted. One list, 50 a page."""
    selector = f"{CLUSTER_LABEL}={cluster_name},{NODE_GROUP_LABEL}"
    return list(client.servers.get_all(label_selector=selector))


def _client(root: Path, stack_name: str, stack: auto.Stack) -> Any:
    endpoint = os.environ.get("HCLOUD_ENDPOINT") or HCLOUD_API_URL
    return hcloud_client(_token(root, stack_name, stack), endpoint)


def delete_autoscaled(root: Path, stack_name: str, stack: auto.Stack) -> tuple[str, ...]:
    """Delete the cluster autoscaler's servers of the stack's cluster and wait until Hetzner
    has (a server's deletion is an action that ends later: API reference, "Delete a Server");
    their names. Asked before the engine's destroy, which no resource of the stack makes wait
    for them and which would leave them running behind no firewall: the hcloud provider
    deletes a firewall by first taking it off all it applies to, the label selector that
    covers them included (terraform-provider-hcloud `internal/firewall/resource.go`,
    `resourceFirewallDelete`, `removeFromResources`); Hetzner refuses to delete a subnet
    with servers attached ("Delete a subnet from a Network"), which the provider retries
    and then drops from the state (`internal/network/resource_subnet.go`,
    `resourceNetworkSubnetDelete`), and deleting the network detaches them ("Delete a
    Network"). A server the autoscaler makes meanwhile is found by the next list and deleted
    too. Raises, the engine not started, if one is not gone within `DELETE_TIMEOUT`.

    The cluster is the stack's `raya:clusterName` (the default when unset), read through the
    CLI: a destroy reads none of raya's files."""
    cluster_name = _stack_setting(stack, "raya:clusterName") or str(DEFAULTS["clusterName"])
    client = _client(root, stack_name, stack)
    asked: dict[int, str] = {}
    try:
        deadline = time.monotonic() + DELETE_TIMEOUT
        while True:
            listed = autoscaled_servers(client, cluster_name)
            for server in listed:
                if server.id not in asked and _deleted(client, server):
                    asked[server.id] = str(server.name)
            if not listed:
                return tuple(sorted(asked.values()))
            if time.monotonic() >= deadline:
                names = ", ".join(sorted(str(server.name) for server in listed))
                raise DeployError(
                    f"the cluster autoscaler's servers {names} are still there "
                    f"{DELETE_TIMEOUT:g} s after their deletion was asked; nothing else was "
                    "deleted: run `raya destroy` again once Hetzner has deleted them"
                )
            time.sleep(SHUTDOWN_POLL)
    except (HCloudException, requests.RequestException) as error:
        raise DeployError(
            f"Hetzner API: deleting the cluster autoscaler's servers: {error}; nothing else "
            "was deleted"
        ) from None


def _deleted(client: Any, server: Any) -> bool:
    """Ask Hetzner to delete `server`; False if it is gone already (the autoscaler, scaling
    down meanwhile, deleted it between the list and this request: `not_found`)."""
    try:
        client.servers.delete(server)
    except APIException as error:
        if error.code == "not_found":
            return False
        raise
    return True


def orphaned_groups(cluster: Cluster, servers: Sequence[Any]) -> dict[str, list[str]]:
    """The cluster autoscaler's `servers` (`autoscaled_servers`) whose node group is no
    autoscaled pool of `cluster`'s: node group -> their names. The autoscaler manages only
    the groups its values list, and the engine knows no such server: nothing would delete
    them."""
    groups = {node_group(cluster, pool) for pool in cluster.autoscaled}
    found: dict[str, list[str]] = {}
    for server in servers:
        group = str((server.labels or {}).get(NODE_GROUP_LABEL, ""))
        if group not in groups:
            found.setdefault(group, []).append(str(server.name))
    return {group: sorted(names) for group, names in sorted(found.items())}


def check_no_orphans(root: Path, stack_name: str, cluster: Cluster, stack: auto.Stack) -> None:
    """Refuse an update, before anything changes, that would leave servers of the cluster
    autoscaler in a node group that no autoscaled pool of the inputs has anymore (a pool
    removed, or made fixed with `count`)."""
    try:
        servers = autoscaled_servers(_client(root, stack_name, stack), cluster.config.cluster_name)
    except (HCloudException, requests.RequestException) as error:
        raise DeployError(
            f"Hetzner API: listing the cluster autoscaler's servers: {error}; nothing changed"
        ) from None
    orphans = orphaned_groups(cluster, servers)
    if not orphans:
        return
    prefix = f"{cluster.config.cluster_name}-"
    named = "; ".join(
        f"pool {group.removeprefix(prefix)} (node group {group}): {', '.join(names)}"
        for group, names in orphans.items()
    )
    raise DeployError(
        f"{fleet_file(root)}: servers the cluster autoscaler made for pools no longer "
        f"autoscaled still exist ({named}), and nothing would delete them: keep each such "
        "pool with min 0 until the autoscaler has removed them (`raya status` counts them), "
        "or delete them (`hcloud server delete <name>`), then run again; nothing changed"
    )


def stack_outputs(root: Path, stack_name: str) -> dict[str, Any]:
    """The outputs of the deployed stack, secrets in clear: for commands that use them
    (`raya kubeconfig`, `raya ssh`), never to print."""
    stack = open_stack(root, stack_name, create=False)
    try:
        outputs = stack.outputs()
    except auto.CommandError as error:
        raise DeployError(
            f"could not read the outputs of stack {stack_name}: {_last_line(error)}"
        ) from None
    return {name: output.value for name, output in outputs.items()}
def _nodes(cluster: Cluster, names: Sequence[str]) -> list[str]:
    known = [node.name for node in cluster.nodes]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise DeployError(
            f"replace: {', '.join(unknown)} is not a node of cluster "
            f"{cluster.config.cluster_name}; accepted: {', '.join(known)}"
        )
    return list(dict.fromkeys(names))


def _server_urn(root: Path, stack_name: str, node: str) -> str:
    """The URN of node `node`'s server: the program names each server resource after its node."""
    return _urn(root, stack_name, SERVER_TYPE, node)


def _urn(root: Path, stack_name: str, kind: str, name: str) -> str:
    try:
        project = loads_yaml((root / "Pulumi.yaml").read_text(encoding="utf-8"))["name"]
    except (OSError, yaml.YAMLError, DuplicateKey, KeyError, TypeError) as error:
        raise DeployError(f"{root / 'Pulumi.yaml'}: no project name: {error}") from None
    return f"urn:pulumi:{stack_name}::{project}::{kind}::{name}"


def _leaving(resources: Sequence[Mapping[str, Any]], cluster: Cluster) -> tuple[str, ...]:
    """The nodes whose servers are in the state's `resources` but not in the inputs: agents
    first, then control planes, each by name and number (`web-2` before `web-10`)."""
    declared = {node.name for node in cluster.nodes}
    names = [
        str(resource["urn"]).rsplit("::", 1)[-1]
        for resource in resources
        if resource.get("type") == SERVER_TYPE
    ]
    gone = {name for name in names if name not in declared}

    def order(name: str) -> tuple[bool, str, int]:
        stem, _, number = name.rpartition("-")
        if not number.isdigit():
            stem, number = name, "-1"
        return name.startswith(CONTROL_PLANE_NAME), stem, int(number)

    return tuple(sorted(gone, key=order))


def check_sold(
    root: Path,
    stack_name: str,
    cluster: Cluster,
    stack: auto.Stack,
    on_output: OnOutput,
    replace: Sequence[str] = (),
) -> None:
    """Refuse, before anything changes, a node or autoscaled pool whose server type Hetzner
    does not sell in its location (a server type's `locations`), or whose deprecation there
    has passed; warn, through `on_output`, of one deprecated there with a date still to
    come. A node in `replace` must be one whose server Hetzner can create there now
    (`replaceable`)."""
    token = _token(root, stack_name, stack)
    endpoint = os.environ.get("HCLOUD_ENDPOINT") or HCLOUD_API_URL
    types = sorted(
        {node.server_type for node in cluster.nodes}
        | {pool.server_type for pool in cluster.autoscaled}
    )
    offers = catalogue.offers(token, endpoint, types, DeployError)
    now = datetime.datetime.now(datetime.UTC)
    fleet_source, stack_source = str(fleet_file(root)), str(stack_file(root, stack_name))
    refusal, warnings = deprecation_problems(cluster, offers, now, fleet_source, stack_source)
    if refusal:
        raise DeployError(refusal)
    problem = sold_problem(
        cluster,
        load_fleet(fleet_file(root)),
        sold_locations(offers, types),
        fleet_source=fleet_source,
        stack_source=stack_source,
    )
    if problem:
        raise DeployError(problem)
    problem = replacement_problem(cluster, offers, now, replace)
    if problem:
        raise DeployError(problem)
    for warning in warnings:
        on_output(warning)


def check_replaceable(root: Path, stack_name: str, nodes: Sequence[str]) -> None:
    """Raise unless Hetzner can create a server for each of `nodes` in its location now:
    `raya roll` asks before its first action, so that no node is drained, or its server
    deleted, for a replacement that cannot be made."""
    cluster = load_cluster(root, stack_name)
    endpoint = os.environ.get("HCLOUD_ENDPOINT") or HCLOUD_API_URL
    types = sorted({node.server_type for node in cluster.nodes if node.name in nodes})
    offers = catalogue.offers(_token(root, stack_name, None), endpoint, types, DeployError)
    problem = replacement_problem(cluster, offers, datetime.datetime.now(datetime.UTC), nodes)
    if problem:
        raise DeployError(problem)


def _chosen_by(node: Node, fleet_source: str, stack_source: str) -> str:
    """The file and field that chose `node`'s server type."""
    if node.role == "control-plane":
        return f"{stack_source}: raya:controlPlaneServerType"
    if node.pool is not None:
        return f"{fleet_source}: pool {node.pool}: field 'type'"
    return f"{fleet_source}: agents[{node.index}]"


def deprecation_problems(
    cluster: Cluster,
    offers: Sequence[catalogue.Offer],
    now: datetime.datetime,
    fleet_source: str,
    stack_source: str,
) -> tuple[str | None, tuple[str, ...]]:
    """The refusal of the first node, or autoscaled pool, whose type's deprecation in its
    location has passed (Hetzner creates no new server of it there: a node added or
    replaced would fail half-way through an update, and the cluster autoscaler would fail
    each time it grows the pool), and one warning per type and location whose deprecation
    is announced with a date still to come, naming the nodes and pools it runs."""
    choices = [
        (node.server_type, node.location or cluster.config.location,
         _chosen_by(node, fleet_source, stack_source), node.name, None)
        for node in cluster.nodes
    ] + [
        (pool.server_type, pool.location or cluster.config.location,
         f"{fleet_source}: pool {pool.name}: field 'type'", None, pool.name)
        for pool in cluster.autoscaled
    ]  # fmt: skip
    coming: dict[tuple[str, str], tuple[catalogue.Offer, list[str], list[str]]] = {}
    for server_type, location, chosen_by, node, pool in choices:
        offer = catalogue.find(offers, server_type, location)
        if offer is None or offer.unavailable_after is None:
            continue
        if offer.gone(now):
            return (
                f"{chosen_by} is {server_type!r}, which Hetzner no longer sells in "
                f"{location}: deprecated there (announced {catalogue.date(offer.announced)}), "
                f"unavailable after {catalogue.date(offer.unavailable_after)}; accepted: a "
                f"type sold in {location}; nothing changed"
            ), ()
        _, nodes, pools = coming.setdefault((server_type, location), (offer, [], []))
        if node is not None:
            nodes.append(node)
        if pool is not None:
            pools.append(pool)
    warnings = []
    for (server_type, location), (offer, nodes, pools) in coming.items():
        then = []
        if nodes:
            then.append(
                f"{', '.join(nodes)} could then not be replaced (raya roll, up --replace) nor "
                "their pool grown"
            )
        if pools:
            then.append(
                f"the cluster autoscaler could then add no node to autoscaled pool "
                f"{', '.join(pools)}"
            )
        warnings.append(
            f"warning: Hetzner deprecated {server_type} in {location} (announced "
            f"{catalogue.date(offer.announced)}): after {catalogue.date(offer.unavailable_after)}"
            f" no server of it can be created there, so {'; and '.join(then)}; move them to "
            "another type before then"
        )
    return None, tuple(warnings)


def replacement_problem(
    cluster: Cluster,
    offers: Sequence[catalogue.Offer],
    now: datetime.datetime,
    nodes: Sequence[str],
) -> str | None:
    """Why a server cannot be created now for one of `nodes` (its type not listed in its
    location, out of stock there, or deprecated past there), None if each can: a
    replacement deletes the old server before creating the new one, and nothing brings the
    old one back."""
    for node in cluster.nodes:
        if node.name not in nodes:
            continue
        location = node.location or cluster.config.location
        offer = catalogue.find(offers, node.server_type, location)
        if offer is None:
            why = "Hetzner does not sell it there"
        elif offer.gone(now):
            why = f"deprecated there, unavailable after {catalogue.date(offer.unavailable_after)}"
        elif not offer.available:
            why = "Hetzner has none in stock there now (available: false)"
        else:
            continue
        return (
            f"{node.name}: a new {node.server_type} server cannot be created in {location} "
            f"now ({why}), so its server is left as it is rather than deleted: retry once "
            "it is back in stock, or give the node a type sold there"
        )
    return None


def sold_locations(
    offers: Sequence[catalogue.Offer], types: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """Where Hetzner lists each of `types` (a type it lists nowhere: none); a deprecation
    there that has passed is refused before (`deprecation_problems`). Whether it is in stock
    there right now (`available`) changes by the hour: not a mistake in the inputs, so not
    refused for an update, only for a replacement (`replacement_problem`)."""
    found: dict[str, list[str]] = {}
    for offer in offers:
        if offer.server_type in types:
            found.setdefault(offer.server_type, []).append(offer.location)
    return {name: tuple(sorted(places)) for name, places in found.items()}


def _token(root: Path, stack_name: str, stack: auto.Stack | None) -> str:
    """The Hetzner token: HCLOUD_TOKEN, else the stack's hcloud:token."""
    token = os.environ.get("HCLOUD_TOKEN")
    if not token:
        token = _stack_setting(stack or open_stack(root, stack_name, False), "hcloud:token")
    if not token:
        raise DeployError(
            "HCLOUD_TOKEN is not set and the stack has no hcloud:token: set a read and "
            "write API token of the Hetzner Cloud project with `export HCLOUD_TOKEN=<token>` "
            "or `pulumi config set --secret hcloud:token <token>` (docs/deploy.md)"
        )
    return token


def _stack_setting(stack: auto.Stack, key: str) -> str | None:
    try:
        return str(stack.get_config(key).value)
    except auto.CommandError:
        return None


# What each server step has done once the engine is done with it.
SERVER_DONE = {
    auto.OpType.CREATE: "server created",
    auto.OpType.CREATE_REPLACEMENT: "replacing its server: the new one created",
    auto.OpType.DELETE_REPLACED: "replacing its server: the old one deleted",
    auto.OpType.DELETE: "server deleted",
}


class ServerSteps:
    """An update's progress, counted in server steps: the engine's steps on raya's servers
    (pulumi/pulumi `pkg/resource/deploy/step.go`: a `create`, a `delete`, and a replacement's
    two, `create-replacement` then `delete-replaced`, or the other way round for
    delete-before-replace), out of the hundreds of resources an update goes through. What is
    planned comes from the inputs and the state before it runs: the nodes arriving, those
    replaced, those leaving; a server step the engine takes beyond those is counted done as
    it comes. A step is done when its `resOutputsEvent` arrives (`pkg/engine/events.go`:
    sent once the step has been applied)."""

    def __init__(
        self,
        arriving: Sequence[str],
        replacing: Sequence[str],
        leaving: Sequence[str],
        now: Callable[[], float],
    ) -> None:
        self.now = now
        self.started = now()
        self.pending = [
            *((name, auto.OpType.CREATE) for name in arriving),
            *(
                (name, op)
                for name in replacing
                for op in (auto.OpType.CREATE_REPLACEMENT, auto.OpType.DELETE_REPLACED)
            ),
            *((name, auto.OpType.DELETE) for name in leaving),
        ]
        self.done: list[tuple[str, auto.OpType]] = []

    def seen(self, event: auto.EngineEvent) -> str | None:
        """The progress line for `event` if it ends a server step, else None."""
        outputs = event.res_outputs_event
        if outputs is None or outputs.metadata.type != SERVER_TYPE:
            return None
        op = outputs.metadata.op
        if op not in SERVER_DONE:
            return None
        step = (outputs.metadata.urn.rsplit("::", 1)[-1], op)
        if step in self.pending:
            self.pending.remove(step)
        self.done.append(step)
        where = progress(len(self.done), len(self.pending), self.now() - self.started,
                         "server steps done")  # fmt: skip
        return f"{where} {step[0]}: {SERVER_DONE[op]}"

    def collector(
        self, collect: Callable[[auto.EngineEvent], None], on_progress: OnOutput | None
    ) -> Callable[[auto.EngineEvent], None]:
        """`collect` each event, and say each step done through `on_progress`."""

        def seen(event: auto.EngineEvent) -> None:
            collect(event)
            line = self.seen(event)
            if line is not None and on_progress is not None:
                on_progress(line)

        return seen

    def summary(self) -> str:
        ops = [op for _, op in self.done]
        replaced = ops.count(auto.OpType.CREATE_REPLACEMENT)
        return (
            f"servers: {ops.count(auto.OpType.CREATE)} created, {replaced} replaced, "
            f"{ops.count(auto.OpType.DELETE)} deleted in {elapsed(self.now() - self.started)}"
        )


def _drift_collector(found: dict[str, tuple[str, ...]]) -> Callable[[auto.EngineEvent], None]:
    """Picks the program's drift reports out of the engine's diagnostics."""

    def collect(event: auto.EngineEvent) -> None:
        diagnostic = event.diagnostic_event
        report = drift.parse(diagnostic.message) if diagnostic is not None else None
        if report is not None:
            found[report[0]] = report[1]

    return collect


def protected_changes(
    events: Sequence[auto.EngineEvent], allowed: Set[str] = frozenset()
) -> list[str]:
    """What a preview's events would replace or delete among `PROTECTED`, one line each;
    `allowed` names nodes whose server may be replaced (`run(replace=...)`)."""
    problems: dict[str, str] = {}
    for event in events:
        pre = event.resource_pre_event
        if pre is None or pre.metadata.op not in DESTRUCTIVE:
            continue
        kind, name = pre.metadata.type, pre.metadata.urn.rsplit("::", 1)[-1]
        what = PROTECTED.get((kind, name))
        if what is None or (kind == SERVER_TYPE and name in allowed):
            continue
        problems.setdefault(
            pre.metadata.urn, f"{what} ({name}, {kind}): {pre.metadata.op.value}"
        )
    return list(problems.values())


def _guard(stack: auto.Stack, stack_name: str, options: dict[str, Any], allowed: Set[str]) -> None:
    events: list[auto.EngineEvent] = []
    stack.preview(**{**options, "on_event": events.append})
    problems = protected_changes(events, allowed)
    if problems:
        raise DeployError(
            f"up of stack {stack_name} refused, nothing changed: its preview would replace or "
            f"delete {'; '.join(problems)} (--no-destroy-protected)"
        )


def _unprotect(
    stack: auto.Stack, urns: set[str] | None, *, release_retained: bool = False
) -> None:
    """Lift `protect` in the state from the resources `urns` (all if None), so the engine
    may delete or replace them; the program protects them again at the next update.
    `release_retained` also lifts `retainOnDelete`, so that a destroy deletes those too."""
    state = stack.export_stack()
    resources = state.deployment.get("resources", []) if state.deployment else []
    changed = False
    for resource in resources:
        if urns is not None and resource.get("urn") not in urns:
            continue
        for option in ("protect", "retainOnDelete") if release_retained else ("protect",):
            if resource.get(option):
                resource[option] = False
                changed = True
    if changed:
        _import_state(stack, state)


def _import_state(stack: auto.Stack, state: auto.Deployment) -> None:
    """`stack.import_stack`, with its plaintext copy of the state in a private folder that
    goes with it: the SDK writes the state, secrets decrypted, to a temporary file that it
    removes only when `pulumi stack import` succeeds (pulumi automation
    `_local_workspace.py`, `LocalWorkspace.import_stack`)."""
    previous = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix="raya-state-") as private:
        tempfile.tempdir = private
        try:
            stack.import_stack(state)
        finally:
            tempfile.tempdir = previous


def _counts(changes: Mapping[Any, int] | None) -> dict[str, int]:
    """Resources per operation; the operation is an enum in previews, text in updates."""
    counts = {str(getattr(op, "value", op)): int(n) for op, n in (changes or {}).items()}
    return dict(sorted(counts.items()))


def _printable(outputs: Mapping[str, auto.OutputValue]) -> dict[str, str]:
    return {
        name: "[secret]" if output.secret else json.dumps(output.value, sort_keys=True)
        for name, output in sorted(outputs.items())
    }


def _last_line(error: auto.CommandError) -> str:
    """The CLI's last error line: its message, never a value (the CLI masks secrets)."""
    lines = [
        line[line.index("error:") :].strip() for line in str(error).splitlines() if "error:" in line
    ]
    return lines[-1] if lines else "see the output above"
