"""Bad input never escapes as anything but ButaneDiagnostics (no traceback, ever)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raya.butane import ButaneDiagnostics, transpile
from tests.butane.helpers import vectors

KEYS = ["variant", "version", "storage", "files", "directories", "links", "trees", "path",
        "mode", "contents", "inline", "local", "source", "compression", "user", "group", "id",
        "name", "overwrite", "append", "systemd", "units", "dropins", "enabled", "mask",
        "contents_local", "passwd", "users", "groups", "uid", "ssh_authorized_keys",
        "filesystems", "device", "format", "with_mount_unit", "kernel_arguments",
        "should_exist", "ignition", "verification", "hash", "http_headers", "value", "<<"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                    st.sampled_from(["fcos", "1.4.0", "1.5.0", "1.6.0", "/etc/x", "x.service",
                                     "0644", "../../etc/passwd", "hello.txt", "tree", "",
                                     "\x00", "a\udc80b", "data:,x", "sha512-00"]),
                    st.text(max_size=20))
TREES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner,
                                                                max_size=5),
    max_leaves=30,
)


def _check(text: str, files_dir: Path | None) -> None:
    try:
        out = transpile(text, files_dir)
    except ButaneDiagnostics as error:
        assert error.diagnostics
        str(error).encode("utf-8")  # printable as is, even for odd input
        error.report().encode("utf-8")
    else:
        json.loads(out)
        out.encode("utf-8")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TREES, st.sampled_from(["1.4.0", "1.5.0", "1.6.0"]))
def test_random_structures(tree: Any, version: str) -> None:
    document = {"variant": "fcos", "version": version}
    if isinstance(tree, dict):
        document.update(tree)
    else:
        document["storage"] = tree
    text = yaml.dump(document, allow_unicode=True)
    _check(text, vectors() / "files")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_random_text(text: str) -> None:
    _check("variant: fcos\nversion: 1.4.0\n" + text, None)


HEAD = "variant: fcos\nversion: 1.4.0\n"
ODD = [
    HEAD + "storage: &a\n  files: [*a]\n",
    HEAD + "? [a, b]\n: 1\n",
    HEAD + "storage: {files: [{path: /a, mode: 99999999999999999999}]}\n",
    HEAD + 'storage: {files: [{path: /a, contents: {local: "a\\0b"}}]}\n',
    HEAD + 'storage: {files: [{path: /a, contents: {inline: "\\ud800"}}]}\n',
    HEAD + 'storage: {files: [{path: /a, mode: "\\udc80"}]}\n',
    HEAD + '"\\udc80": 1\n',
    "---\nvariant: fcos\n---\nversion: 1.4.0\n", "", "~", "[]", "'x'",
]


def test_recursive_aliases_and_odd_keys() -> None:
    for text in ODD:
        _check(text, vectors() / "files")
