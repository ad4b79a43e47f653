"""`raya backup`, `raya backups`, `raya restore`: k3s' etcd snapshots in object storage."""

from __future__ import annotations

import datetime
import time

from raya.commands.access import stack_outputs
from raya.commands.operate import collect, print_report
from raya.commands.options import HCLOUD_ENDPOINT, ROOT, STACK, project_root
from raya.commands.parser import Argument, Commands, Option, confirm
from raya.console import err, out
from raya.defaults import RESTORE_READY_TIMEOUT
from raya.errors import DeployError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from typing import IO, Any

    from raya.operate import backups as bk
    from raya.operate import status as st

    # Runs `command` as root on the node of `entry` (its stack outputs), `stdin` on its
    # input; returns the exit code and what it printed. Replaced by tests.
    Remote = Callable[[Mapping[str, Any], Sequence[str], IO[bytes] | None], tuple[int, str]]

commands = Commands()  # what this module adds to `raya`


def over_ssh(entry: Mapping[str, Any], command: Sequence[str], stdin: IO[bytes] | None) -> (
    tuple[int, str]
):
    """`sudo command` on the node as core, over SSH pinned to the node's deployed host key."""
    import subprocess
    import tempfile
    from pathlib import Path

    from raya.operate import ssh as ssh_model

    with tempfile.TemporaryDirectory(prefix="raya-ssh-") as folder:
        known_hosts = Path(folder) / "known_hosts"
        known_hosts.write_text(ssh_model.known_hosts(entry))
        argv = ssh_model.ssh_command(entry, known_hosts, ["sudo", *command])
        try:
            done = subprocess.run(
                argv, stdin=stdin or subprocess.DEVNULL, capture_output=True, check=False
            )
        except FileNotFoundError:
            raise DeployError("ssh is not installed (Debian: openssh-client)") from None
    return done.returncode, (done.stdout + done.stderr).decode(errors="replace")


remote: Remote = over_ssh
# What a restore's progress is timed by. Replaced by tests.
clock: Callable[[], float] = time.monotonic


def _context(command: str, stack: str, root: Path | None) -> tuple[
    list[str], dict[str, Any], bk.Target
]:  # fmt: skip
    """The control planes (the first first), the stack's outputs (each server's under
    `servers`) and the snapshots' target, from the deployed stack."""
    folder = project_root(root)
    from raya.model.project import load_cluster
    from raya.operate import backups as bk

    cluster = load_cluster(folder, stack)
    outputs = stack_outputs(command, stack, root)
    servers: dict[str, Any] = outputs.get("servers") or {}
    control_planes = [node.name for node in cluster.nodes if node.role == "control-plane"]
    missing = [name for name in control_planes if name not in servers]
    if missing:
        raise DeployError(f"stack {stack} has no server {missing[0]} yet; run `raya up`")
    return control_planes, outputs, bk.Target.from_outputs(outputs.get("backups"), stack)


def _size(count: int) -> str:
    return f"{count / 2**20:,.1f} MiB" if count >= 2**20 else f"{count:,} B"


@commands.command(STACK, ROOT, name="backups")
def list_backups(*, stack: str, root: Path | None) -> None:
    """List the cluster's etcd snapshots in object storage by control plane, each one's
    newest first with its age.

    Every control plane takes its own snapshots (k3s names them with its node name): the
    current ones come first, in order, one with none saying so; then the snapshots of nodes
    that are no longer control planes, which stay restorable."""
    from raya.model.project import load_cluster

    cluster = load_cluster(project_root(root), stack)
    control_planes = [node.name for node in cluster.control_planes]
    outputs = stack_outputs("backups", stack, root)
    from raya.operate import backups as bk

    target = bk.Target.from_outputs(outputs.get("backups"), stack)
    with err.status(f"listing {target.where}..."):
        snapshots = bk.list_snapshots(target)
    if not snapshots:
        err.print(f"no snapshot in {target.where} yet", markup=False)
        return
    from rich.table import Table

    now = datetime.datetime.now(datetime.UTC)
    table = Table()
    for column in ("node", "name", "taken (UTC)", "size", "age"):
        table.add_column(column, no_wrap=True)
    for node, taken in bk.by_node(snapshots, control_planes):
        label = node if node in control_planes else f"{node} (no longer a control plane)"
        if not taken:
            table.add_row(label, "none in the bucket", "", "", "", end_section=True)
        for k, snapshot in enumerate(taken):
            last = k == len(taken) - 1
            table.add_row(label if k == 0 else "", snapshot.name,
                          f"{snapshot.taken:%Y-%m-%d %H:%M}", _size(snapshot.size),
                          bk.age_text(snapshot.age(now)), end_section=last)  # fmt: skip
    out.print(table)
    err.print(f"{len(snapshots)} snapshots in {target.where}", markup=False)


@commands.command(STACK, ROOT)
def backup(*, stack: str, root: Path | None) -> None:
    """Take an etcd snapshot now and upload it to the cluster's bucket.

    On the first control plane, k3s takes it (`k3s etcd-snapshot save`, over `raya ssh`'s
    pinned host key) and sends it to the cluster's bucket; raya prints its name and size as
    the bucket lists it."""
    control_planes, outputs, target = _context("backup", stack, root)
    from raya.operate import backups as bk

    before = {snapshot.name for snapshot in bk.list_snapshots(target)}
    node = control_planes[0]
    with err.status(f"taking a snapshot on {node}..."):
        code, printed = remote(outputs["servers"][node], ("k3s", "etcd-snapshot", "save"), None)
    if code != 0:
        raise DeployError(f"{node}: k3s etcd-snapshot save failed ({code}): {_tail(printed)}")
    new = [s for s in bk.list_snapshots(target) if s.name not in before]
    if not new:
        raise DeployError(
            f"{node}: k3s took a snapshot but none reached {target.where}; "
            f"k3s said: {_tail(printed)}"
        )
    out.print(f"{new[0].name}  {_size(new[0].size)}", markup=False)


@commands.command(
    Argument("name", required=True, help="The snapshot, as `raya backups` lists it."),
    STACK, ROOT,
    Option("--yes", kind="flag", help="Do not ask before acting."),
    Option("--dry-run", kind="flag",
           help="Check and download the snapshot, print every step on every node in order, "
           "then stop: nothing on the cluster changes and nothing is asked."),
    Option("--ready-timeout", kind="seconds", default=RESTORE_READY_TIMEOUT,
           help="Seconds to wait, once the steps are done, for the API, every node Ready and "
           "every control plane a voting etcd member."),
    HCLOUD_ENDPOINT,
)  # fmt: skip
def restore(
    *, name: str, stack: str, root: Path | None, yes: bool, dry_run: bool, ready_timeout: float,
    hcloud_endpoint: str,
) -> None:  # fmt: skip
    """Restore the cluster's datastore from a snapshot: every control plane's k3s stopped,
    the first reset from it, the others rejoined; then the cluster's state.

    The others rejoin as new etcd members; agents keep running. Everything written to the
    cluster after the snapshot is lost. The snapshot is checked (present, this cluster's,
    readable) before anything stops. Once the steps are done, raya waits for the API, every
    node Ready and every control plane a voting etcd member, prints what `raya status
    --no-drift` prints, then the snapshot restored, the etcd members and the nodes Ready;
    exits 1 when that is not so in time or anything is not healthy. With `--dry-run`, the
    steps are printed and nothing is done."""
    control_planes, outputs, target = _context("restore", stack, root)
    from raya.operate import backups as bk
    from raya.operate import status as st
    from raya.operate.roll import Clock

    snapshot = restore_snapshot(
        name, control_planes, outputs["servers"], target, yes, remote, dry_run=dry_run,
        now=clock,
    )
    if dry_run:
        err.print(f"dry run: nothing done; `raya restore {snapshot.name}` runs these steps",
                  markup=False)  # fmt: skip
        return
    kubeconfig = outputs.get("kubeconfig")
    addresses = st.control_plane_addresses(outputs)

    def ask() -> Mapping[str, st.NodeFacts] | str:
        if not isinstance(kubeconfig, str):
            return "no kubeconfig in the stack: run `raya up`"
        return st.kubernetes_nodes(kubeconfig)

    def members() -> Mapping[str, st.Check]:
        assert isinstance(kubeconfig, str)  # ask() said so first
        return {
            key: check
            for key, check in st.kubernetes_control_planes(kubeconfig, addresses).items()
            if key.startswith("etcd")
        }

    with err.status(f"waiting up to {ready_timeout:.0f} s for the API, every node Ready and "
                    "every etcd member a voter..."):  # fmt: skip
        late = bk.wait_for_nodes(ask, list(outputs["servers"]), ready_timeout, Clock(), members,
                                 rejoining=control_planes[1:])  # fmt: skip
    report = collect(stack, project_root(root), False, hcloud_endpoint)
    print_report(report)
    out.print(restored_line(snapshot, report), markup=False, soft_wrap=True)
    if late is not None:
        err.print(f"not every node Ready and etcd member voting {ready_timeout:.0f} s after the "
                  f"restore: {late}", markup=False)  # fmt: skip
    if late is not None or not report.healthy:
        raise SystemExit(1)


def restored_line(snapshot: bk.Snapshot, report: st.Report) -> str:
    """What the restore ends with: the snapshot, the etcd members that vote and the nodes
    Ready, counted from `report` (`raya status`' rows and cluster checks)."""
    from raya.operate import status as st

    members = {key.removeprefix("etcd "): check for key, check in report.cluster.items()
               if key.startswith("etcd ")}  # fmt: skip
    voting = [name for name, check in members.items() if check.state == st.HEALTHY]
    ready = [row.node for row in report.rows
             if row.checks["kubernetes"].text.startswith("Ready")]  # fmt: skip
    return (
        f"restored {snapshot.name} (taken {snapshot.taken:%Y-%m-%d %H:%M} UTC on "
        f"{snapshot.node}); etcd: {len(voting)} of {len(members)} members voting "
        f"({', '.join(voting) or 'none'}); {len(ready)} of {len(report.rows)} nodes Ready"
    )


def restore_snapshot(
    name: str, control_planes: list[str], servers: Mapping[str, Any], target: bk.Target,
    yes: bool, run: Remote, dry_run: bool = False, now: Callable[[], float] = time.monotonic,
) -> bk.Snapshot:  # fmt: skip
    """Check snapshot `name`, download it, show the steps, ask (unless `yes`), then run
    each step on its node through `run`, saying as each is done how many are, how many are
    left and the time since the first began (read from `now`); the first failure stops
    there, naming it. With `dry_run`, stop once the steps are shown: nothing asked, nothing
    run."""
    import contextlib
    import shlex
    import tempfile
    from pathlib import Path

    from raya.model.progress import progress
    from raya.operate import backups as bk

    with err.status(f"checking {name}..."):
        snapshot = bk.check_snapshot(target, name)
    with tempfile.TemporaryDirectory(prefix="raya-restore-") as folder:
        local = Path(folder) / snapshot.name
        with err.status(f"downloading {snapshot.name} ({_size(snapshot.size)})..."):
            digest = bk.download(target, snapshot, local)
        steps = bk.restore_plan(control_planes, snapshot, digest)
        out.print(f"restore {snapshot.name} (taken {snapshot.taken:%Y-%m-%d %H:%M} UTC on "
                  f"{snapshot.node}, sha256 {digest[:16]}...):", markup=False)  # fmt: skip
        for number, step in enumerate(steps, 1):
            out.print(f"  {number}. {step.node}: {step.what}", markup=False, soft_wrap=True)
            sent = f" < {snapshot.name}" if step.upload else ""
            out.print(f"       $ sudo {shlex.join(step.command)}{sent}", markup=False,
                      soft_wrap=True)  # fmt: skip
        if dry_run:
            return snapshot
        if not yes and not confirm(
            "Everything written to the cluster since the snapshot is lost. Go on?"
        ):
            raise SystemExit(1)
        started = now()
        for number, step in enumerate(steps, 1):
            with (
                err.status(f"{number}/{len(steps)} {step.node}: {step.what}..."),
                local.open("rb") if step.upload else contextlib.nullcontext() as stdin,
            ):
                code, printed = run(servers[step.node], step.command, stdin)
            if code != 0:
                raise DeployError(
                    f"restore stopped at step {number} ({step.node}: {step.what}), exit "
                    f"{code}: {_tail(printed)}. Steps 1-{number - 1} are done; see "
                    "docs/backups.md to finish by hand"
                )
            where = progress(number, len(steps) - number, now() - started)
            err.print(f"{where} {step.node}: {step.what}", markup=False, soft_wrap=True)
    return snapshot


def _tail(printed: str) -> str:
    lines = [line for line in printed.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(nothing printed)"
