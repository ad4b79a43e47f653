"""`raya status` and `raya roll`: watch the cluster, and apply drift one node at a time."""

from __future__ import annotations

import os  # loaded by the interpreter itself: free

from raya.commands.access import stack_outputs
from raya.commands.deploy import deploy_module, kube_api_client
from raya.commands.options import HCLOUD_ENDPOINT, NODE_NAMES, ROOT, STACK, project_root
from raya.commands.parser import Argument, Commands, Option
from raya.console import err, out
from raya.defaults import DRAIN_TIMEOUT, MAX_UNAVAILABLE, READY_TIMEOUT
from raya.errors import DeployError, RayaError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any

    from raya.operate import status as st

commands = Commands()  # what this module adds to `raya`


@commands.command(
    STACK, ROOT,
    Option("--json", kind="flag", dest="as_json", help="Print the report as JSON."),
    Option("--drift/--no-drift", default=True,
           help="Run a preview to find the nodes whose config or image drifted (slower)."),
    HCLOUD_ENDPOINT,
)  # fmt: skip
def status(
    *, stack: str, root: Path | None, as_json: bool, drift: bool, hcloud_endpoint: str
) -> None:
    """One row per node: server, snapshot against the pins, drift, DNS and Kubernetes.

    Then one row per autoscaled pool: its min and max, the servers of its node group, how
    many of them are registered as Nodes (unhealthy outside min..max, or one not Ready), and
    its pending pods: of the pods the scheduler could not place (PodScheduled False,
    reason Unschedulable; all of them are listed below the table), those whose node
    selector, required node affinity and tolerations admit a new node of the pool (its
    labels and taints, as the cluster autoscaler builds it). That is no simulation of the
    scheduler: resources, pod affinity and spread are not judged, so such a pod may still
    not fit, while any other pod never fits there. A pool at its max with such pods is
    unhealthy (the autoscaler cannot grow it); pending pods alone are not (they wait for
    the autoscaler's new node).

    Below it: the etcd members and the API servers that serve, the add-ons, and each control
    plane's newest snapshot in the bucket (unhealthy when it has none, or one older than
    twice the schedule's longest gap).

    Exits 1 when anything is not healthy, so scripts can use it.

    Needs HCLOUD_TOKEN; asks the zone's own name servers and the API with the cluster's CA."""
    report = collect(stack, project_root(root), drift, hcloud_endpoint)
    if as_json:
        import json

        out.print_json(json.dumps(report.as_json()))
    else:
        print_report(report)
    if not report.healthy:
        raise SystemExit(1)


def collect(stack: str, root: Path, drift: bool, hcloud_endpoint: str) -> st.Report:
    import datetime

    from raya.model.cron import Schedule
    from raya.model.pins import load_pins
    from raya.model.project import load_cluster
    from raya.operate import backups
    from raya.operate import status as st

    cluster = load_cluster(root, stack)
    pins = load_pins(root)
    with err.status("reading the stack's outputs..."):
        outputs = stack_outputs("status", stack, root)
    servers: dict[str, Any] = outputs.get("servers") or {}
    with err.status("asking Hetzner..."):
        facts, groups = st.hetzner_servers(
            os.environ.get("HCLOUD_TOKEN", ""),
            hcloud_endpoint,
            {name: str(entry.get("serverId", "")) for name, entry in servers.items()},
            cluster.config.cluster_name,
        )
    dns = st.Dns(address_of=st.system_address_of, port=st.DNS_PORT)
    with err.status("asking the zone's name servers..."):
        name_servers = list(outputs.get("nameServers") or [])
        records = {
            name: dns.a_records(name_servers, str(entry.get("dnsName", "")))
            for name, entry in servers.items()
        }
        parents = st.parent_name_servers(cluster.config.parent_zone)
        delegation = (
            parents
            if isinstance(parents, str)
            else dns.delegation(parents, cluster.config.zone_dns_name)
        )
    with err.status("asking the Kubernetes API..."):
        kubeconfig = outputs.get("kubeconfig")
        if isinstance(kubeconfig, str):
            nodes: dict[str, st.NodeFacts] | str = st.kubernetes_nodes(kubeconfig)
            addons = {
                **st.kubernetes_control_planes(kubeconfig, st.control_plane_addresses(outputs)),
                "API certificate": st.api_certificate(kubeconfig),
                **st.kubernetes_addons(kubeconfig),
            }
        else:
            nodes = "no kubeconfig in the stack: run `raya up`"
            addons = {"add-ons": st.unknown(nodes)}
    pools = []
    unschedulable: list[st.PendingPod] | str | None = None
    if cluster.autoscaled:
        from raya.nodes.autoscaler import node_group

        if isinstance(kubeconfig, str):
            with err.status("asking the Kubernetes API for unschedulable pods..."):
                unschedulable = st.kubernetes_unschedulable(kubeconfig)
        else:
            unschedulable = "no kubeconfig in the stack: run `raya up`"
        for pool in cluster.autoscaled:
            found = groups if isinstance(groups, str) else groups.get(node_group(cluster, pool), [])
            bounds = (pool.min_size or 0, pool.max_size or 0)  # both set: it is autoscaled
            labels, taints = st.pool_node(cluster, pool)
            pending = (
                None
                if isinstance(unschedulable, str)
                else [pod.name for pod in unschedulable if st.admits(labels, taints, pod)]
            )
            pools.append(st.pool_row(pool.name, *bounds, found, nodes, pending))
    with err.status("listing the backups..."):
        addons.update(backups.health(
            outputs.get("backups"),
            stack,
            [node.name for node in cluster.control_planes],
            Schedule(cluster.config.backup_schedule).longest_gap(),
            datetime.datetime.now(datetime.UTC),
        ))  # fmt: skip
    found_drift: dict[str, Any] | str | None = None
    if drift:
        with err.status("previewing to find drift..."):
            try:
                result = deploy_module("status").run("preview", root, stack, lambda _: None)
                found_drift = dict(result.drift)
            except DeployError as error:
                found_drift = f"preview failed: {error}"
    return st.assess(
        outputs,
        pins,
        cluster.config.cluster_name,
        servers=facts,
        records=records,
        delegation=delegation,
        nodes=nodes,
        drift=found_drift,
        extra=addons,
        pools=pools,
        unschedulable=unschedulable,
    )


def print_report(report: st.Report) -> None:
    from rich.markup import escape
    from rich.table import Table

    from raya.operate import status as st

    style = {st.HEALTHY: "green", st.UNHEALTHY: "red", st.UNKNOWN: "yellow", st.SKIPPED: "dim"}

    table = Table(show_lines=False)
    for column in ("node", *st.COLUMNS):
        table.add_column(column, overflow="fold")
    for row in report.rows:
        cells = (f"[{style[c.state]}]{escape(c.text)}[/]" for c in row.checks.values())
        table.add_row(row.node, *cells)
    out.print(table)
    if report.pools:
        pools = Table(show_lines=False)
        for column in ("autoscaled pool", "min", "max", "servers", "registered",
                       "pending pods", "state"):  # fmt: skip
            pools.add_column(column, overflow="fold")
        for pool in report.pools:
            servers = "?" if pool.servers is None else str(len(pool.servers))
            pending = "?" if pool.pending is None else str(len(pool.pending))
            state = f"[{style[pool.check.state]}]{escape(pool.check.text)}[/]"
            pools.add_row(pool.pool, str(pool.minimum), str(pool.maximum), servers,
                          str(len(pool.registered)), pending, state)  # fmt: skip
        out.print(pools)
        out.print(f"unschedulable pods: {escape(report.unschedulable_text())}")
    for name, check in report.cluster.items():
        out.print(f"{name}: [{style[check.state]}]{escape(check.text)}[/]")
    out.print("healthy" if report.healthy else "[red]not healthy[/]")


@commands.command(
    Argument("nodes", multiple=True,
             help=f"Nodes to roll, by name ({NODE_NAMES}), or autoscaled pools, by pool name "
             "(their old servers); if none, all drifting nodes and every autoscaled pool."),
    STACK, ROOT,
    Option("--dry-run", kind="flag",
           help="Print the plan; change nothing (without NODES it still runs a preview)."),
    Option("--drain-timeout", kind="seconds", default=DRAIN_TIMEOUT,
           help="Seconds to wait for a node's pods to be gone (evicted, then terminated)."),
    Option("--ready-timeout", kind="seconds", default=READY_TIMEOUT,
           help="Seconds to wait for a replaced node to be back from a new boot, Ready."),
    Option("--accept-local-data-loss", kind="flag",
           help="Roll nodes whose pods use local-path claims: their data is deleted with "
           "the server."),
    Option("--accept-volume-downtime", kind="flag",
           help="Roll the sole control plane although pods on it use Hetzner Volume claims, "
           "or a node whose pods' Hetzner Volumes no other node where they are could take: "
           "those pods are down until it is back."),
    Option("--max-unavailable", kind="max-unavailable", default=MAX_UNAVAILABLE,
           help="How many agents of each pool may be unavailable at once (cordoned, not "
           "Ready, or being replaced): a count (5) or a percentage of the pool, rounded "
           "down, at least 1 (10%); each batch is one targeted engine run. A pool's own "
           "maxUnavailable in the fleet file wins over it."),
    HCLOUD_ENDPOINT,
)  # fmt: skip
def roll(
    *, nodes: list[str], stack: str, root: Path | None, dry_run: bool, drain_timeout: float,
    ready_timeout: float, accept_local_data_loss: bool, accept_volume_downtime: bool,
    max_unavailable: Any, hcloud_endpoint: str,
) -> None:  # fmt: skip
    """Apply drift: the control planes one at a time, then the agents in batches.

    The control plane is replaced alone, and nothing else starts until it is back from a new
    boot, Ready, and every node is Ready. With several control planes, each goes only while
    every other one is Ready and a voting etcd member, is drained like an agent, and the next
    only once it votes again. Agents are cordoned and drained until their pods are gone and
    their volumes detached. Each old Node object is deleted before the new server registers,
    so that the new Node carries the new server's provider ID. The sole control plane is not
    drained: pods on it using Hetzner Volume claims stop the roll unless
    --accept-volume-downtime is given; so does a node whose pods use Hetzner Volumes that no
    other Ready, schedulable node where the volume is (its location) could take. A node whose
    pods use claims on its own disk
    (local-path) is not touched unless --accept-local-data-loss is given. The first failure
    stops the roll and names each node: rolled, in progress (and what state it was left
    in), or not touched; a roll run again picks up the nodes that still drift. Agents go in
    batches of at most --max-unavailable per pool, or the pool's own maxUnavailable where
    the fleet file gives one (counting the pool's nodes already
    cordoned, not Ready or not registered), each batch drained together (every eviction
    under its PodDisruptionBudget) and replaced by one targeted engine run. Each node's
    steps, every wait included, and the batches are printed first; --dry-run stops there.
    Before the first action, every node to roll must be one whose server Hetzner can create
    in its location now (its type in stock there, not deprecated past): else nothing is
    touched.

    An autoscaled pool's servers are the cluster autoscaler's: its old ones (not from the
    newest snapshot for the pins, or made before `raya up` applied the pool's current config)
    are annotated so that the autoscaler's own scale-down leaves them alone, cordoned,
    drained (under PodDisruptionBudgets), and deleted through Hetzner's API in batches of
    --max-unavailable (or its maxUnavailable); the autoscaler is restarted, and the next batch
    waits until it has brought the pool back (at least its min, no pod pending, new servers
    Ready from the newest snapshot). Refused, nothing touched, until the autoscaler runs the
    config `raya up` would apply now (run `raya up` after changing a pool or the pins).
    Needs HCLOUD_TOKEN for an autoscaled pool."""
    folder = project_root(root)
    from raya.model.fleet import fleet_file, load_fleet
    from raya.model.pins import load_pins
    from raya.model.project import load_cluster
    from raya.operate import roll as roll_model

    cluster = load_cluster(folder, stack)
    pins = load_pins(folder)
    deploy = deploy_module("roll")
    # Autoscaled pools by name among NODES; without NODES, every one.
    autoscaled = {pool.name: pool for pool in cluster.autoscaled}
    rolled_pools = [autoscaled[name] for name in nodes if name in autoscaled] if nodes else list(
        cluster.autoscaled
    )
    everything = not nodes
    nodes = [name for name in nodes if name not in autoscaled]
    drifting: list[str] = []
    if everything:
        with err.status("previewing to find drift..."):
            try:
                drifting = list(deploy.run("preview", folder, stack, lambda _: None).drift)
            except RayaError as error:  # whatever stops the preview
                raise DeployError(
                    f"roll without NODES runs a preview to find the drifting ones: {error}"
                ) from None
    steps = roll_model.plan([n.name for n in cluster.nodes], nodes, drifting)
    if not steps and not rolled_pools:
        err.print("nothing to roll: no node drifts", markup=False)
        return
    for step in steps:
        for line in step.describe():
            out.print(line, markup=False, soft_wrap=True)
    pools = {n.name: n.pool or "" for n in cluster.nodes}
    own = {
        pool.name: pool.max_unavailable
        for pool in load_fleet(fleet_file(folder)).pools
        if pool.max_unavailable is not None
    }
    theirs = "".join(f", {limit} of pool {name} (its maxUnavailable)"
                     for name, limit in sorted(own.items()))  # fmt: skip
    if steps:
        planned = roll_model.batches(steps, pools, max_unavailable, own)
        out.print(
            f"batches (--max-unavailable {max_unavailable} of each pool{theirs}; fewer while "
            "nodes of a pool are unavailable):",
            markup=False,
            soft_wrap=True,
        )
        for number, batch in enumerate(planned, 1):
            names = ", ".join(step.node for step in batch)
            out.print(f"  {number}. {names}", markup=False, soft_wrap=True)
    for pool in rolled_pools:
        _describe_pool(pool.name, own.get(pool.name, max_unavailable))
    if dry_run:
        return
    # Before the first drain: a server whose replacement Hetzner cannot create is not touched.
    if steps:
        deploy.check_replaceable(folder, stack, [step.node for step in steps])
    outputs = stack_outputs("roll", stack, folder)
    kubeconfig = outputs.get("kubeconfig")
    if not isinstance(kubeconfig, str):
        raise DeployError(f"stack {stack} has no kubeconfig output yet; run `raya up`")
    api = kube_api_client(kubeconfig)

    def say(line: str) -> None:
        err.print(line, markup=False, soft_wrap=True)

    def replace(names: Sequence[str]) -> None:
        deploy.run("up", folder, stack, _quiet_progress, replace=list(names), targeted=True)

    if steps:
        roll_model.Roll(
            kube=roll_model.Kubernetes(api),
            replace=replace,
            kubelet_version=pins.k3s.version,
            say=say,
            clock=roll_model.Clock(),
            drain_timeout=drain_timeout,
            ready_timeout=ready_timeout,
            accept_local_loss=accept_local_data_loss,
            accept_volume_downtime=accept_volume_downtime,
            control_planes=[n.name for n in cluster.nodes if roll_model.is_control_plane(n.name)],
            pools=pools,
            max_unavailable=max_unavailable,
            own_limits=own,
        ).run(steps)
        out.print(f"rolled {len(steps)} node(s)", markup=False)
    if not rolled_pools:
        return
    from raya.cloud.image import hcloud_client
    from raya.model.pins import label_selector, snapshot_labels
    from raya.nodes.autoscaler import node_group
    from raya.operate import autoscaler as au

    token = os.environ.get("HCLOUD_TOKEN", "")
    if not token:
        raise DeployError("rolling an autoscaled pool needs HCLOUD_TOKEN (its servers are "
                          "deleted through Hetzner's API); nothing was touched in its pools")
    manifests = outputs.get("autoscaler")
    if not isinstance(manifests, str) or not manifests:
        raise DeployError(f"stack {stack} has no autoscaler output yet; run `raya up`")
    import yaml

    secret = next(d for d in yaml.safe_load_all(manifests) if d.get("kind") == "Secret")
    selector = label_selector(snapshot_labels(pins, cluster.config.cluster_name))
    for pool in rolled_pools:
        pool_roll = au.PoolRoll(
            kube=roll_model.Kubernetes(api), api=api, say=say, clock=roll_model.Clock(),
            hetzner=hcloud_client(token, hcloud_endpoint), kubelet_version=pins.k3s.version,
            pool_name=pool.name, group=node_group(cluster, pool), min_size=pool.min_size or 0,
            stack_secret=secret, selector=selector, drain_timeout=drain_timeout,
            ready_timeout=ready_timeout, accept_local_loss=accept_local_data_loss,
            accept_volume_downtime=accept_volume_downtime, max_unavailable=max_unavailable,
            own_limits=own,
        )  # fmt: skip
        pool_steps = pool_roll.prepare()
        if pool_steps:
            pool_roll.run(pool_steps)
        out.print(f"pool {pool.name}: rolled {len(pool_steps)} server(s)", markup=False)


def _describe_pool(name: str, limit: Any) -> None:
    """An autoscaled pool's part of the plan: its servers are known only when it runs."""
    from raya.operate import autoscaler as au
    from raya.operate.roll import Step

    step = Step(f"pool {name} (autoscaled), each old server", au.ACTIONS)
    for line in step.describe():
        out.print(line, markup=False, soft_wrap=True)
    out.print(
        f"  its old servers (not from the newest snapshot, or made before `raya up` applied "
        f"its config) are found when the roll starts; batches of {limit} of its servers",
        markup=False,
        soft_wrap=True,
    )


def _quiet_progress(line: str) -> None:
    # Pulumi's own display, secrets masked: kept to the lines that say what changes.
    if line.lstrip().startswith(("+", "-", "~", "error", "warning")):
        err.print(line, markup=False, highlight=False, soft_wrap=True)
