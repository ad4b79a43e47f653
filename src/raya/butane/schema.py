"""Butane `fcos` 1.4-1.6 as data: each object's YAML keys, Ignition keys and types.

Fields are listed in the order of Ignition's Go structs, which is the order Butane
writes them, so our JSON comes out in the same order as Butane's. `out=None` marks
a Butane-only key (sugar that a hook in translate.py turns into Ignition fields).
`since` is the first fcos minor version (1.x) that accepts the key.
"""

from __future__ import annotations

from functools import cached_property
from typing import NamedTuple, TypeAlias


class ListOf(NamedTuple):
    item: Kind


class Obj:
    """An object of the schema, compared by identity. (Records here are NamedTuples, not
    dataclasses: importing dataclasses costs `raya butane` a tenth of its start-up.)"""

    def __init__(self, name: str, fields: tuple[Field, ...]) -> None:
        self.name = name
        self.fields = fields
        self._keys: dict[int, dict[str, Field]] = {}

    def __repr__(self) -> str:
        return f"Obj({self.name!r})"

    @cached_property
    def order(self) -> tuple[str, ...]:
        """Output keys in Go's order; Butane-only keys keep their YAML name."""
        return tuple(f.out or f.key for f in self.fields)

    def keys(self, minor: int) -> dict[str, Field]:
        """The YAML keys this object accepts in fcos 1.<minor>."""
        found = self._keys.get(minor)
        if found is None:
            found = {f.key: f for f in self.fields if f.since <= minor}
            self._keys[minor] = found
        return found


Kind: TypeAlias = "str | Obj | ListOf"  # "str", "int", "bool" are scalars


class Field(NamedTuple):
    key: str
    out: str | None
    kind: Kind
    required: bool = False  # a Go field without omitempty: always written
    since: int = 4


def f(
    key: str, kind: Kind, out: str | None = "", *, required: bool = False, since: int = 4
) -> Field:
    """A field whose Ignition name is the YAML name in camelCase unless given."""
    if out == "":
        head, *rest = key.split("_")
        out = head + "".join(part.capitalize() for part in rest)
    return Field(key, out, kind, required, since)


def butane(key: str, kind: Kind, *, since: int = 4) -> Field:
    return Field(key, None, kind, False, since)


STR, INT, BOOL = "str", "int", "bool"
STRS = ListOf(STR)

VERIFICATION = Obj("verification", (f("hash", STR),))
HTTP_HEADER = Obj("http_header", (f("name", STR, required=True), f("value", STR)))
RESOURCE = Obj(
    "resource",
    (
        f("compression", STR),
        f("http_headers", ListOf(HTTP_HEADER)),
        f("source", STR),
        f("verification", VERIFICATION),
        butane("inline", STR),
        butane("local", STR),
    ),
)
NODE_OWNER = (f("id", INT), f("name", STR))
NODE_USER = Obj("node_user", NODE_OWNER)
NODE_GROUP = Obj("node_group", NODE_OWNER)


def _node(*extra: Field) -> tuple[Field, ...]:
    return (
        f("group", NODE_GROUP),
        f("overwrite", BOOL),
        f("path", STR, required=True),
        f("user", NODE_USER),
        *extra,
    )


FILE = Obj("file", _node(f("append", ListOf(RESOURCE)), f("contents", RESOURCE), f("mode", INT)))
DIRECTORY = Obj("directory", _node(f("mode", INT)))
LINK = Obj("link", _node(f("hard", BOOL), f("target", STR)))
TREE = Obj("tree", (butane("local", STR), butane("path", STR)))
PARTITION = Obj(
    "partition",
    (
        f("guid", STR),
        f("label", STR),
        f("number", INT),
        f("resize", BOOL),
        f("should_exist", BOOL),
        f("size_mib", INT, "sizeMiB"),
        f("start_mib", INT, "startMiB"),
        f("type_guid", STR),
        f("wipe_partition_entry", BOOL),
    ),
)
DISK = Obj(
    "disk",
    (f("device", STR, required=True), f("partitions", ListOf(PARTITION)), f("wipe_table", BOOL)),
)
FILESYSTEM = Obj(
    "filesystem",
    (
        f("device", STR, required=True),
        f("format", STR),
        f("label", STR),
        f("mount_options", STRS),
        f("options", STRS),
        f("path", STR),
        f("uuid", STR),
        f("wipe_filesystem", BOOL),
        butane("with_mount_unit", BOOL),
    ),
)
TANG = Obj(
    "tang",
    (f("advertisement", STR, since=5), f("thumbprint", STR), f("url", STR, required=True)),
)
CLEVIS = Obj(
    "clevis",
    (
        f(
            "custom",
            Obj("clevis_custom", (f("config", STR), f("needs_network", BOOL), f("pin", STR))),
        ),
        f("tang", ListOf(TANG)),
        f("threshold", INT),
        f("tpm2", BOOL),
    ),
)
LUKS = Obj(
    "luks",
    (
        f("cex", Obj("cex", (f("enabled", BOOL),)), since=6),
        f("clevis", CLEVIS),
        f("device", STR),
        f("discard", BOOL, since=5),
        f("key_file", RESOURCE),
        f("label", STR),
        f("name", STR, required=True),
        f("open_options", STRS, since=5),
        f("options", STRS),
        f("uuid", STR),
        f("wipe_volume", BOOL),
    ),
)
RAID = Obj(
    "raid",
    (
        f("devices", STRS),
        f("level", STR),
        f("name", STR, required=True),
        f("options", STRS),
        f("spares", INT),
    ),
)
STORAGE = Obj(
    "storage",
    (
        f("directories", ListOf(DIRECTORY)),
        f("disks", ListOf(DISK)),
        f("files", ListOf(FILE)),
        f("filesystems", ListOf(FILESYSTEM)),
        f("links", ListOf(LINK)),
        f("luks", ListOf(LUKS)),
        f("raid", ListOf(RAID)),
        butane("trees", ListOf(TREE)),
    ),
)
DROPIN = Obj(
    "dropin",
    (f("contents", STR), f("name", STR, required=True), butane("contents_local", STR, since=5)),
)
UNIT = Obj(
    "unit",
    (
        f("contents", STR),
        f("dropins", ListOf(DROPIN)),
        f("enabled", BOOL),
        f("mask", BOOL),
        f("name", STR, required=True),
        butane("contents_local", STR, since=5),
    ),
)
SYSTEMD = Obj("systemd", (f("units", ListOf(UNIT)),))
USER = Obj(
    "user",
    (
        f("gecos", STR),
        f("groups", STRS),
        f("home_dir", STR),
        f("name", STR, required=True),
        f("no_create_home", BOOL),
        f("no_log_init", BOOL),
        f("no_user_group", BOOL),
        f("password_hash", STR),
        f("primary_group", STR),
        f("ssh_authorized_keys", STRS),
        f("shell", STR),
        f("should_exist", BOOL),  # after shell, as in Ignition's PasswdUser (v3_x/types)
        f("system", BOOL),
        f("uid", INT),
        butane("ssh_authorized_keys_local", STRS, since=5),
    ),
)
GROUP = Obj(
    "group",
    (
        f("gid", INT),
        f("name", STR, required=True),
        f("password_hash", STR),
        f("should_exist", BOOL),
        f("system", BOOL),
    ),
)
PASSWD = Obj("passwd", (f("groups", ListOf(GROUP)), f("users", ListOf(USER))))
KERNEL_ARGUMENTS = Obj("kernel_arguments", (f("should_exist", STRS), f("should_not_exist", STRS)))
IGNITION = Obj(
    "ignition",
    (
        f("config", Obj("ignition_config", (f("merge", ListOf(RESOURCE)), f("replace", RESOURCE)))),
        f(
            "proxy",
            Obj("proxy", (f("http_proxy", STR), f("https_proxy", STR), f("no_proxy", STRS))),
        ),
        f(
            "security",
            Obj(
                "security",
                (f("tls", Obj("tls", (f("certificate_authorities", ListOf(RESOURCE)),))),),
            ),
        ),
        f(
            "timeouts",
            Obj("timeouts", (f("http_response_headers", INT), f("http_total", INT))),
        ),
    ),
)
CONFIG = Obj(
    "config",
    (
        butane("variant", STR),
        butane("version", STR),
        f("ignition", IGNITION),
        f("kernel_arguments", KERNEL_ARGUMENTS),
        f("passwd", PASSWD),
        f("storage", STORAGE),
        f("systemd", SYSTEMD),
    ),
)

# fcos spec version → Ignition spec version it produces.
VERSIONS = {"1.4.0": (4, "3.3.0"), "1.5.0": (5, "3.4.0"), "1.6.0": (6, "3.5.0")}
