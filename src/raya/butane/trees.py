"""`storage.trees`: a directory under --files-dir becomes files and links."""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from raya.butane.checks import go_clean
from raya.butane.context import Json, Translator
from raya.butane.schema import FILE, LINK, RESOURCE
from raya.butane.source import Path

if TYPE_CHECKING:
    from pathlib import Path as FsPath

_EXISTS = "matching filesystem node has existing contents or different type"


def _walk(root: FsPath) -> Iterator[tuple[str, os.stat_result, FsPath]]:
    """(relative path, lstat, path) in Go's filepath.Walk order: lexical, depth first."""
    for name in sorted(os.listdir(root)):
        child = root / name
        info = child.lstat()
        if stat.S_ISDIR(info.st_mode):
            for rel, sub_info, sub in _walk(child):
                yield f"{name}/{rel}", sub_info, sub
        else:
            yield name, info, child


def _ordered(entry: Json, order: tuple[str, ...]) -> Json:
    return {key: entry[key] for key in order if key in entry}


def expand(t: Translator, trees: list[Any], storage: Json, path: Path) -> None:
    nodes: dict[str, tuple[str, int]] = {}
    for kind in ("files", "directories", "links"):
        for index, entry in enumerate(storage.get(kind, ())):
            nodes.setdefault(entry.get("path", ""), (kind, index))
    for index, tree in enumerate(trees):
        where = (*path, "trees", index)
        if not tree.get("local"):
            continue  # already reported by the tree hook
        if t.files_dir is None:
            t.error(where, "local file paths are relative to a files directory that must be "
                    "given with --files-dir")
            return
        root = t.within_files_dir(tree["local"], where)
        if root is None:
            continue
        if not root.exists():
            t.error(where, f"stat {root}: no such file or directory")
            continue
        if not root.is_dir():
            t.error(where, "root of tree must be a directory")
            continue
        destination = tree.get("path") or "/"
        try:
            for rel, info, source in _walk(root):
                target = go_clean(posixpath.join(destination, rel))
                if stat.S_ISREG(info.st_mode):
                    _add_file(t, storage, nodes, where, target, info, source)
                elif stat.S_ISLNK(info.st_mode):
                    _add_link(t, storage, nodes, where, target, source)
                else:
                    t.error(where, "trees may only contain files, directories, and symlinks")
        except OSError as error:
            t.error(where, f"cannot read tree {root}: {error.strerror or error}")


def _entry(t: Translator, storage: Json, nodes: dict[str, tuple[str, int]], where: Path,
           target: str, kind: str, has_contents: Callable[[Json], bool]) -> Json | None:
    """The `kind` entry at `target` for a tree to fill: an existing one without contents of
    its own, or a new one; None (and an error) where another node is already there."""
    entries = storage.setdefault(kind, [])
    found, index = nodes.get(target, ("", -1))
    if found == kind and not has_contents(entries[index]):
        existing: Json = entries[index]
        return existing
    if found:
        t.error(where, _EXISTS)
        return None
    entry = {"path": target}
    entries.append(entry)
    nodes[target] = (kind, len(entries) - 1)
    t.origins[id(entry)] = where
    return entry


def _reorder(entry: Json, order: tuple[str, ...]) -> None:
    ordered = _ordered(entry, order)
    entry.clear()
    entry.update(ordered)


def _add_file(t: Translator, storage: Json, nodes: dict[str, tuple[str, int]], where: Path,
              target: str, info: os.stat_result, source: FsPath) -> None:
    entry = _entry(t, storage, nodes, where, target, "files",
                   lambda found: "source" in found.get("contents", {}))
    if entry is None:
        return
    contents = dict(entry.get("contents", {}))
    t.contents(source.read_bytes(), contents.get("compression"), contents)
    entry["contents"] = _ordered(contents, RESOURCE.order)
    if entry.get("mode") is None:
        entry["mode"] = 0o755 if info.st_mode & 0o111 else 0o644
    _reorder(entry, FILE.order)


def _add_link(t: Translator, storage: Json, nodes: dict[str, tuple[str, int]], where: Path,
              target: str, source: FsPath) -> None:
    entry = _entry(t, storage, nodes, where, target, "links",
                   lambda found: bool(found.get("target")))
    if entry is None:
        return
    entry["target"] = os.readlink(source)
    _reorder(entry, LINK.order)
