"""`storage`: Ignition's storage rules and Butane's fcos ones, on the translated lists.

They run once a storage section is translated (trees expanded, `with_mount_unit` noted),
because most of them relate entries to one another: partitions of a disk, filesystems on
disks, hard links to directories. Each rule names its source in Ignition (config/v3_x/types)
or Butane (config/fcos/v1_x); findings are reported at Butane paths, and every finding is
reported, not just the first.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import TYPE_CHECKING, Any

from raya.butane.checks import abs_path, go_clean, unique
from raya.butane.context import IGNITION, SOURCE
from raya.butane.source import Path

if TYPE_CHECKING:
    from raya.butane.context import Json, Translator

_NODE_LISTS = ("directories", "files", "links")  # Ignition's struct order (duplicates)
_BOOT_DISK = "/dev/disk/by-id/coreos-boot-disk"
_GUID = re.compile(r"|[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
# Ignition filesystem.go: mkfs' label limits, in bytes.
_LABEL_LIMITS = {"ext4": 16, "btrfs": 256, "xfs": 12, "swap": 15, "vfat": 11}
# Ignition raid.go: the levels mdadm takes, and those that cannot have spares.
_RAID_LEVELS = ("linear", "raid0", "0", "stripe", "raid1", "1", "mirror", "raid4", "4",
                "raid5", "5", "raid6", "6", "raid10", "10")
_NO_SPARES = ("linear", "raid0", "0", "stripe")
_CLEVIS_PINS = ("tpm2", "tang", "sss")
# Butane config/fcos/v1_6 validate.go: mount units only for paths under /etc or /var.
_MOUNTABLE = re.compile(r"/(etc|var)(/|$)")
_ROOT_MIN_MIB = 8192  # Butane: "root should have 8GiB of space assigned"
# FCOS's own partitions: reusing a label with another number makes a new partition.
_RESERVED_LABELS = {"BIOS-BOOT": 1, "PowerPC-PReP-boot": 1, "EFI-SYSTEM": 2, "boot": 3, "root": 4}


def check(t: Translator, out: Json, path: Path) -> None:
    """Every storage rule, on the final lists (tree-generated entries included)."""
    disks = out.get("disks", ())
    with t.during(SOURCE):  # Butane's own rules (config/fcos/v1_x validate.go)
        for index, disk in enumerate(disks):
            _fcos_partitions(t, disk, (*path, "disks", index))
        mounted = {
            p[len(path) + 1] for p, _ in t.mounts if p[: len(path) + 1] == (*path, "filesystems")
        }
        for index, fs in enumerate(out.get("filesystems", ())):
            _fcos_mount_path(t, fs, (*path, "filesystems", index), index in mounted)
    with t.during(IGNITION):
        _ignition(t, out, path)
    for disk in disks:
        for partition in disk.get("partitions", ()):
            # Ignition's `number` is a plain int with omitempty: 0 is not written.
            if partition.get("number") == 0:
                del partition["number"]


def _ignition(t: Translator, out: Json, path: Path) -> None:
    _nodes(t, out, path)
    for kind, key in (("disks", "device"), ("filesystems", "device"), ("luks", "name"),
                      ("raid", "name")):
        unique(t, out.get(kind, ()), key, (*path, kind))
    for index, disk in enumerate(out.get("disks", ())):
        where = (*path, "disks", index)
        abs_path(t, disk.get("device"), (*where, "device"))
        partitions = disk.get("partitions", ())
        for number, partition in enumerate(partitions):
            _partition(t, partition, (*where, "partitions", number))
        unique(t, [_partition_key(p) for p in partitions], "", (*where, "partitions"))
        _disk(t, partitions, (*where, "partitions"))
    for index, fs in enumerate(out.get("filesystems", ())):
        _filesystem(t, fs, (*path, "filesystems", index))
    _filesystems_on_disks(t, out, path)
    for index, luks in enumerate(out.get("luks", ())):
        _luks(t, luks, (*path, "luks", index))
    for index, raid in enumerate(out.get("raid", ())):
        _raid(t, raid, (*path, "raid", index))
    _hard_links(t, out, path)


def _nodes(t: Translator, out: Json, path: Path) -> None:
    # Ignition storage.go and validate.go: one path per node across directories, files and
    # links (checked in that order, so the later kind is the duplicate); no node below a link.
    seen: set[str] = set()
    # Each link's path as a directory prefix; str.startswith tries them all in one call.
    below_links = tuple(f"{link}/" for entry in out.get("links", ()) if (link := entry.get("path")))
    for kind in _NODE_LISTS:
        for index, entry in enumerate(out.get(kind, ())):
            where = t.origins.get(id(entry), (*path, kind, index))
            generated = id(entry) in t.origins
            node_path = entry.get("path", "")
            abs_path(t, node_path, where if generated else (*where, "path"))
            if node_path in seen:
                t.error(where, "duplicate entry defined (files, directories and links must "
                        "have distinct paths)")
            seen.add(node_path)
            if node_path.startswith(below_links):
                t.error(where, f"{kind[:-1]} path includes a link defined in storage.links")
            if kind == "files" and entry.get("overwrite") and "source" not in entry.get(
                "contents", {}
            ):
                t.error((*where, "overwrite"), "overwrite must be false if source is unspecified")
            if kind == "links" and not entry.get("target"):
                t.error((*where, "target"), "link target is required")


def _partition(t: Translator, p: Json, path: Path) -> None:
    # Ignition partition.go Validate.
    if p.get("shouldExist") is False and (
        p.get("label") is not None or p.get("typeGuid") or p.get("guid")
        or p.get("startMiB") is not None or p.get("sizeMiB") is not None
    ):
        t.error(path, "shouldExist specified false with other options also specified")
    if not p.get("number") and p.get("label") is None:
        t.error(path, "a partition number >= 1 or a label must be specified")
    label = p.get("label")
    if label is not None:
        if len(label.encode("utf-8")) > 36:  # 36 UTF-16 units in GPT; Ignition counts bytes
            t.error((*path, "label"), "partition labels may not exceed 36 characters")
        elif ":" in label:  # sgdisk splits its arguments at colons
            t.error((*path, "label"), "partition label will be truncated to text before the "
                    "colon")
    for key, field in (("guid", "guid"), ("typeGuid", "type_guid")):
        if p.get(key) is not None and not _GUID.fullmatch(p[key]):
            t.error((*path, field),
                    "doesn't match the form \"01234567-89AB-CDEF-EDCB-A98765432101\"")


def _partition_key(p: Json) -> str:
    """Ignition partition.go Key(): partitions are the same if number or label say so."""
    if p.get("number"):
        return f"number:{p['number']}"
    return "" if p.get("label") is None else f"label:{p['label']}"


def _disk(t: Translator, partitions: Any, path: Path) -> None:
    # Ignition disk.go Validate: each rule names the second partition at fault.
    by_number: dict[int, list[int]] = {}
    for index, p in enumerate(partitions):
        if p.get("number"):  # 0 means "next free number": many may say so
            by_number.setdefault(p["number"], []).append(index)
    collision = next((indexes[1] for indexes in by_number.values() if len(indexes) > 1), None)
    if collision is not None:
        t.error((*path, collision), "partition numbers collide")
    overlap = _overlap(partitions)
    if overlap is not None:
        t.error((*path, overlap), "partitions overlap")
    if any(p.get("shouldExist") is False for p in partitions) and any(
        not p.get("number") for p in partitions
    ):
        t.error(path, "shouldExist is false for a partition and other partition(s) has start "
                "or size 0")
    labels: set[str] = set()
    for index, p in enumerate(partitions):
        label = p.get("label")
        if label is not None:
            if label in labels:
                t.error((*path, index), "cannot use the same partition label twice")
                break
            labels.add(label)


def _overlap(partitions: Any) -> int | None:
    """Ignition's partitionsOverlap: the index of the first partition another one overlaps.
    Only partitions with both start and size are placed; a start of 0 is placed by sgdisk."""
    def placed(p: Json) -> bool:
        return p.get("startMiB") is not None and p.get("sizeMiB") is not None and p["startMiB"]

    def end(p: Json) -> int:
        return int(p["startMiB"] + p["sizeMiB"] - 1 if p["sizeMiB"] else p["startMiB"])

    for i, p in enumerate(partitions):
        if not placed(p):
            continue
        for j, o in enumerate(partitions):
            if i == j or not placed(o):
                continue
            if (o["startMiB"] <= p["startMiB"] <= end(o) or o["startMiB"] <= end(p) <= end(o)
                    or (p["startMiB"] < o["startMiB"] and end(p) > end(o))):
                return j
    return None


def _fcos_partitions(t: Translator, disk: Json, path: Path) -> None:
    """Butane's fcos checks on a disk's partitions (config/fcos/v1_x translate/validate)."""
    partitions = disk.get("partitions", ())
    wipe = bool(disk.get("wipeTable"))
    for index, p in enumerate(partitions):
        where = (*path, "partitions", index)
        label = p.get("label")
        if not wipe and label in _RESERVED_LABELS and p.get("number", 0) != _RESERVED_LABELS[label]:
            t.warn((*where, "label"),
                   f"incorrect partition number; a new partition will be created using "
                   f"reserved label {label} (its number is {_RESERVED_LABELS[label]})")
        # fcos 1.6 validate.go: without a number, a label never matches an existing partition.
        if (t.minor >= 6 and not wipe and disk.get("device") != _BOOT_DISK
                and not p.get("number") and label is not None):
            t.warn((*where, "number"), "partitions cannot be reused by label; number must be "
                   f"specified except on boot disk ({_BOOT_DISK}) or when wipe_table is true")
        if label == "root":
            _root(t, partitions, index, where)


def _root(t: Translator, partitions: Any, index: int, path: Path) -> None:
    # Butane (fcos translate, TestRootPartitionConstraints): the OS needs 8 GiB, and a root
    # filling the free space cannot grow past a partition sgdisk places after it.
    size = partitions[index].get("sizeMiB")
    if size and size < _ROOT_MIN_MIB:
        t.warn((*path, "size_mib"), "root should have 8GiB of space assigned")
    if not size and any(not p.get("startMiB") for p in partitions[index + 1:]):
        t.warn((*path, "label"), "root partition cannot expand; it is set to fill available "
               "space but is followed by an auto-positioned partition")


def _filesystem(t: Translator, fs: Json, path: Path) -> None:
    # Ignition filesystem.go validateFormat and validateLabel.
    fs_format, label = fs.get("format"), fs.get("label")
    if not fs_format and (fs.get("path") or label or fs.get("uuid") or fs.get("wipeFilesystem")
                          or fs.get("mountOptions") or fs.get("options")):
        t.error((*path, "format"), "format cannot be empty when path, label, uuid, "
                "wipeFilesystem, options, or mountOptions is specified")
    if label:
        limit = _LABEL_LIMITS.get(fs_format or "")
        if not fs_format:
            t.error((*path, "label"), "filesystem must specify format if label is specified")
        elif limit is not None and len(label.encode("utf-8")) > limit:
            t.error((*path, "label"), f"filesystem labels cannot be longer than {limit} "
                    f"characters when using {fs_format}")


def _fcos_mount_path(t: Translator, fs: Json, path: Path, with_mount_unit: bool) -> None:
    # fcos 1.6 validate.go: a generated mount unit only for /etc or /var and below.
    if (t.minor >= 6 and with_mount_unit and fs.get("path") is not None
            and not _MOUNTABLE.match(fs["path"])):
        t.error((*path, "path"), "path must be under /etc or /var if with_mount_unit is true")


def _filesystems_on_disks(t: Translator, out: Json, path: Path) -> None:
    # Ignition storage.go validateFilesystems: a filesystem on a whole disk we also partition.
    disks = {disk.get("device"): disk for disk in out.get("disks", ())}
    for index, fs in enumerate(out.get("filesystems", ())):
        disk = disks.get(fs.get("device"))
        if disk is None:
            continue
        where = (*path, "filesystems", index, "device")
        if disk.get("partitions"):
            t.warn(where, "filesystem overwrites partitioned device")
        elif not fs.get("wipeFilesystem") and disk.get("wipeTable"):
            t.warn(where, "device matches disk with wipeTable enabled; filesystem will be wiped")


def _luks(t: Translator, luks: Json, path: Path) -> None:
    # Ignition luks.go, clevis.go and tang.go Validate.
    if "/" in luks.get("name", ""):
        t.error((*path, "name"), "device names cannot contain slashes")
    if len(luks.get("label", "").encode("utf-8")) > 47:
        t.error((*path, "label"), "luks device labels cannot be longer than 47 characters")
    if not luks.get("device"):
        t.error((*path, "device"), "disk device is required")
    else:
        abs_path(t, luks["device"], (*path, "device"))
    clevis = luks.get("clevis", {})
    custom = clevis.get("custom", {})
    if custom.get("pin") and (clevis.get("tang") or clevis.get("tpm2") or clevis.get("threshold")):
        t.error((*path, "clevis"), "cannot use custom clevis config with tpm2, tang, or threshold")
    if custom.get("pin") or custom.get("config") or custom.get("needsNetwork"):
        where = (*path, "clevis", "custom")
        if not custom.get("pin"):
            t.error((*where, "pin"), "missing required custom clevis pin")
        elif custom["pin"] not in _CLEVIS_PINS:
            t.error((*where, "pin"), "unsupported clevis pin (accepted: "
                    + ", ".join(_CLEVIS_PINS) + ")")
        if not custom.get("config"):
            t.error((*where, "config"), "missing required custom clevis config")
    for index, tang in enumerate(clevis.get("tang", ())):
        _tang(t, tang, (*path, "clevis", "tang", index))
    # Ignition validate.go ValidateDups: Tang servers by URL, open options by value (plain
    # `options` are exempt: luks.go IgnoreDuplicates).
    unique(t, clevis.get("tang", ()), "url", (*path, "clevis", "tang"))
    unique(t, luks.get("openOptions", ()), "", (*path, "open_options"))


def _tang(t: Translator, tang: Json, path: Path) -> None:
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", tang.get("url", ""))
    if scheme is None or scheme.group(1).lower() not in ("http", "https"):
        t.error((*path, "url"), "invalid url scheme (accepted: http, https)")
    if not tang.get("thumbprint"):
        t.error((*path, "thumbprint"), "thumbprint is required")
    if tang.get("advertisement"):
        try:
            json.loads(tang["advertisement"])
        except ValueError:
            t.error((*path, "advertisement"), "advertisement is not valid JSON")


def _raid(t: Translator, raid: Json, path: Path) -> None:
    # Ignition raid.go Validate.
    level = raid.get("level")
    if not level:
        t.error((*path, "level"), "raid level is required")
    elif level not in _RAID_LEVELS:
        t.error((*path, "level"), "unrecognized raid level")
    elif level in _NO_SPARES and raid.get("spares"):
        t.error((*path, "level"), "spares unsupported for linear and raid0 arrays")
    if not raid.get("devices"):
        t.error((*path, "devices"), "raid devices required")
    unique(t, raid.get("devices", ()), "", (*path, "devices"))  # validate.go ValidateDups


def _hard_links(t: Translator, out: Json, path: Path) -> None:
    # Ignition storage.go validateLinks: a hard link cannot point at a directory, and it
    # shares its target's owner, so an owner given for it is ignored. A relative target is
    # joined to the link's own path, as Ignition does.
    directories = [d.get("path") for d in out.get("directories", ())]
    for index, link in enumerate(out.get("links", ())):
        if not link.get("hard"):
            continue
        where = t.origins.get(id(link), (*path, "links", index))
        target = go_clean(link.get("target", ""))
        if not target.startswith("/"):
            target = go_clean(posixpath.join(link.get("path", ""), link.get("target", "")))
        for directory in directories:
            if directory == target:
                t.error(where, "hard link target is a directory")
        for owner in ("user", "group"):
            for key in ("id", "name"):
                if link.get(owner, {}).get(key) is not None:
                    t.warn((*where, owner, key), "user/group ignored for hard link")
