"""The `raya render` command: every node's Butane and Ignition config, offline."""

from __future__ import annotations

from raya.commands.options import EXAMPLE, ROOT, select_project
from raya.commands.parser import Commands, Option
from raya.defaults import DEFAULT_STACK
from raya.errors import RenderError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from pathlib import Path

    from raya.cloud.snapshots import Place
    from raya.model.config import StackConfig

# Stands for the first control plane's volume (the next ones count up from it), whose id
# Hetzner decides when it is created.
EXAMPLE_VOLUME_ID = "100000001"
THROWAWAY = (
    "secrets: THROWAWAY, generated for this render only (join token, CAs, service account "
    "keys, the cluster's Hetzner token, SSH host keys, object storage keys), and made-up "
    f"volume ids (from {EXAMPLE_VOLUME_ID}); these configs show what the nodes get but cannot "
    "join a real cluster. `raya up` renders with the stack's own."
)

commands = Commands()  # what this module adds to `raya`


@commands.command(
    Option("--stack", "-s", kind="stack", help="Stack to render.", show_default=DEFAULT_STACK),
    ROOT,
    Option("--out", "-o", kind="path",
           help="Folder made anew with each node's <node>.bu and <node>.ign; one holding "
           "files the last render did not write is refused.",
           default="out", dest="out_dir"),
    EXAMPLE,
)  # fmt: skip
def render(*, stack: str | None, root: Path | None, out_dir: Path, example: bool) -> None:
    """Render every node's Butane and Ignition config and print their sizes.

    The secrets are throwaway ones generated on the spot, and said so: the real join token,
    CAs and service account keys exist only in the deployment's state.
    """
    root, stack, _ = select_project(root, stack, example, None)
    from dataclasses import replace

    from raya.console import counted, err, out
    from raya.model.config import NAMESPACE, architecture
    from raya.model.pins import load_chart_pins
    from raya.model.project import load_cluster
    from raya.nodes.identity import generate_example_secrets
    from raya.nodes.render import IGNITION_LIMIT, render_cluster, render_pool

    cluster = load_cluster(root, stack)
    config = cluster.config
    err.print(THROWAWAY, markup=False, soft_wrap=True)
    secrets = generate_example_secrets(node.name for node in cluster.nodes)
    store = _snapshot_place(root, config)
    assert secrets.snapshot_store is not None  # the throwaway keys, for the place configured
    secrets = replace(
        secrets,
        snapshot_store=replace(
            secrets.snapshot_store,
            endpoint=store.endpoint,
            bucket=store.bucket,
            folder=store.folder,
            region=store.region,
        ),
    )
    charts = load_chart_pins(root)
    volumes = {
        node.name: str(int(EXAMPLE_VOLUME_ID) + k) for k, node in enumerate(cluster.control_planes)
    }
    rendered = render_cluster(cluster, secrets, charts=charts, volume_id=volumes)
    # An autoscaled pool's one config, named after its node group (`<clusterName>-<pool>`).
    pools = [render_pool(cluster, pool, secrets) for pool in cluster.autoscaled]
    _write(out_dir, {
        f"{name}{suffix}": data
        for name, butane, ignition in (
            *((node.node.name, node.butane, node.ignition) for node in rendered),
            *((pool.group, pool.butane, pool.ignition) for pool in pools),
        )
        for suffix, data in ((".bu", butane.encode()), (".ign", ignition))
    })  # fmt: skip

    rows = [(*_HEADER, f"Ignition / {IGNITION_LIMIT:,} B")]
    for node in rendered:
        size = len(node.ignition)
        rows.append((
            node.node.name,
            node.node.role,
            node.node.pool or "-",
            node.node.server_type,
            node.node.architecture,
            node.node.location or config.location,
            # The public mode attaches no private address: its primary IP is Hetzner's pick.
            "none (public mode)" if config.public else str(node.node.private_ip),
            cluster.dns_name(node.node),
            ",".join(f"{key}={value}" for key, value in node.node.labels) or "-",
            ",".join(node.node.taints) or "-",
            f"{size:,} B ({size / IGNITION_LIMIT:.0%})",
        ))  # fmt: skip
    for pool in pools:
        size = len(pool.ignition)
        spec = pool.pool
        rows.append((
            # Every node the autoscaler makes boots this one config, under a name it chooses.
            f"{pool.group}-*",
            f"agent, autoscaled {spec.min_size}-{spec.max_size}",
            spec.name,
            spec.server_type,
            architecture(spec.server_type),
            spec.location or config.location,
            f"{spec.addresses} (Hetzner's pick)",
            "-",
            ",".join(f"{key}={value}" for key, value in spec.labels) or "-",
            ",".join(spec.taints) or "-",
            f"{size:,} B ({size / IGNITION_LIMIT:.0%})",
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        out.print(line.rstrip(), markup=False, soft_wrap=True)
    users = config.authorized_users
    err.print(
        f"SSH keys: fetched by every node at boot and every 15 minutes from GitHub, for "
        f"{counted(len(users), 'user')} ({', '.join(users)})",
        markup=False,
        soft_wrap=True,
    )
    origin = "a GCS bucket `raya up` makes" if store.made else f"{NAMESPACE}:backupS3"
    if store.made and config.from_recovery_kit:
        origin = f"the bucket of the recovery kit {config.from_recovery_kit}"
    err.print(
        f"etcd snapshots: on the schedule '{config.backup_schedule}', "
        f"{counted(config.backup_retention, 'scheduled snapshot')} kept, uploaded to bucket "
        f"{store.bucket}, folder {store.folder}, at {store.endpoint} (region {store.region}): "
        f"{origin}",
        markup=False,
        soft_wrap=True,
    )
    err.print(
        f"wrote the .bu and .ign files of {counted(len(rendered), 'node')}"
        + (f" and {counted(len(pools), 'autoscaled pool')}" if pools else "")
        + f" to {out_dir}",
        markup=False,
    )


_HEADER = (
    "node", "role", "pool", "type", "arch", "location", "private address", "DNS name",
    "labels", "taints",
)  # fmt: skip
# In the output folder: the files the render wrote there, one a line. The next render
# replaces a folder holding those only: never one with anything else in it.
MANIFEST = ".raya-render"


def _snapshot_place(root: Path, config: StackConfig) -> Place:
    """Where the deployment sends the snapshots; a kit's bucket is read from the kit."""
    from raya.cloud import kit as recovery
    from raya.cloud.snapshots import place

    if config.backup_s3 is None and config.from_recovery_kit:
        kit = recovery.load(recovery.resolve(root, config.from_recovery_kit), config)
        return place(config, kit.backups.bucket)
    return place(config)


def _write(folder: Path, files: dict[str, bytes]) -> None:
    """`folder` made anew holding `files` (by name), readable by their owner only (they hold
    throwaway secrets): written whole in a fresh folder beside it, which then takes its
    place, so that the files of nodes no longer in the fleet go and a failure leaves the old
    folder as it was. A folder holding anything the last render did not write is refused."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from raya.files import write_atomically

    target = folder.resolve()
    try:
        if target.exists():
            _check_own(folder, target)
        target.parent.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.new-"))
        try:
            for name, data in files.items():
                write_atomically(fresh / name, data, 0o600)
            listing = "".join(f"{name}\n" for name in sorted(files)).encode()
            write_atomically(fresh / MANIFEST, listing, 0o600)
            if not target.exists():
                os.replace(fresh, target)
                return
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old-"))
            os.replace(target, old)  # onto an empty folder, which rename(2) allows
            try:
                os.replace(fresh, target)
            except OSError:
                os.replace(old, target)
                raise
            shutil.rmtree(old)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    except OSError as error:
        raise RenderError(f"{error.filename}: cannot write: {error.strerror}") from None


def _check_own(folder: Path, target: Path) -> None:
    """`target` (`folder`, resolved) holds what a render wrote, and nothing else."""
    import os

    if not target.is_dir():
        raise RenderError(f"{folder}: not a folder (--out)")
    manifest = target / MANIFEST
    listed = manifest.read_text(encoding="utf-8").split() if manifest.is_file() else []
    unknown = sorted(set(os.listdir(target)) - {*listed, MANIFEST})
    if unknown:
        raise RenderError(
            f"{folder / unknown[0]}: not written by raya render (not listed in "
            f"{folder / MANIFEST}), and the render replaces the whole folder; accepted: an "
            "--out folder holding only what raya render wrote there, or a new one: move the "
            "file away or choose another --out"
        )
