"""Butane YAML nodes → Ignition config dict, collecting every diagnostic on the way.

The walk is driven by the tables in schema.py; hooks add Butane's sugar (inline
and local contents, trees, mount units, `*_local` keys) and Ignition's checks.
Every diagnostic names the Butane path of the YAML node at fault.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from raya.butane import checks, storage, units
from raya.butane.blockyaml import IMPLICIT, MappingNode, Node, ScalarNode, SequenceNode
from raya.butane.context import IGNITION, SOURCE, TRANSLATE, Json, Translator
from raya.butane.schema import (
    CONFIG,
    VERSIONS,
    Kind,
    ListOf,
    Obj,
)
from raya.butane.source import (
    Diagnostic,
    Path,
    Undecodable,
    as_bool,
    describe,
    is_null,
    json_path,
    position,
    resolve,
)

_NEWLINES = re.compile(r"\r?\n")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INT64 = (-(2**63), 2**63 - 1)
# Keys of Butane's fcos variant that raya's transpiler does not implement.
_UNSUPPORTED = {"boot_device", "grub"}


class Walker(Translator):
    """The walk over the YAML nodes, driven by schema.py's tables."""

    def config(self, root: Node | None) -> Json | None:
        if root is not None and not isinstance(root, MappingNode):
            self.undecodable(root, (), f"a Butane config must be a mapping, not {describe(root)}")
            return None
        fields: dict[str, Node] = {}
        if root is not None:
            self.nodes[()] = root
            fields = {k.value: v for k, v in root.value if isinstance(k, ScalarNode)}
        variant = _scalar_text(fields.get("variant"))
        version = _scalar_text(fields.get("version"))
        # Butane picks its translator before decoding anything else, naming no JSON path.
        if variant != "fcos":
            self.undecodable(fields.get("variant"), (), f"unsupported variant {variant!r}: raya "
                             "accepts only 'fcos'" if variant else "error parsing variant; must "
                             "be specified (fcos)")
            return None
        if version not in VERSIONS:
            self.undecodable(fields.get("version") or fields.get("variant"), (),
                             f"unsupported fcos version {version!r}; supported: "
                             + ", ".join(VERSIONS))
            return None
        self.minor, self.ignition_version = VERSIONS[version]
        return self.obj(CONFIG, root, ())

    def value(self, kind: Kind, node: Node | None, path: Path) -> Any:
        if node is not None:
            self.nodes[path] = node
        if isinstance(kind, Obj):
            return self.obj(kind, node, path)
        if isinstance(kind, ListOf):
            return self.list(kind, node, path)
        if is_null(node):
            return None
        assert node is not None
        if not isinstance(node, ScalarNode):
            self.undecodable(node, path, f"expected {_NAMES[kind]}, got {describe(node)}")
            return None
        if kind == "str" and node.tag == IMPLICIT:  # any untagged scalar is its text
            return self._text(node, path)
        try:
            found = resolve(node)
        except Undecodable as error:
            self.undecodable(node, path, str(error))
            return None
        if found is None:
            return None
        if kind == "str":
            if isinstance(found, bytes):  # !!binary: Go keeps the bytes, valid UTF-8 or not
                return _text(found)
            return self._text(node, path)
        if kind == "bool":
            if isinstance(found, bytes):
                found = _text(found)
            decided = as_bool(found)
            if decided is None:
                self.undecodable(node, path, f"expected {_NAMES[kind]}, got {describe(node)}")
            return decided
        if isinstance(found, bool) or not isinstance(found, int):
            # Floats too: go-yaml would truncate 1.5 to 1; raya refuses (docs/butane.md).
            self.undecodable(node, path, f"expected {_NAMES[kind]}, got {describe(node)}")
            return None
        if not _INT64[0] <= found <= _INT64[1]:
            self.undecodable(node, path, f"integer out of range (a 64-bit signed integer), "
                             f"got {found}")
            return None
        return found

    def _text(self, node: ScalarNode, path: Path) -> str | None:
        text: str = node.value
        if not text.isascii() and _SURROGATE.search(text):
            with self.during(SOURCE):
                self.error(path, "invalid Unicode: a lone surrogate (\\uD800-\\uDFFF) is not "
                           "text")
            return None
        return text

    def list(self, kind: ListOf, node: Node | None, path: Path) -> list[Any] | None:
        if is_null(node):
            return None
        assert node is not None
        if not isinstance(node, SequenceNode):
            self.undecodable(node, path, f"expected a list, got {describe(node)}")
            return None
        items = []
        dropped = []
        for index, item in enumerate(node.value):
            # go-yaml's sequence decoding drops a null item (it cannot set a Go string or
            # struct to null), so `[a, ~]` is `[a]`.
            if is_null(item):
                dropped.append((index, item))
                continue
            found = self.value(kind.item, item, (*path, index))
            items.append(_zero(kind.item) if found is None else found)
        if isinstance(kind.item, Obj):
            # The Go list is then shorter than the YAML one, and Butane's unused-key pass
            # checks Go element j against YAML item j: a dropped null there is no mapping.
            for index, item in dropped:
                if index < len(items):
                    self.nodes[(*path, index)] = item
                    self._not_a_mapping(kind.item, (*path, index))
        return items or None

    def obj(self, spec: Obj, node: Node | None, path: Path) -> Json:
        if node is None or is_null(node):
            if node is not None and path:
                # Every Butane struct field is a value, not a pointer, so Butane's unused-key
                # pass visits this one too.
                self._not_a_mapping(spec, path)
            node_fields: dict[str, Node] = {}
        elif not isinstance(node, MappingNode):
            self.undecodable(node, path, f"expected a mapping ({spec.name}), got "
                             f"{describe(node)}")
            return {}
        else:
            node_fields = self._fields(spec, node, path)
        raw: Json = {}
        for f in spec.fields:
            child = node_fields.get(f.key)
            if child is None:  # absent: Go's zero value, written only if required
                if f.required and f.out is not None:
                    raw[f.out] = _zero(f.kind)
                continue
            if f.out is None:
                raw[f.key] = self.value(f.kind, child, (*path, f.key))
                continue
            found = self.value(f.kind, child, (*path, f.key))
            if found is None or found == {}:
                if f.required:
                    raw[f.out] = _zero(f.kind)
                continue
            raw[f.out] = found
        hook = HOOKS.get(spec.name)
        if hook is not None:
            hook(self, raw, path)
        # Go's field order; Butane-only keys a hook left are for the parent's hook.
        return {name: raw[name] for name in spec.order if name in raw}

    def _not_a_mapping(self, spec: Obj, path: Path) -> None:
        """Butane's unused-key pass (Ignition's validate.ValidateUnusedKeys) found a null
        where a struct's mapping belongs: a warning ("context tree does not match content
        tree"), so --strict refuses the config."""
        with self.during(SOURCE):
            self.report("warning", path, f"expected a mapping ({spec.name}) at "
                        f"{json_path(path)}, got null")

    def _fields(self, spec: Obj, node: MappingNode, path: Path) -> dict[str, Node]:
        known = spec.keys(self.minor)
        found: dict[str, Node] = {}
        entries = node.value
        if _has_merge_key(node):  # rare: most mappings are walked as they are
            for key_node, _ in entries:
                if _is_merge(key_node):
                    # go-yaml applies the merge (decode.go `merge`), but Butane's unused-key
                    # pass walks the YAML tree, where `<<` matches no field: a warning,
                    # refused under --strict (config/common ... ValidateUnusedKeys in
                    # Butane's translate code).
                    path_key = (*path, "<<")
                    self.keys[path_key] = key_node
                    with self.during(SOURCE):
                        self.report("warning", path_key, "unused key <<", key=True)
            entries = _merged(node)
        for key_node, value_node in entries:
            if not isinstance(key_node, ScalarNode):
                self.undecodable(key_node, path, "mapping keys must be strings")
                continue
            key = key_node.value
            child = (*path, key)
            self.keys[child] = key_node
            if key in found:
                self.undecodable(key_node, path, f"mapping key {key!r} already defined")
                continue
            if key not in known:
                with self.during(SOURCE):
                    if not path and key in _UNSUPPORTED:
                        self.report("error", child, f"{key} is not supported by raya's "
                                    "transpiler", key=True)
                    else:
                        self.report("warning", child, f"unused key {key}", key=True)
                continue
            found[key] = value_node
        return found


_NAMES = {"str": "a string", "int": "an integer", "bool": "a boolean (true or false)"}


def _text(data: bytes) -> str:
    """Bytes as a Go string holds them: invalid UTF-8 is kept (as surrogates) for to_json to
    write the way Go's encoder does."""
    return data.decode("utf-8", "surrogateescape")


def _zero(kind: Kind) -> Any:
    if isinstance(kind, Obj):
        return {}
    if isinstance(kind, ListOf):
        return []
    return {"str": "", "int": 0, "bool": False}[kind]


def _merged(node: MappingNode) -> list[tuple[Node, Node]]:
    """Entries with YAML merge keys (`<<: *anchor`) applied, as go-yaml applies them:
    the mapping's own keys win, then earlier merged mappings over later ones."""
    if not _has_merge_key(node):
        return node.value  # type: ignore[no-any-return]
    own = [(k, v) for k, v in node.value if not _is_merge(k)]
    sources = [v for k, v in node.value if _is_merge(k)]
    seen = {k.value for k, _ in own if isinstance(k, ScalarNode)}
    merged = []
    for source in sources:
        for mapping in source.value if isinstance(source, SequenceNode) else [source]:
            if not isinstance(mapping, MappingNode):
                continue
            for k, v in _merged(mapping):
                if isinstance(k, ScalarNode) and k.value not in seen:
                    seen.add(k.value)
                    merged.append((k, v))
    return merged + own


def _has_merge_key(node: MappingNode) -> bool:
    """Whether any key reads `<<` (quoted or not: _merged and _is_merge tell them apart)."""
    return any(k.value == "<<" for k, _ in node.value)


def _is_merge(key: Node) -> bool:
    return isinstance(key, ScalarNode) and key.value == "<<" and not key.style


def _scalar_text(node: Node | None) -> str | None:
    if isinstance(node, ScalarNode) and not is_null(node):
        return str(node.value)
    return None


# -- hooks: Butane sugar and Ignition's checks, per object type ---------------------------


def _resource(t: Translator, out: Json, path: Path) -> None:
    sources = [key for key in ("local", "inline", "source") if out.get(key) is not None]
    if len(sources) > 1:
        with t.during(SOURCE):
            t.error((*path, sources[-1]),
                    "only one of the following can be set: inline, local, source")
    local, inline = out.pop("local", None), out.pop("inline", None)
    if inline is not None and len(sources) == 1 and path[:2] == ("ignition", "config"):
        with t.during(SOURCE):
            _embedded_config(t, inline, path)
    if local is not None:
        data = t.read_local(local, (*path, "local"))
        if data is not None:
            t.contents(data, out.get("compression"), out)
    if inline is not None:
        t.contents(inline.encode("utf-8", "surrogateescape"), out.get("compression"), out)
    # A source we made from inline or local contents is a valid data URL already.
    checks.resource(t, out, path, check_source=local is None and inline is None)


def _embedded_config(t: Translator, text: str, path: Path) -> None:
    """Butane's ValidateIgnitionConfig (base/v0_x/validate.go) on an inline merge/replace
    config: not JSON of Ignition's types is an error; another version than this fcos
    version's Ignition is a warning (and no validation); else Ignition validates it, and
    its findings are at the embedded config's own paths (see _place_embedded)."""
    from raya.butane import embedded  # rarely needed: imported only then (start-up time)

    try:
        node, version = embedded.parse(text, t.minor)
    except embedded.NotAConfig as error:
        t.error((*path, "inline"), f"config is not valid: {error}")
        return
    if version is None:  # Ignition.Validate's own error; validation goes on
        t.embedded.append(Diagnostic("error", ("ignition", "version"), 1, 1,
                                     "invalid config version (couldn't parse)"))
    elif version != t.ignition_version:
        t.warn((*path, "version"), "skipping validation for the merge/replace ignition config "
               f"due to an unkown version ({version}; fcos 1.{t.minor} reads "
               f"{t.ignition_version})")
        return
    inner = Walker(t.files_dir)
    inner.minor, inner.ignition_version = t.minor, t.ignition_version
    inner.obj(CONFIG, node, ())
    if inner.undecoded:
        t.error((*path, "inline"), "config is not valid: " + inner.undecoded[0].message)
        return
    t.embedded.extend(inner.diagnostics)  # placed once the whole YAML is walked


def _file(t: Translator, out: Json, path: Path) -> None:
    checks.mode(t, out.get("mode"), (*path, "mode"), directory=False)


def _directory(t: Translator, out: Json, path: Path) -> None:
    checks.mode(t, out.get("mode"), (*path, "mode"), directory=True)


def _proxy(t: Translator, out: Json, path: Path) -> None:
    # Ignition's Proxy.Validate (proxy.go): http(s) URLs; plain http for HTTPS resources is
    # allowed but warned about.
    from raya.butane import urls  # rarely needed: imported only then (start-up time)

    for key, field in (("httpProxy", "http_proxy"), ("httpsProxy", "https_proxy")):
        value = out.get(key)
        if value is None:
            continue
        try:
            scheme = urls.parse(value).scheme
        except ValueError:
            t.error((*path, field), urls.INVALID_URL)
            continue
        if scheme not in ("http", "https"):
            t.error((*path, field), "proxies must be http(s) (an http:// or https:// URL)")
        elif scheme == "http" and key == "httpsProxy":
            t.warn((*path, field), "insecure plaintext HTTP proxy specified for HTTPS resources")


def _ignition_config(t: Translator, out: Json, path: Path) -> None:
    checks.required_source(t, out.get("merge", []), (*path, "merge"))


def _tls(t: Translator, out: Json, path: Path) -> None:
    checks.required_source(t, out.get("certificateAuthorities", []),
                           (*path, "certificate_authorities"))


def _tree(t: Translator, out: Json, path: Path) -> None:
    if not out.get("local"):
        with t.during(SOURCE):
            t.error(path, "local is required (a directory under --files-dir)")


def _user(t: Translator, out: Json, path: Path) -> None:
    checks.non_negative(t, out.get("uid"), (*path, "uid"))
    local = out.pop("ssh_authorized_keys_local", None)
    if not local:
        return
    keys = out.setdefault("sshAuthorizedKeys", [])
    for index, name in enumerate(local):
        data = t.read_local(name, (*path, "ssh_authorized_keys_local", index))
        if data is not None:
            keys.extend(line for line in _NEWLINES.split(_text(data)) if line)
    if not keys:
        del out["sshAuthorizedKeys"]


def _group(t: Translator, out: Json, path: Path) -> None:
    checks.non_negative(t, out.get("gid"), (*path, "gid"))


def _owner(t: Translator, out: Json, path: Path) -> None:
    checks.non_negative(t, out.get("id"), (*path, "id"))
    if out.get("id") is not None and out.get("name") is not None:
        with t.during(IGNITION):
            t.error(path, "cannot set both id and name")


def _systemd_local(t: Translator, out: Json, path: Path) -> str:
    """Read `contents_local` into `contents`; the key the contents came from."""
    local = out.pop("contents_local", None)
    if local is None:
        return "contents"
    if out.get("contents") is not None:
        with t.during(SOURCE):
            t.error((*path, "contents_local"), "only one of the following can be set: "
                    "contents, contents_local")
    if local:
        data = t.read_local(local, (*path, "contents_local"))
        if data is not None:
            out["contents"] = _text(data)
    return "contents_local"


def _unit(t: Translator, out: Json, path: Path) -> None:
    key = t.contents_keys[path] = _systemd_local(t, out, path)
    units.check_unit(t, out, path, key)


def _dropin(t: Translator, out: Json, path: Path) -> None:
    contents_key = _systemd_local(t, out, path)
    with t.during(IGNITION):
        units.check_dropin(t, out, path, contents_key)


def _filesystem(t: Translator, out: Json, path: Path) -> None:
    with_mount_unit = bool(out.pop("with_mount_unit", None))
    if with_mount_unit:
        t.mounts.append(((*path, "with_mount_unit"), out))
    checks.filesystem(t, out, path, with_mount_unit)


def _storage(t: Translator, out: Json, path: Path) -> None:
    trees = out.pop("trees", None)
    if trees:
        from raya.butane.trees import expand  # rarely needed: imported only then

        with t.during(TRANSLATE):
            expand(t, trees, out, path)
    storage.check(t, out, path)


def _config(t: Translator, out: Json, path: Path) -> None:
    for key in ("variant", "version"):
        out.pop(key, None)
    out["ignition"] = {**out.get("ignition", {}), "version": t.ignition_version}
    with t.during(IGNITION):
        units.add_mount_units(t, out)
    checks.config(t, out)
    _place_embedded(t)


def _place_embedded(t: Translator) -> None:
    """Butane looks an embedded config's finding up by its path in the Butane YAML: on the
    node at exactly that path if there is one, else on line 1, column 1."""
    for finding in t.embedded:
        node = t.nodes.get(finding.path)
        with t.during(SOURCE):
            t.report(finding.severity, finding.path, finding.message,
                     at=position(node) if node is not None else (1, 1))


HOOKS: dict[str, Callable[[Translator, Json, Path], None]] = {
    "resource": _resource,
    "file": _file,
    "directory": _directory,
    "tree": _tree,
    "proxy": _proxy,
    "ignition_config": _ignition_config,
    "tls": _tls,
    "user": _user,
    "group": _group,
    "node_user": _owner,
    "node_group": _owner,
    "unit": _unit,
    "dropin": _dropin,
    "filesystem": _filesystem,
    "storage": _storage,
    "config": _config,
}
