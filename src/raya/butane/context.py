"""The state of one translation, shared by the walk and the rules it applies.

Where diagnostics go (placed on the YAML node at fault), the fcos version being
read, the files directory and how local contents become a data URL. The walk in
translate.py drives it; checks.py, units.py and trees.py only use it, so imports
flow one way: translate → checks/units/trees → context.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from raya.butane.blockyaml import Node
from raya.butane.dataurl import make_data_url
from raya.butane.source import Diagnostic, Path, json_path, position, width

if TYPE_CHECKING:
    from pathlib import Path as FsPath

Json = dict[str, Any]

# Butane's stages (config/common TranslateBytes): it validates the Butane config, then
# translates it (reading local files and trees), then validates the Ignition result, and
# stops after the first stage with an error: later stages' findings never appear.
SOURCE, TRANSLATE, IGNITION = 0, 1, 2


class Translator:
    """One translation's state: version, diagnostics, files directory, YAML nodes seen."""

    def __init__(self, files_dir: FsPath | None) -> None:
        self.files_dir = files_dir
        self.minor = 0
        self.ignition_version = ""
        self.mounts: list[tuple[Path, Json]] = []  # filesystems with_mount_unit, in order
        self.embedded: list[Diagnostic] = []  # findings in inline merge/replace configs
        self.contents_keys: dict[Path, str] = {}  # unit → contents or contents_local
        self.origins: dict[int, Path] = {}  # id() of a tree-generated node → its tree
        self.diagnostics: list[Diagnostic] = []
        self.stage = IGNITION
        # What Butane refuses before translating (go-yaml decoding, variant and version):
        # it names no JSON path then, and reports nothing else.
        self.undecoded: list[Diagnostic] = []
        self.nodes: dict[Path, Node] = {}  # every value node we visited, by Butane path
        self.keys: dict[Path, Node] = {}  # and the key node that introduced it

    # -- reporting -------------------------------------------------------------------

    def report(self, severity: str, path: Path, message: str, *, key: bool = False,
               at: tuple[int, int] | None = None) -> None:
        """A diagnostic at `path`, placed on the nearest YAML node we know (or `at`)."""
        if not message.isascii():  # keep it printable even if the YAML held odd escapes
            message = message.encode("utf-8", "backslashreplace").decode("utf-8")
        if at is not None:
            self.diagnostics.append(Diagnostic(severity, path, *at, message, stage=self.stage))
            return
        probe = path
        table = self.keys if key else self.nodes
        while probe and probe not in table:
            probe = probe[:-1]
            table = self.nodes
        node = table.get(probe)
        if node is None:
            self.diagnostics.append(Diagnostic(severity, path, 0, 0, message, stage=self.stage))
            return
        line, column = position(node)
        spans_key = key and table is self.keys
        self.diagnostics.append(
            Diagnostic(severity, path, line, column, message, width(node, key=spans_key),
                       self.stage)
        )

    @contextmanager
    def during(self, stage: int) -> Iterator[None]:
        """Findings reported meanwhile belong to `stage` (IGNITION otherwise)."""
        saved, self.stage = self.stage, stage
        try:
            yield
        finally:
            self.stage = saved

    def undecodable(self, node: Node | None, path: Path, message: str) -> None:
        """A finding of go-yaml's decoding: at `$`, on the line of the node at fault."""
        where = f"{json_path(path)}: " if path else ""
        line, column = position(node) if node is not None else (0, 0)
        self.undecoded.append(Diagnostic("error", (), line, column, where + message,
                                         width(node) if node is not None else 1))

    def error(self, path: Path, message: str, *, stage: int | None = None) -> None:
        """An error; `stage` if Butane finds it before validating the Ignition result."""
        if stage is None:
            self.report("error", path, message)
            return
        with self.during(stage):
            self.report("error", path, message)

    def warn(self, path: Path, message: str) -> None:
        self.report("warning", path, message)

    # -- local files -------------------------------------------------------------------

    def read_local(self, name: str, path: Path) -> bytes | None:
        """A file under the files directory, or None after reporting why not."""
        with self.during(TRANSLATE):
            return self._read_local(name, path)

    def _read_local(self, name: str, path: Path) -> bytes | None:
        if self.files_dir is None:
            self.error(path, "local file paths are relative to a files directory that must be "
                       "given with --files-dir")
            return None
        target = self.within_files_dir(name, path)
        if target is None:
            return None
        try:
            return target.read_bytes()
        except FileNotFoundError:
            self.error(path, f"open {target}: no such file or directory")
        except IsADirectoryError:
            self.error(path, f"read {target}: is a directory (expected a file)")
        except OSError as error:
            self.error(path, f"open {target}: {error.strerror or error}")
        return None

    def within_files_dir(self, name: str, path: Path) -> FsPath | None:
        assert self.files_dir is not None
        if "\0" in name:
            self.error(path, "invalid local file name (contains a NUL byte)")
            return None
        from pathlib import Path as FsPath  # only with local files: pathlib costs start-up

        # Like Go's filepath.Join: a leading "/" does not escape the files directory.
        target = FsPath(os.path.normpath(f"{self.files_dir}/{name}"))
        base = os.path.abspath(self.files_dir)
        resolved = os.path.abspath(target)
        if resolved != base and not resolved.startswith(base + os.sep):
            self.error(path, "local file path traverses outside the files directory")
            return None
        return target

    def contents(self, data: bytes, compression: str | None, out: Json) -> None:
        """Set source (and compression) the way Butane encodes inline and local data."""
        url, gzipped = make_data_url(data, may_compress=not compression)
        out["source"] = url
        if not compression:
            # Butane always writes compression here, so a merged parent cannot leak one in.
            out["compression"] = "gzip" if gzipped else ""
