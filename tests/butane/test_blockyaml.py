"""blockyaml reads block-style YAML into exactly the tree PyYAML's libyaml composer builds
(values, tags, styles, the marks diagnostics use), or declines and PyYAML reads it.

The oracle is PyYAML itself: every vector, every rendered node config and generated text
(well-formed and mutated) is read both ways and compared node by node.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raya.butane import fullyaml
from raya.butane.blockyaml import read
from raya.butane.source import compose
from raya.model.pins import load_chart_pins
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import generate_example_secrets
from raya.nodes.render import render_cluster
from tests.butane.helpers import vectors


def tree(node: Any) -> Any:
    """What the transpiler reads of a node (PyYAML's or blockyaml's): kind, tag, value, the
    start mark, and for a scalar its style and end mark (report.py underlines from them)."""
    kind = type(node).__name__
    start = (node.start_mark.line, node.start_mark.column)
    if kind == "ScalarNode":
        return (kind, node.tag, node.style, node.value, start,
                (node.end_mark.line, node.end_mark.column))
    if kind == "SequenceNode":
        return (kind, node.tag, start, [tree(item) for item in node.value])
    return (kind, node.tag, start, [(tree(k), tree(v)) for k, v in node.value])


def pyyaml_tree(text: str) -> Any:
    """PyYAML's own nodes (not converted), composed as raya composes them; None when
    PyYAML refuses the text or it holds no document."""
    loader = fullyaml._Loader(text)
    try:
        return tree(loader.get_node()) if loader.check_node() else None
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()


def agrees(text: str) -> bool:
    """Whether blockyaml read `text` (False: it left it to PyYAML); if it did, its tree
    must be PyYAML's."""
    mine = read(text)
    if mine is None:
        return False
    assert tree(mine) == pyyaml_tree(text), text
    return True


def rendered_configs() -> list[str]:
    cluster = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
    names = [node.name for node in cluster.nodes]
    return [node.butane for node in render_cluster(
        cluster, generate_example_secrets(names), charts=load_chart_pins(EXAMPLE_ROOT),
        volume_id="1")]


def test_every_rendered_node_config_is_read_without_pyyaml_and_as_pyyaml_reads_it() -> None:
    configs = rendered_configs()
    assert len(configs) == 4  # the example: a control plane and three agents
    for text in configs:
        assert agrees(text)


def test_every_vector_read_is_read_as_pyyaml_reads_it() -> None:
    cases = sorted((vectors() / "cases").glob("*.bu"))
    read_here = [case.name for case in cases if agrees(case.read_text())]
    # Not a figure to hold: how much of the vectors the subset covers, as a sanity check
    # that the comparison above compared something.
    assert len(read_here) > len(cases) // 2, (len(read_here), len(cases))


UNUSUAL = [
    "a: &x 1\nb: *x\n",  # anchors and aliases
    "a: !!str 1\n",  # tags
    "a: >\n  folded\n",  # folded block
    "a: |2\n   indented\n",  # indentation indicator
    "a: one\n  two\n",  # multi-line plain scalar
    'a: "one\n  two"\n',  # multi-line quoted scalar
    'a: "\\q"\n',  # an escape YAML lacks
    'a: "\\ud800"\n',  # a lone surrogate
    "a: [1,\n  2]\n",  # flow across lines
    "a: {b: [1]}\n",  # nested flow
    "? a\n: b\n",  # complex key
    "a:\tb\n",  # tab
    "a: b\r\nc: d\r\n",  # CRLF
    "---\na: b\n",  # document marker
    "a: b\n---\nc: d\n",  # a second document
    "<<: {a: b}\n",  # merge key
    "a: b",  # no final line break
    "- a\n",  # a root that is no mapping
    "a: b\n c: d\n",  # bad indentation: PyYAML words the error
    "a:\n-\n",  # empty sequence item
    "a: -1\n",  # plain scalar starting with an indicator
    "'a': b\n",  # quoted key
    "a: b # c\n  d: e\n",  # text below a value
    "a: |\n\n",  # empty literal block
    "\ufeffa: b\n",  # BOM
]


def test_the_unusual_forms_are_left_to_pyyaml_which_reads_them() -> None:
    for text in UNUSUAL:
        assert read(text) is None, text
        try:
            oracle = pyyaml_tree(text)
        except yaml.YAMLError:
            continue
        if oracle is not None:
            assert tree(compose(text)) == oracle, text


def test_pyyaml_cycles_stay_cycles() -> None:
    root = compose("a: &x [*x]\n")
    assert root is not None
    inner = root.value[0][1]
    assert inner.value[0] is inner


# -- generated text: well-formed block YAML in many styles, then mutated ----------------

_KEYS = ["a", "path", "x_y", "b.c", "k-1", "0"]
_TEXTS = ["a", "0644", "~", "true", "yes", "-1", "a b", "a#b", "a #b", "a: b", "a:", ":", "",
          " ", "it's", 'say "hi"', "{x}", "[y]", "é", "\t", "#", "|", ">", "&a", "*a", "!x",
          "- ", "? x", "1e3", ",", "%", "@", "`", "\\", "a,b", "/etc/x", "x: |", "\\n",
          "\\x41", "\\u00e9\\U0001F600", "\\q", "\\\"", "\\ ", "\\/", "\\N\\_\\L\\P", "\\x4"]
SCALAR_TEXT = st.one_of(st.sampled_from(_TEXTS), st.text(max_size=8))
VALUES = st.recursive(
    SCALAR_TEXT | st.lists(SCALAR_TEXT, max_size=3).map("\n".join),
    lambda inner: st.lists(inner, min_size=1, max_size=3)
    | st.dictionaries(st.sampled_from(_KEYS), inner, min_size=1, max_size=3),
    max_leaves=12,
)


def _scalar(text: str, column: int, rnd: random.Random) -> list[str]:
    """`text` as the rest of a line (and lines below, for a block), in a random style."""
    style = rnd.choice("pp'\"r||")
    if style == "|" or "\n" in text:
        chomp = rnd.choice(["", "-", "+"])
        pad = " " * (column + rnd.choice([1, 2, 4]))
        body = [pad + line if line else rnd.choice(["", pad]) for line in text.split("\n")]
        return [f"|{chomp}" + rnd.choice(["", " # c"]), *body]
    if style == "'":
        return ["'" + text.replace("'", "''") + "'"]
    if style == '"':
        return ['"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"']
    if style == "r":  # backslashes as they are: YAML's escapes, or errors
        return ['"' + text + '"']
    return [text]


def _block(value: Any, column: int, rnd: random.Random) -> list[str]:
    """The lines of a mapping or sequence whose entries start at `column`."""
    pad = " " * column
    lines: list[str] = []
    entries = value.items() if isinstance(value, dict) else [(None, v) for v in value]
    for key, item in entries:
        head = pad + (f"{key}:" if key is not None else "-")
        if isinstance(item, str):
            first, *rest = _scalar(item, column, rnd)
            lines += [head + " " + first, *rest]
        elif isinstance(item, dict) and all(isinstance(v, str) for v in item.values()) \
                and rnd.random() < 0.3:
            lines.append(head + " {" + ", ".join(f"{k}: {v}" for k, v in item.items()) + "}")
        elif isinstance(item, list) and all(isinstance(v, str) for v in item) \
                and rnd.random() < 0.3:
            lines.append(head + " [" + ", ".join(item) + "]")
        elif key is None and rnd.random() < 0.5:  # compact: `- key: value` / `- - item`
            inner = _block(item, column + 2, rnd)
            lines += [head + " " + inner[0][column + 2:], *inner[1:]]
        else:
            step = rnd.choice([0, 1, 2, 4]) if key is not None and isinstance(item, list) \
                else rnd.choice([1, 2, 4])
            lines += [head, *_block(item, column + step, rnd)]
    return lines


def _mutate(lines: list[str], rnd: random.Random) -> list[str]:
    for _ in range(rnd.choice([0, 0, 1, 2])):
        at = rnd.randrange(len(lines) + 1)
        change = rnd.randrange(5)
        if change == 0:
            lines.insert(at, " " * rnd.randrange(6) + rnd.choice(["", "# c", "#"]))
        elif at < len(lines) and change == 1:
            lines[at] = " " + lines[at]
        elif at < len(lines) and change == 2 and lines[at].startswith(" "):
            lines[at] = lines[at][1:]
        elif at < len(lines) and change == 3:
            lines[at] += rnd.choice([" # c", "#c", " ", ":", " x"])
        elif at < len(lines):
            k = rnd.randrange(len(lines[at]) + 1)
            lines[at] = lines[at][:k] + rnd.choice(" -:#'\"{}[],|>\t&*!?") + lines[at][k:]
    return lines


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_KEYS), VALUES, min_size=1, max_size=3), st.randoms())
def test_generated_block_yaml_is_read_as_pyyaml_reads_it(document: dict[str, Any],
                                                         rnd: random.Random) -> None:
    lines = _mutate(_block(document, rnd.choice([0, 0, 2]), rnd), rnd)
    agrees("\n".join(lines) + "\n")


def test_butane_on_a_node_config_imports_no_pyyaml(tmp_path: Path) -> None:
    """`raya butane --strict FILE` on a block-style config without findings runs without
    importing PyYAML (about a third of the command's start-up otherwise), nor the modules
    only other configs need (URLs a user wrote, inline merge configs, trees); `sys.modules`
    of a fresh interpreter is the witness, not a clock."""
    config = tmp_path / "control-plane.bu"
    config.write_text(rendered_configs()[0])
    probe = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + ' '.join(sys.modules)))\n"
             f"sys.argv = ['raya', 'butane', '--strict', {str(config)!r}]\n"
             "runpy.run_module('raya', run_name='__main__', alter_sys=True)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.startswith('{"ignition":{"version":"3.3.0"}')
    modules = done.stderr.rsplit("MODULES ", 1)[1].split()
    assert "raya.butane.translate" in modules  # the probe saw the transpiler run
    assert not [name for name in modules if name == "yaml" or name.startswith("yaml.")]
    unneeded = {"raya.butane.fullyaml", "raya.butane.urls", "raya.butane.embedded",
                "raya.butane.trees"}
    assert unneeded.isdisjoint(modules), unneeded & set(modules)
