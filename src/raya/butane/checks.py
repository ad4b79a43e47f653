"""Ignition's validation rules (and Butane's own), reported at Butane paths."""

from __future__ import annotations

import functools
import posixpath
from typing import Any

from raya.butane.context import IGNITION, SOURCE, Json, Translator
from raya.butane.source import Path

_HASH_SIZES = {"sha512": 128, "sha256": 64}
_FORMATS = ("ext4", "btrfs", "xfs", "vfat", "swap", "none", "")
_NODE_LISTS = ("files", "directories", "links")


def resource(t: Translator, out: Json, path: Path, *, check_source: bool = True) -> None:
    """Ignition's Resource.Validate (config/v3_x/types/resource.go), Verification.Validate
    (verification.go) and HTTPHeader(s).Validate (headers.go)."""
    compression = out.get("compression")
    if compression not in (None, "", "gzip"):
        t.error((*path, "compression"), "invalid compression method (accepted: gzip, or none)")
    source = out.get("source")
    hash_ = out.get("verification", {}).get("hash")
    if hash_ is not None:
        _hash(t, hash_, (*path, "verification", "hash"))
        if source is None:
            t.error((*path, "verification", "hash"),
                    "source must be specified if verification is specified")
    if source and check_source:  # validateURLNilOK: nil or "" is no URL to check
        from raya.butane import urls  # only for a source the user wrote: a clean node
        # config has none, and urls' patterns cost start-up time

        problem = urls.validate(source, t.minor)
        if problem:
            t.error((*path, "source"), problem)
    headers = out.get("httpHeaders")
    if headers:
        _header_scheme(t, source, (*path, "http_headers"))
        names = set()
        for index, header in enumerate(headers):
            name = header.get("name", "")
            if not name:
                t.error((*path, "http_headers", index, "name"), "HTTP header name can't be empty")
            # Header names are case-insensitive: Go compares http.CanonicalHeaderKey forms.
            elif name.lower() in names:
                t.error((*path, "http_headers", index), "duplicate entry defined")
            names.add(name.lower())
            if header.get("value") == "":
                t.error((*path, "http_headers", index, "value"),
                        "unable to parse HTTP header (an empty value; omit the value instead)")


def _header_scheme(t: Translator, source: str | None, path: Path) -> None:
    """validateSchemeForHTTPHeaders: headers need an http(s) source."""
    from raya.butane import urls  # rarely needed (see resource)

    try:
        scheme = urls.parse(source).scheme if source else None
    except ValueError:
        scheme = None
    if scheme is None:
        t.error(path, urls.INVALID_URL)
    elif scheme not in ("http", "https"):
        t.error(path, "cannot use HTTP headers with this source scheme (only http and https)")


def required_source(t: Translator, resources: list[Json], path: Path) -> None:
    """Merged configs and CAs must name a source (Resource.validateRequiredSource, called
    by IgnitionConfig.Validate in ignition.go and TLS.Validate in tls.go), reported at the
    item itself, besides any report at its `source`."""
    for index, item in enumerate(resources):
        source = item.get("source")
        if not source:
            t.error((*path, index), "source is required")
            continue
        from raya.butane import urls  # rarely needed (see resource)

        problem = urls.validate(source, t.minor)
        if problem:
            t.error((*path, index), problem)


def _hash(t: Translator, value: str, path: Path) -> None:
    # Verification.Validate checks the function and the digest's length, not that it is hex.
    function, sep, digest = value.partition("-")
    if not sep:
        t.error(path, "malformed hash specifier (expected sha512-<hex> or sha256-<hex>)")
    elif function not in _HASH_SIZES:
        t.error(path, "unrecognized hash function (accepted: sha512, sha256)")
    elif len(digest) != _HASH_SIZES[function]:
        t.error(path, f"incorrect size for hash sum ({function} takes "
                f"{_HASH_SIZES[function]} hex digits)")


def mode(t: Translator, value: int | None, path: Path, *, directory: bool) -> None:
    if value is None:
        return
    if not 0 <= value <= 0o7777:
        with t.during(IGNITION):
            t.error(path, "illegal file mode (accepted: 0 to 07777; write it in octal, e.g. "
                    "0644)")
    elif _looks_decimal(value, directory):
        with t.during(SOURCE):  # Butane's own check (base/util CheckForDecimalMode)
            t.warn(path, "unreasonable mode would be reasonable if specified in octal; "
                   "remember to add a leading zero")
    # Ignition's validateModeSpecialBits, for every spec before 3.6.0, on uint32(mode): so
    # an illegal -1 warns too.
    if value & 0xFFFFFFFF & 0o7000:
        t.warn(path, "setuid/setgid/sticky bits are not supported or functional in spec "
               "versions older than 3.6.0")


@functools.cache  # pure, on at most 2 x 4096 inputs (0 to 0o7777): modes repeat
def _looks_decimal(value: int, directory: bool) -> bool:
    """Butane's heuristic: 644 (decimal) is surely a mistyped 0644."""
    digits = f"{value:04d}"
    if value > 7777 or any(d > "7" for d in digits):
        return False
    return not _typical(value, directory) and _typical(int(digits, 8), directory)


def _typical(value: int, directory: bool) -> bool:
    if value == 0:
        return True
    had_r = had_w = had_x = False
    for shift in (0, 3, 6):  # other, group, user: each must include the previous
        perm = (value >> shift) & 7
        r, w, x = bool(perm & 4), bool(perm & 2), bool(perm & 1)
        if (had_r and not r) or (had_w and not w) or (had_x and not x):
            return False
        if x and had_r and not had_x:
            return False
        if (w or x) and not r:
            return False
        had_r, had_w, had_x = had_r or r, had_w or w, had_x or x
    if not had_r:
        return False
    if directory:
        return had_x and not value & 0o4000 and (not value & 0o3000 or had_w)
    if value & 0o6000 and (not had_x or value & 2):
        return False
    return not value & 0o1000


def non_negative(t: Translator, value: int | None, path: Path) -> None:
    if value is not None and value < 0:
        t.error(path, f"must be a non-negative integer, not {value}")


def abs_path(t: Translator, value: str | None, path: Path) -> None:
    """Ignition's path rule: absolute and already clean."""
    if value is None:
        return
    if not value:
        t.error(path, "path is required (an absolute path such as /etc/example)")
    elif not value.startswith("/"):
        t.error(path, "path not absolute")
    elif go_clean(value) != value:
        t.error(path, f"path is not fully simplified (use {go_clean(value)})")


def go_clean(value: str) -> str:
    """Go's path.Clean (unlike POSIX normpath, it also folds a leading "//")."""
    probe = value + "/"
    if value[:1] == "/" and "//" not in probe and "/./" not in probe and "/../" not in probe:
        return value  # clean already (most paths): normpath is slow Python before 3.12
    cleaned = posixpath.normpath(value)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def filesystem(t: Translator, out: Json, path: Path, with_mount_unit: bool) -> None:
    fs_format = out.get("format")
    with t.during(IGNITION):
        abs_path(t, out.get("device"), (*path, "device"))
        if fs_format not in (None, *_FORMATS):
            t.error((*path, "format"), "invalid filesystem format (accepted: "
                    + ", ".join(f for f in _FORMATS if f) + ")")
        if out.get("path") is not None:
            abs_path(t, out["path"], (*path, "path"))
    # Butane's own rules (base validate.go Filesystem.Validate).
    if with_mount_unit:
        if not fs_format:  # Butane's own check (base/v0_x Filesystem.Validate)
            t.error((*path, "format"), "format is required if with_mount_unit is true",
                    stage=SOURCE)
        elif fs_format != "swap" and not out.get("path"):
            t.error((*path, "path"),
                    "path is required if with_mount_unit is true and format is not swap",
                    stage=SOURCE)


def unique(t: Translator, entries: Any, key: str, path: Path) -> None:
    seen: set[Any] = set()
    for index, entry in enumerate(entries):
        value = entry.get(key) if isinstance(entry, dict) else entry
        if value in seen:
            t.error((*path, index), "duplicate entry defined")
        seen.add(value)


def _systemd_conflicts(t: Translator, out: Json) -> None:
    """Ignition writes units and drop-ins itself: no storage node may claim their paths."""
    taken = set()
    for unit in out.get("systemd", {}).get("units", ()):
        if unit.get("contents"):
            taken.add(f"/etc/systemd/system/{unit.get('name', '')}")
        for dropin in unit.get("dropins", ()):
            if dropin.get("contents"):
                taken.add(f"/etc/systemd/system/{unit.get('name', '')}.d/{dropin.get('name', '')}")
    if not taken:
        return
    storage = out.get("storage", {})
    for kind in _NODE_LISTS:
        for index, entry in enumerate(storage.get(kind, ())):
            if entry.get("path") in taken:
                where = t.origins.get(id(entry), ("storage", kind, index, "path"))
                t.error(where, "path conflicts with systemd unit or dropin (write it as a unit "
                        "or drop-in in systemd.units instead)")


def config(t: Translator, out: Json) -> None:
    with t.during(IGNITION):
        _config(t, out)


def _config(t: Translator, out: Json) -> None:
    _systemd_conflicts(t, out)
    passwd = out.get("passwd", {})
    unique(t, passwd.get("users", ()), "name", ("passwd", "users"))
    unique(t, passwd.get("groups", ()), "name", ("passwd", "groups"))
    # Ignition config/validate/validate.go ValidateDups: every list is checked, by Key()
    # (a resource's source) or by value for lists of strings.
    ignition = out.get("ignition", {})
    unique(t, ignition.get("config", {}).get("merge", ()), "source",
           ("ignition", "config", "merge"))
    unique(t, ignition.get("proxy", {}).get("noProxy", ()), "", ("ignition", "proxy", "no_proxy"))
    unique(t, ignition.get("security", {}).get("tls", {}).get("certificateAuthorities", ()),
           "source", ("ignition", "security", "tls", "certificate_authorities"))
    for index, user in enumerate(passwd.get("users", ())):
        where = ("passwd", "users", index)
        unique(t, user.get("groups", ()), "", (*where, "groups"))
        # Keys read from ssh_authorized_keys_local follow the inline ones.
        unique(t, user.get("sshAuthorizedKeys", ()), "", (*where, "ssh_authorized_keys"))
    arguments = out.get("kernelArguments", {})
    present = arguments.get("shouldExist", [])
    seen = set(present)
    unique(t, present, "", ("kernel_arguments", "should_exist"))
    for index, argument in enumerate(arguments.get("shouldNotExist", ())):
        if argument in seen:
            t.error(("kernel_arguments", "should_not_exist", index), "duplicate entry defined "
                    "(an argument cannot both exist and not exist)")
        seen.add(argument)
