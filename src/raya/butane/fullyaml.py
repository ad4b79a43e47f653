"""Any YAML, through PyYAML's composer (libyaml's when PyYAML has it): for the text
blockyaml does not read, and the syntax errors, worded and placed as Butane reports them.
Its nodes are turned into blockyaml's, so the walk reads one kind of node."""

from __future__ import annotations

import yaml

from raya.butane.blockyaml import IMPLICIT, MappingNode, Mark, Node, ScalarNode, SequenceNode
from raya.butane.source import Diagnostic, YamlSyntaxError


class _Untyped(yaml.resolver.BaseResolver):
    """No implicit typing: go-yaml's rules are applied per field, later."""

    def descend_resolver(self, current_node: object, current_index: object) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass

    def resolve(self, kind: type, value: object, implicit: object) -> str:
        return IMPLICIT


try:  # libyaml is several times faster; both report the same marks
    from yaml._yaml import CParser

    class _Loader(CParser, _Untyped):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Untyped.__init__(self)

except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.composer import Composer
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(Reader, Scanner, Parser, Composer, _Untyped):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)
            _Untyped.__init__(self)


def compose(text: str) -> Node | None:
    """The document's root node (None for an empty document)."""
    try:
        loader = _Loader(text)
        try:
            # Like go-yaml's Unmarshal: the first document; later ones are never read.
            root = loader.get_node() if loader.check_node() else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as error:
        line, column = _go_yaml_line(error)
        problem = " ".join(filter(None, (error.context, error.problem)))
        raise YamlSyntaxError(
            Diagnostic("error", (), line, column, f"invalid YAML: {problem}")
        ) from error
    except yaml.YAMLError as error:
        raise YamlSyntaxError(Diagnostic("error", (), 0, 0, f"invalid YAML: {error}")) from error
    return None if root is None else converted(root, {})


def converted(node: yaml.Node, done: dict[int, Node]) -> Node:
    """blockyaml's node for a PyYAML node; an alias's node is converted once (`done`), so
    a structure that contains itself stays a cycle, as the walk expects."""
    found = done.get(id(node))
    if found is not None:
        return found
    start = Mark(node.start_mark.line, node.start_mark.column)
    end = Mark(node.end_mark.line, node.end_mark.column)
    mine: Node
    if isinstance(node, yaml.ScalarNode):
        done[id(node)] = mine = ScalarNode(node.tag, node.value, start, end, node.style)
    elif isinstance(node, yaml.SequenceNode):
        done[id(node)] = mine = SequenceNode(node.tag, [], start, end)
        mine.value.extend(converted(item, done) for item in node.value)
    else:
        done[id(node)] = mine = MappingNode(node.tag, [], start, end)
        mine.value.extend((converted(k, done), converted(v, done)) for k, v in node.value)
    return mine


def _go_yaml_line(error: yaml.MarkedYAMLError) -> tuple[int, int]:
    """The line go-yaml names for a syntax error (yaml.go `parser.fail`): the context
    mark's 0-based line if there is one, else the problem mark's, plus one for scanner
    errors only. So a parser error names the line before its context, as Butane prints."""
    scanner = isinstance(error, yaml.scanner.ScannerError)
    for mark in (error.context_mark, error.problem_mark):
        if mark is not None and mark.line != 0:
            return mark.line + scanner, mark.column + 1
    mark = error.problem_mark or error.context_mark
    return (mark.line + 1, mark.column + 1) if mark else (0, 0)
