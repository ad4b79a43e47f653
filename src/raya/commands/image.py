"""The `raya image` commands: build the FCOS snapshot iff it is missing; keep its pins current."""

from __future__ import annotations

import os  # loaded by the interpreter itself: free

from raya.commands.options import ROOT, project_root
from raya.commands.parser import BadParameter, Commands, Option
from raya.commands.registry import COMMANDS
from raya.console import err, out
from raya.defaults import (
    AUTOSCALER_CHARTS,
    CERT_MANAGER_CHARTS,
    DEFAULT_STACK,
    EXTERNAL_DNS_CHARTS,
    FCOS_BUILDS_URL,
    FCOS_STREAMS,
    HCLOUD_API_URL,
    HETZNER_CHARTS,
    K3S_CHANNELS_URL,
    K3S_RELEASES_URL,
    K3S_SELINUX_API_URL,
    K3S_SELINUX_RELEASES_URL,
)
from raya.errors import ImageError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from pathlib import Path

    from raya.cloud.image import AnyPin
    from raya.model.pins import ChartPin

commands = Commands()  # what this module adds to `raya`
commands.group("image", help=COMMANDS["image"][1])

FCOS_BUILDS = Option(
    "--fcos-builds-url", kind="url", envvar="RAYA_FCOS_BUILDS_URL", default=FCOS_BUILDS_URL,
    help="Where FCOS stream and build metadata and images are published (a mirror, a test).",
)  # fmt: skip
K3S_RELEASES = Option(
    "--k3s-releases-url", kind="url", envvar="RAYA_K3S_RELEASES_URL", default=K3S_RELEASES_URL,
    help="Where k3s release binaries and their sha256sum-amd64.txt and -arm64.txt are published.",
)  # fmt: skip
K3S_SELINUX_API = Option(
    "--k3s-selinux-api-url", kind="url", envvar="RAYA_K3S_SELINUX_API_URL",
    default=K3S_SELINUX_API_URL,
    help="GitHub's API for k3s-selinux's repository: its releases and their RPMs' sha256.",
)  # fmt: skip


def _say(message: str) -> None:
    out.print(message, markup=False, highlight=False, soft_wrap=True)


@commands.command(
    Option("--stack", "-s", kind="stack", help="Stack whose cluster the snapshot is built for.",
           default=DEFAULT_STACK),
    Option("--dry-run", kind="flag",
           help="Check everything (Hetzner, pins, Packer) and print the Packer commands "
           "instead of running them."),
    ROOT,
    Option("--hcloud-endpoint", kind="url", envvar="HCLOUD_ENDPOINT", default=HCLOUD_API_URL,
           help="Hetzner Cloud API endpoint (also passed to Packer)."),
    FCOS_BUILDS, K3S_RELEASES,
    Option("--k3s-selinux-releases-url", kind="url", envvar="RAYA_K3S_SELINUX_RELEASES_URL",
           default=K3S_SELINUX_RELEASES_URL,
           help="Where k3s-selinux's release RPMs are downloaded from (passed to Packer)."),
    K3S_SELINUX_API, group="image",
)  # fmt: skip
def build(
    *, stack: str, dry_run: bool, root: Path | None, hcloud_endpoint: str,
    fcos_builds_url: str, k3s_releases_url: str, k3s_selinux_releases_url: str,
    k3s_selinux_api_url: str,
) -> None:  # fmt: skip
    """Build the FCOS snapshot of each architecture the fleet uses (x86, and arm for cax*
    types) with Packer, skipping each that Hetzner already has with its labels.

    Each is built where a node of its architecture runs, on the server type of that
    architecture Hetzner sells there, available and not deprecated, with the smallest disk
    (the snapshot's minimum), then the cheapest; refused, nothing created, where none is.

    Needs HCLOUD_TOKEN. The pinned sha256s are checked against upstream before building;
    pins without the aarch64 ones an arm node needs are refused first, naming
    `raya image pins --complete`.
    """
    root = project_root(root)
    import datetime
    import shlex

    from raya.cloud.image import (
        Endpoints,
        check_pins,
        find_packer,
        find_snapshots,
        packer_commands,
        packer_environment,
        packer_variables,
        run_packer,
        template_path,
        unpinned,
    )
    from raya.model.pins import label_selector, load_pins, snapshot_labels
    from raya.model.project import load_cluster

    cluster = load_cluster(root, stack)
    pins = load_pins(root)
    template = template_path(root)
    if not template.is_file():
        raise ImageError(f"{template}: the Packer template is missing")
    architectures = sorted({node.architecture for node in cluster.nodes})
    # Before Hetzner or Packer is asked: a pin without the sha256 of an architecture the
    # fleet runs cannot build its snapshot, and its fix needs no token.
    unpinned_lines = [line for arch in architectures for line in unpinned(root, pins, arch)]
    if unpinned_lines:
        raise ImageError("; ".join(unpinned_lines) + "; nothing was built")
    labels = snapshot_labels(pins, cluster.config.cluster_name)
    token = os.environ.get("HCLOUD_TOKEN", "")
    if not token:
        raise ImageError(
            "HCLOUD_TOKEN is not set: `export HCLOUD_TOKEN=<token>`, a read and write API "
            "token of the Hetzner Cloud project (Security > API tokens in the Hetzner console)"
        )
    missing = []
    for architecture in architectures:
        with err.status(f"asking Hetzner for the {architecture} snapshot..."):
            snapshots = find_snapshots(token, labels, hcloud_endpoint, architecture)
        for snapshot in snapshots:
            _say(
                f"{architecture} snapshot {snapshot.id} ({snapshot.description}, "
                f"{snapshot.status}, created {snapshot.created}) already has the labels "
                f"{label_selector(labels)}"
            )
        if not snapshots:
            _say(f"no {architecture} snapshot has the labels {label_selector(labels)}")
            missing.append(architecture)
    if not missing:
        _say("nothing to build")
        return
    from raya.cloud import catalogue

    with err.status("reading Hetzner's catalogue of server types..."):
        offers = catalogue.offers(token, hcloud_endpoint, None, ImageError)
    now = datetime.datetime.now(datetime.UTC)
    builders = {}
    for architecture in missing:
        # Snapshots serve every location: built where a node of that architecture runs.
        places = [
            node.location or cluster.config.location
            for node in cluster.nodes
            if node.architecture == architecture
        ]
        builders[architecture] = catalogue.build_type(
            offers, list(dict.fromkeys(places)), architecture, now,
            f"where the fleet's {architecture} nodes run",
        )  # fmt: skip
        location, server_type = builders[architecture]
        _say(f"{architecture} build server: {server_type} in {location}")
    packer = find_packer()
    endpoints = Endpoints(
        fcos_builds=fcos_builds_url,
        k3s_releases=k3s_releases_url,
        k3s_selinux_releases=k3s_selinux_releases_url,
        k3s_selinux_api=k3s_selinux_api_url,
    )
    for architecture in missing:
        with err.status(f"checking the {architecture} pins against upstream..."):
            check_pins(root, pins, endpoints, architecture)
        _say(
            f"{architecture} pins match upstream: FCOS {pins.fcos.version}, "
            f"k3s {pins.k3s.version}, k3s-selinux {pins.k3s_selinux.version}"
        )
    for architecture in missing:
        variables = packer_variables(
            cluster.config, endpoints, *builders[architecture], architecture
        )
        commands = packer_commands(packer, template, variables)
        if dry_run:
            _say(
                f"would run for {architecture} (HCLOUD_TOKEN and HCLOUD_ENDPOINT in the "
                "environment):"
            )
            for argv in commands:
                _say(f"  {shlex.join(argv)}")
            continue
        env = packer_environment(token, hcloud_endpoint)
        for argv in commands:
            _say(f"$ {shlex.join(argv)}")
            run_packer(argv, env, root)
        _say(f"built the {architecture} snapshot labelled {label_selector(labels)}")


def _describe_chart(name: str, pin: ChartPin) -> str:
    return f"{name} {pin.version} (sha256 {pin.digest or 'not recorded'})"


def _describe(pin: AnyPin) -> str:
    from raya.model.pins import ChartPins, FcosPin

    if isinstance(pin, ChartPins):
        return ", ".join(_describe_chart(name, chart) for name, chart in pin.by_name().items())
    stream = f"{pin.stream} " if isinstance(pin, FcosPin) else ""
    return f"{stream}{pin.version} (sha256 {pin.sha256 or 'not recorded'})"


@commands.command(
    Option("--update", kind="flag", help="Rewrite the pin files that are not current."),
    Option("--complete", kind="flag",
           help="Add the sha256s the pins lack (FCOS' and k3s' aarch64 ones an ARM pool needs, "
           "the k3s-selinux RPM's), read from the pinned releases themselves: no version "
           "moves, nothing else changes."),
    Option("--stream", help=f"FCOS stream to follow: {', '.join(FCOS_STREAMS)}.",
           show_default="the pinned stream"),
    ROOT, FCOS_BUILDS,
    Option("--k3s-channels-url", kind="url", envvar="RAYA_K3S_CHANNELS_URL",
           default=K3S_CHANNELS_URL,
           help="k3s release channel server (its stable channel is followed)."),
    K3S_RELEASES, K3S_SELINUX_API,
    Option("--cert-manager-charts-url", kind="url", envvar="RAYA_CERT_MANAGER_CHARTS_URL",
           default=CERT_MANAGER_CHARTS,
           help="Helm repository of the cert-manager chart (its index.yaml is read)."),
    Option("--external-dns-charts-url", kind="url", envvar="RAYA_EXTERNAL_DNS_CHARTS_URL",
           default=EXTERNAL_DNS_CHARTS,
           help="Helm repository of the external-dns chart (its index.yaml is read)."),
    Option("--hetzner-charts-url", kind="url", envvar="RAYA_HETZNER_CHARTS_URL",
           default=HETZNER_CHARTS,
           help="Helm repository of Hetzner's cloud controller and CSI charts (index.yaml)."),
    Option("--autoscaler-charts-url", kind="url", envvar="RAYA_AUTOSCALER_CHARTS_URL",
           default=AUTOSCALER_CHARTS,
           help="Helm repository of the cluster autoscaler's chart (its index.yaml is read; "
           "only releases made for the autoscaler raya runs, or an older one, are taken)."),
    group="image",
)  # fmt: skip
def pins(
    *, update: bool, complete: bool, stream: str | None, root: Path | None,
    fcos_builds_url: str, k3s_channels_url: str, k3s_releases_url: str,
    k3s_selinux_api_url: str, cert_manager_charts_url: str, external_dns_charts_url: str,
    hetzner_charts_url: str, autoscaler_charts_url: str,
) -> None:  # fmt: skip
    """Compare the pins with the newest FCOS release of the stream, the stable k3s, the
    latest k3s-selinux release (its CoreOS RPM's sha256 as GitHub publishes it) and the
    newest releases of the add-ons' Helm charts (with the digests their index publishes);
    of the cluster autoscaler's chart, the newest made for the autoscaler raya runs or an
    older one (raya names its image; the chart gives the templates). A k3s pin of another
    Kubernetes minor than that autoscaler's is a warning naming the constant to move (the
    update still moves k3s).

    Without --update, only reports; with it, rewrites the pins that changed (old -> new).
    With --complete, adds the sha256s the pins lack for the releases they pin (FCOS' and
    k3s' aarch64 ones an ARM pool needs, the k3s-selinux RPM's), and moves nothing.
    """
    if stream is not None and stream not in FCOS_STREAMS:
        raise BadParameter(
            f"{stream!r}; accepted: {', '.join(FCOS_STREAMS)}", param_hint="--stream"
        )
    if complete and (update or stream is not None):
        raise BadParameter(
            "keeps the pinned releases; --update and --stream move them: use one or the other",
            param_hint="--complete",
        )
    root = project_root(root)
    if complete:
        _complete(root, fcos_builds_url, k3s_releases_url, k3s_selinux_api_url)
        return
    from raya.cloud.image import (
        ARM_ARCH,
        Endpoints,
        PinChange,
        autoscaler_skew,
        chart_updates,
        latest_pins,
        pin_changes,
        unpinned,
        write_pins,
    )
    from raya.model.pins import chart_pins_path, load_chart_pins, load_pins

    current = load_pins(root)
    current_charts = load_chart_pins(root)
    endpoints = Endpoints(
        fcos_builds=fcos_builds_url,
        k3s_channels=k3s_channels_url,
        k3s_releases=k3s_releases_url,
        k3s_selinux_api=k3s_selinux_api_url,
        cert_manager_charts=cert_manager_charts_url,
        external_dns_charts=external_dns_charts_url,
        hetzner_charts=hetzner_charts_url,
        autoscaler_charts=autoscaler_charts_url,
    )
    with err.status("looking up the newest releases..."):
        latest = latest_pins(stream or current.fcos.stream, endpoints)
        latest_charts, problems = chart_updates(root, current_charts, endpoints)
    changes = (
        *pin_changes(root, current, latest),
        PinChange(chart_pins_path(root), current_charts, latest_charts),
    )
    for change in changes:
        name = change.path.relative_to(root)
        if not change.changed:
            _say(f"{name}: current, {_describe(change.old)}")
        elif update:
            _say(f"{name}: {_describe(change.old)} -> {_describe(change.new)}")
        else:
            _say(f"{name}: outdated, {_describe(change.old)}; newest {_describe(change.new)}")
    # The k3s the pins will hold: the autoscaler is raya's, so only raya can follow it.
    skew = autoscaler_skew(root, (latest if update else current).k3s)
    for problem in (*problems, *([skew] if skew else [])):
        err.print(f"warning: {problem}", markup=False, soft_wrap=True)
    if update:
        write_pins(changes)
        return
    for line in unpinned(root, current, ARM_ARCH):  # the fix that moves no version
        _say(line)
    if any(change.changed for change in changes):
        _say("run `raya image pins --update` to rewrite them")
    if problems:
        raise ImageError(
            "the chart pins do not match their repositories (see above): review the change "
            "upstream, then `raya image pins --update` moves to the newest releases"
        )
    if skew:
        raise ImageError(
            "the pinned k3s is not of the cluster autoscaler's Kubernetes minor (see above)"
        )


def _complete(
    root: Path, fcos_builds_url: str, k3s_releases_url: str, k3s_selinux_api_url: str
) -> None:
    """`raya image pins --complete`: every missing sha256 read before any pin is written."""
    import dataclasses

    from raya.cloud.image import Endpoints, complete_pins, pin_changes, write_pins
    from raya.model.pins import load_pins

    current = load_pins(root)
    endpoints = Endpoints(
        fcos_builds=fcos_builds_url,
        k3s_releases=k3s_releases_url,
        k3s_selinux_api=k3s_selinux_api_url,
    )
    with err.status("reading the pinned releases' missing sha256s..."):
        completed = complete_pins(current, endpoints)
    changes = pin_changes(root, current, completed)
    for change in changes:
        name = change.path.relative_to(root)
        old, new = dataclasses.asdict(change.old), dataclasses.asdict(change.new)
        added = [f"{field} added: {new[field]}" for field in new if old[field] != new[field]]
        _say(f"{name}: {_describe(change.old)}; {'; '.join(added)}" if added
             else f"{name}: complete, {_describe(change.old)}")  # fmt: skip
    write_pins(changes)
