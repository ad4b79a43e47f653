"""`raya preview | up | destroy`: deploy the stack through Pulumi's Automation API."""

from __future__ import annotations

from raya.commands.options import NODE_NAMES, ROOT, STACK, project_root
from raya.commands.parser import Commands, Option, confirm
from raya.console import err, out
from raya.defaults import WITHOUT_DRAIN
from raya.errors import DeployError, RayaError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path
    from types import ModuleType
    from typing import Any

    from raya.cloud.deploy import Action, Removal, Result
    from raya.operate import roll as roll_model
    from raya.operate.backups import Target

commands = Commands()  # what this module adds to `raya`


def kube_api_client(kubeconfig: str) -> Any:
    """`raya.cloud.kubeconfig.api_client`, imported on use (it loads PyYAML)."""
    from raya.cloud.kubeconfig import api_client

    return api_client(kubeconfig)


def node_runner(root: Path, stack: str) -> Callable[[str, Sequence[str]], tuple[int, str]]:
    """Runs a command as root on a node, by name, over SSH pinned to its deployed host key
    (`raya.commands.backups.remote`); the stack's outputs are read at the first call."""
    servers: dict[str, Any] = {}

    def run(node: str, command: Sequence[str]) -> tuple[int, str]:
        import shlex

        from raya.commands import backups
        from raya.commands.access import stack_outputs

        if not servers:
            servers.update(stack_outputs("up", stack, root).get("servers") or {})
        if node not in servers:
            return 255, f"no server {node} in the outputs of stack {stack}"
        # ssh hands the remote shell one line: quoted here, so that it splits it back.
        return backups.remote(servers[node], [shlex.join(command)], None)

    return run


def _progress(line: str) -> None:
    # Lines of the Pulumi CLI's own display, in which secrets read `[secret]`.
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def _server_progress(line: str) -> None:
    # raya's own count of an update's server steps: node names and figures, nothing secret.
    err.print(line, markup=False, highlight=False, soft_wrap=True)


def deploy_module(command: str) -> ModuleType:
    """`raya.cloud.deploy`, imported on use: the rest of raya works without Pulumi's packages (the
    [deploy] extra). Run through `./raya`, which names its set-up script in RAYA_BOOTSTRAP, a
    command installs them the first time it needs them, so that no `--help` waits for them."""
    missing = _missing_for_deploy()
    # A module of raya's own missing is a broken install, which no extra mends.
    ours = missing is not None and missing.partition(".")[0] == "raya"
    if missing and not ours and install_extra("deploy", command, missing):
        missing = _missing_for_deploy()
    if missing:
        raise DeployError(
            f"raya {command} needs the Pulumi packages ({missing} is missing): "
            "install raya's [deploy] extra, e.g. `scripts/bootstrap deploy`"
        )
    from raya.cloud import deploy

    return deploy


def _missing_for_deploy() -> str | None:
    """The module whose absence stops `raya.cloud.deploy` from loading, or None: it loads."""
    try:
        from raya.cloud import deploy  # noqa: F401
    except ImportError as error:
        return error.name or "a module"
    return None


def install_extra(extra: str, command: str, missing: str) -> bool:
    """Installs raya's `extra` with RAYA_BOOTSTRAP (its output on stderr, stdout being the
    command's); False when raya was not started by `./raya`."""
    import os

    bootstrap = os.environ.get("RAYA_BOOTSTRAP")
    if not bootstrap:
        return False
    import importlib
    import subprocess
    import sys

    sys.stderr.write(f"raya {command} needs raya's [{extra}] extra ({missing} is missing)\n")
    sys.stderr.flush()
    status = subprocess.run([bootstrap, extra], stdout=sys.stderr, check=False).returncode
    if status != 0:
        raise DeployError(
            f"installing raya's [{extra}] extra for raya {command} failed "
            f"(`{bootstrap} {extra}` exited {status}; its output is above)"
        )
    importlib.invalidate_caches()  # the import system's view of site-packages predates it
    return True


def _run(
    action: Action,
    stack: str,
    root: Path | None,
    *,
    replace: list[str] | None = None,
    no_destroy_protected: bool = False,
    delete_backups: bool = False,
    removal: Removal | None = None,
) -> Result:
    folder = project_root(root)
    result: Result = deploy_module(action).run(
        action,
        folder,
        stack,
        _progress,
        replace=replace or (),
        no_destroy_protected=no_destroy_protected,
        delete_backups=delete_backups,
        removal=removal,
        on_progress=_server_progress if action == "up" else None,
    )
    changes = ", ".join(f"{op} {count}" for op, count in result.changes.items()) or "none"
    out.print(f"{action} of stack {stack}: {changes}", markup=False)
    _print_nodes(result.leaving if action == "preview" else (), result.drift)
    return result


def leaving_plan(leaving: tuple[str, ...]) -> str:
    """What `raya up` does to the nodes the inputs no longer declare, in its order."""
    from raya.operate import remove as remove_model
    from raya.operate import roll as roll_model

    agents = [name for name in leaving if not roll_model.is_control_plane(name)]
    planes = [name for name in leaving if roll_model.is_control_plane(name)]
    parts = [f"cordon and drain {', '.join(leaving)}"]
    if planes:
        parts.append(
            f"remove the etcd members of {', '.join(planes)} one at a time (k3s disabled "
            "over SSH first, stopped once its member is gone)"
        )
        parts.append(f"watch {remove_model.COMEBACK_WATCH:.0f} s that no removed member comes back")
    parts.append(f"delete their servers{' and volumes' if planes else ''}, then their node objects")
    return f"nodes leaving ({len(agents)} agent(s), {len(planes)} control plane(s)): " + (
        "; ".join(parts)
    )


@commands.command(
    STACK, ROOT,
    Option("--without-secrets", kind="flag",
           help="Decrypt nothing (no PULUMI_CONFIG_PASSPHRASE needed; HCLOUD_TOKEN may be a "
           "Read token): the nodes up would create or remove and each node's users and image "
           "drift, read from the state with its secrets sealed; no Pulumi preview, no config "
           "drift (what a pull request's preview runs)."),
)  # fmt: skip
def preview(*, stack: str, root: Path | None, without_secrets: bool) -> None:
    """Show what `raya up` would change, and each node's drift, without changing anything.

    Nodes the inputs no longer declare are listed with what `raya up` does to them first."""
    if not without_secrets:
        _run("preview", stack, root)
        return
    result = deploy_module("preview").preview_without_secrets(project_root(root), stack, _progress)
    arriving = ", ".join(result.arriving) or "none"
    out.print(
        f"preview of stack {stack} without secrets: nodes to create: {arriving}; the config "
        "part of drift and every other resource are compared by `raya preview` with the "
        "stack's passphrase",
        markup=False,
        soft_wrap=True,
    )
    _print_nodes(result.leaving, result.drift)


def _print_nodes(leaving: tuple[str, ...], drift: dict[str, tuple[str, ...]]) -> None:
    """What `raya up` does to the nodes leaving, then each drifting node's parts."""
    if leaving:
        out.print(leaving_plan(leaving), markup=False, soft_wrap=True)
    for node, parts in drift.items():
        out.print(
            f"drift: {node} runs other {', '.join(parts)} than the inputs render; "
            "left as it is (docs/deploy.md, Day two)",
            markup=False,
            soft_wrap=True,
        )


@commands.command(
    STACK, ROOT,
    Option("--no-destroy-protected", kind="flag",
           help="Preview first; fail, changing nothing, if the preview replaces or deletes "
           "the control plane, its volume, the network or the DNS zone (what CI runs)."),
    Option("--replace", multiple=True,
           help=f"Re-create this node's server (by name: {NODE_NAMES}) with what the inputs "
           "render, applying its drift: the old server is shut down and deleted first. "
           "Repeat for more agents; one control plane at a time, and with several only "
           "while every other one is Ready and a voting etcd member. `raya roll` also "
           "drains an agent first."),
    Option(WITHOUT_DRAIN, kind="flag",
           help="When the Kubernetes API cannot be reached (or a leaving control plane has "
           "no node object), delete the nodes the inputs no longer declare anyway: "
           "undrained, and a control plane's etcd member left in place until removed by hand."),
    Option("--accept-local-data-loss", kind="flag",
           help="Delete leaving nodes whose pods use local-path claims: their data goes "
           "with the server."),
    Option("--accept-volume-downtime", kind="flag",
           help="Delete leaving nodes although no node staying where their pods' Hetzner "
           "Volumes are could take those pods: they wait, Pending, until one joins there."),
)  # fmt: skip
def up(
    *, stack: str, root: Path | None, no_destroy_protected: bool, replace: list[str],
    delete_without_drain: bool, accept_local_data_loss: bool, accept_volume_downtime: bool,
) -> None:  # fmt: skip
    """Create or update the cluster: image lookup, network, servers, PKI, DNS, service accounts.

    Servers are never replaced for a change of users, image or config: `raya up` lists it as
    drift, per node, and leaves them running, unless named with --replace.

    Nodes the inputs no longer declare (a smaller pool, a pool gone, fewer control planes)
    are cordoned and drained first, and a control plane's etcd member removed, one at a
    time and never below quorum, before Pulumi deletes their servers; anything refused
    stops it before Pulumi runs. A leaving node whose pods use local-path claims, or Hetzner
    Volumes that no node staying in their location could take, is refused unless
    --accept-local-data-loss or --accept-volume-downtime says so.

    With an autoscaled pool, it then applies the cluster autoscaler's Secret and HelmChart
    over the Kubernetes API (waiting up to 10 minutes for an API still starting).

    It ends by checking, with the backups writer's own key, that it can HEAD the backups'
    bucket and put and delete an object in the cluster's folder, as k3s will (asked again
    for up to 10 minutes while IAM applies a new grant); exit status 1 if not, the
    deployment itself done.
    """
    root = project_root(root)
    from raya.operate import remove
    from raya.operate import roll as roll_model

    check_replaced_control_plane(root, stack, replace)

    def connect(kubeconfig: str) -> roll_model.Kubernetes:
        return roll_model.Kubernetes(kube_api_client(kubeconfig))

    removal = remove.Removal(
        connect=connect,
        say=lambda line: err.print(line, markup=False, soft_wrap=True),
        remote=node_runner(root, stack),
        clock=roll_model.Clock(),
        accept_local_loss=accept_local_data_loss,
        accept_volume_downtime=accept_volume_downtime,
        without_drain=delete_without_drain,
    )
    result = _run(
        "up",
        stack,
        root,
        replace=replace,
        no_destroy_protected=no_destroy_protected,
        removal=removal,
    )
    for name, value in result.outputs.items():
        out.print(f"{name}: {value}", markup=False, soft_wrap=True)
    write_recovery_kit(root, stack, result)
    deliver_autoscaler(root, stack, roll_model.Clock())
    check_backups(root, stack, roll_model.Clock())


def deliver_autoscaler(root: Path, stack: str, clock: roll_model.Clock) -> None:
    """The cluster autoscaler's Secret and HelmChart (the stack output `autoscaler`, present
    with an autoscaled pool) applied to the cluster; nothing without one."""
    from raya.operate import autoscaler

    outputs = deploy_module("up").stack_outputs(root, stack)
    manifests = outputs.get("autoscaler")
    if not manifests:
        return
    api = kube_api_client(outputs["kubeconfig"])
    try:
        applied = autoscaler.apply(
            api, manifests, clock, lambda line: err.print(line, markup=False, soft_wrap=True)
        )
    finally:
        api.close()
    out.print(f"cluster autoscaler: applied {', '.join(applied)}", markup=False, soft_wrap=True)


def backup_target(root: Path, stack: str) -> Target:
    """The bucket and the writer's key the deployed stack names (its secrets in clear)."""
    from raya.operate import backups

    outputs = deploy_module("up").stack_outputs(root, stack)
    return backups.Target.from_outputs(outputs.get("backups"), stack)


def check_backups(root: Path, stack: str, clock: roll_model.Clock) -> None:
    """`raya up`'s last step: the calls k3s' snapshots need, made with the writer's key."""
    from raya.operate import backups

    err.print("backups: checking the writer's access to its bucket (IAM can take minutes)...",
              markup=False)  # fmt: skip
    try:
        checked = backups.probe(backup_target(root, stack), clock)
    except backups.BackupError as error:
        raise backups.BackupError(
            f"backups: {error}; k3s cannot store snapshots there. The deployment itself is "
            "done: fix the writer's access to the bucket and run `raya up` again"
        ) from None
    out.print(f"backups: {checked}", markup=False, soft_wrap=True)


def check_replaced_control_plane(root: Path, stack: str, replace: Sequence[str]) -> None:
    """With several control planes, `--replace` of one is refused, before anything changes,
    unless every other one is Ready and a voting etcd member: the roll's rule
    (`raya.operate.etcd.replacement_problem`). More than one at a time is refused by
    `raya.cloud.deploy.run`."""
    from raya.commands.access import stack_outputs
    from raya.model.project import load_cluster
    from raya.operate import etcd
    from raya.operate import roll as roll_model

    cluster = load_cluster(root, stack)
    control_planes = [node.name for node in cluster.control_planes]
    planes = [name for name in control_planes if name in replace]
    if len(control_planes) < 2 or len(planes) != 1:
        return
    try:
        kubeconfig = stack_outputs("up", stack, root).get("kubeconfig")
        if not isinstance(kubeconfig, str):
            raise DeployError(f"stack {stack} has no kubeconfig output")
        nodes = roll_model.Kubernetes(kube_api_client(kubeconfig)).nodes()
    except Exception as error:  # the API client's, whatever their kind
        from raya.cloud.kubeconfig import reason

        why = str(error) if isinstance(error, DeployError) else reason(error)
        raise DeployError(
            f"replace: cannot read etcd's members through the Kubernetes API ({why}) to check "
            f"that replacing {planes[0]} keeps a quorum; nothing changed"
        ) from None
    problem = etcd.replacement_problem(etcd.members(nodes, control_planes), planes[0])
    if problem:
        raise DeployError(f"replace refused, nothing changed: {problem}")


@commands.command(
    STACK, ROOT,
    Option("--yes", "-y", kind="flag", help="Do not ask for confirmation."),
    Option("--delete-backups", kind="flag",
           help="Delete the backups' bucket and every snapshot in it too."),
)  # fmt: skip
def destroy(*, stack: str, root: Path | None, yes: bool, delete_backups: bool) -> None:
    """Delete every resource of the stack: servers, volume, network, DNS zone, service accounts.

    Protected ones included (the control plane and its volume): the confirmation is the
    protection. The servers the cluster autoscaler made (found by their labels) are deleted
    first, and counted. The backups' bucket and its snapshots stay unless --delete-backups."""
    root = project_root(root)
    what = "its servers (the cluster autoscaler's too), DNS zone" + (
        " and every backup" if delete_backups else ""
    )
    if not yes:
        # Before the question: a stack that is not there (or no CLI to reach it) is the news.
        deploy_module("destroy").open_stack(root, stack, False)
        if not confirm(f"Destroy every resource of stack {stack}, {what} included?",
                       to_stderr=True):  # fmt: skip
            err.print("nothing destroyed")
            raise SystemExit(1)
    result = _run("destroy", stack, root, delete_backups=delete_backups)
    names = f": {', '.join(result.autoscaled)}" if result.autoscaled else ""
    out.print(
        f"deleted {len(result.autoscaled)} server(s) the cluster autoscaler made{names}",
        markup=False,
        soft_wrap=True,
    )
    _say_where_the_kit_is(root, stack, delete_backups)
    if delete_backups:
        err.print("deleted the backups' bucket and its snapshots")
    else:
        err.print(
            "kept the backups' bucket and its snapshots: a bucket raya made is no longer in "
            "the stack, delete it in Google Cloud Storage when it is not needed (or destroy "
            "with --delete-backups next time)",
            soft_wrap=True,
        )


def write_recovery_kit(root: Path, stack: str, result: Result) -> None:
    """Write (or refresh) the stack's recovery kit from the update's `recoveryKit` output:
    whole, 0600 from the start, never printed. A file there of another cluster, or not a
    kit, is left as it is and the command fails: it may be the only copy of that one."""
    from raya.cloud import kit as recovery
    from raya.files import write_atomically
    from raya.model.config import load_stack_config, stack_file

    config = load_stack_config(stack_file(root, stack))
    path = recovery.path(root, stack, config.recovery_kit)
    if result.recovery_kit is None:
        raise DeployError(f"stack {stack} has no recoveryKit output: {path} not written")
    kit = recovery.parse(result.recovery_kit, f"stack {stack}'s recoveryKit", config.cluster_name)
    if path.exists():
        try:
            kept = recovery.load(path, config)
        except RayaError as error:
            raise DeployError(
                f"{error}; not overwritten: set raya:recoveryKit to another path"
            ) from None
        if kept.backups.token_hash != kit.backups.token_hash:
            raise DeployError(
                f"{path}: backups.tokenHash is another cluster's (another server token); not "
                "overwritten: set raya:recoveryKit to another path"
            )
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(path, recovery.encode(kit), 0o600)
    except OSError as error:
        raise DeployError(f"{path}: recovery kit not written: {error.strerror}") from None
    err.print(
        f"wrote the recovery kit {path} (mode 0600): it holds the server token and the CA "
        "keys, the same as cluster-admin. Keep a copy where the loss of this machine, of the "
        "Hetzner project or of the stack does not reach (a password manager, an encrypted "
        "store), never in git: with it a new stack comes back from the kept snapshots "
        "(docs/backups.md)",
        markup=False,
        soft_wrap=True,
    )


def _say_where_the_kit_is(root: Path, stack: str, delete_backups: bool) -> None:
    from raya.cloud import kit as recovery
    from raya.model.config import load_stack_config, stack_file

    try:
        path = recovery.path(root, stack, load_stack_config(stack_file(root, stack)).recovery_kit)
    except RayaError:  # a destroy works whatever the stack file holds
        err.print("the recovery kit stays where raya:recoveryKit says (docs/backups.md)")
        return
    if path.exists() and delete_backups:
        message = (
            f"kept the recovery kit {path}: its bucket is deleted, so no snapshot of it can be "
            "restored; delete the kit when the cluster is not coming back"
        )
    elif path.exists():
        message = (
            f"kept the recovery kit {path}: a new stack with raya:fromRecoveryKit naming it "
            "takes back this cluster's token, CAs and bucket (docs/backups.md)"
        )
    else:
        message = (
            f"no recovery kit at {path}: a new stack cannot take back this cluster's identity, "
            "and its snapshots cannot be restored into it"
        )
    err.print(message, markup=False, soft_wrap=True)
