"""The Packer template as python-hcl2 parses it, and an evaluator for the few expression forms
the template uses to derive labels and URLs from the pins and to validate its variables. Any
other form fails loudly, so a change of the template cannot slip past the tests unevaluated."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import hcl2

_CALL_REPLACE = re.compile(r'replace\((?P<arg>.+), "(?P<old>[^"]*)", "(?P<new>[^"]*)"\)')
_READ_PIN = re.compile(r'jsondecode\(file\("\$\{path\.root\}/(?P<name>[a-z0-9-]+\.pin)"\)\)')
# `coalesce(X, "D")`: X unless it is null or empty, else D.
_COALESCE = re.compile(r'coalesce\((?P<arg>[^(),]+), "(?P<default>[^"]*)"\)')
# `split("SEP", X)`: X's parts between SEPs.
_SPLIT = re.compile(r'split\("(?P<sep>[^"]*)", (?P<arg>[^()]+)\)')
# `length(regexall("RE", X)) == N`: how many matches of RE (RE2; the template's patterns mean
# the same in Python's re) X holds, compared with N.
_COUNT_MATCHES = re.compile(
    r'length\(regexall\("(?P<pattern>[^"]*)", (?P<arg>[^()]+)\)\) == (?P<count>[0-9]+)'
)
_TRAVERSAL = re.compile(r"(?:var|local)(?:\.[a-z_0-9]+)+")
# `X[Y]`, X a traversal, Y a traversal or a number: an element chosen by a value.
_INDEX = re.compile(rf"(?P<base>{_TRAVERSAL.pattern})\[(?P<key>{_TRAVERSAL.pattern}|[0-9]+)\]")
# `contains(["a", "b"], X)`.
_CONTAINS = re.compile(r'contains\(\[(?P<items>"[^"]*"(?:, "[^"]*")*)\], (?P<arg>[^()]+)\)')
_INTERPOLATION = re.compile(r"\$\{([^${}]+)\}")


def load(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as handle:
        data: dict[str, Any] = hcl2.load(handle)
    return data


def locals_of(template: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for block in template["locals"]:
        merged.update({k: v for k, v in block.items() if not k.startswith("__")})
    return merged


def variables_of(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name.strip('"'): body for block in template["variable"] for name, body in block.items()}


def source_of(template: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    for block in template["source"]:
        if f'"{kind}"' in block and f'"{name}"' in block[f'"{kind}"']:
            body: dict[str, Any] = block[f'"{kind}"'][f'"{name}"']
            return body
    raise AssertionError(f"no source {kind}.{name} in the template")


class Evaluator:
    """Evaluates the template's locals with `variables`, reading pins from `root`."""

    def __init__(self, template: dict[str, Any], root: Path, variables: dict[str, str]) -> None:
        self.locals = locals_of(template)
        self.root = root
        self.variables = variables
        self.pins_read: list[str] = []

    def value(self, raw: Any) -> Any:
        if isinstance(raw, dict):
            return {key: self.value(item) for key, item in raw.items() if not key.startswith("__")}
        if not isinstance(raw, str):
            raise AssertionError(f"cannot evaluate {raw!r}")
        if raw.startswith('"') and raw.endswith('"'):
            return _INTERPOLATION.sub(lambda m: str(self.expression(m.group(1))), raw[1:-1])
        if raw.startswith("${") and raw.endswith("}"):
            return self.expression(raw[2:-1])
        raise AssertionError(f"cannot evaluate {raw!r}")

    def expression(self, text: str) -> Any:
        text = text.strip()
        if match := _READ_PIN.fullmatch(text):
            self.pins_read.append(match["name"])
            return json.loads((self.root / match["name"]).read_text(encoding="utf-8"))
        if match := _COUNT_MATCHES.fullmatch(text):
            found = re.findall(match["pattern"], str(self.expression(match["arg"])))
            return len(found) == int(match["count"])
        if match := _INDEX.fullmatch(text):
            key = match["key"]
            return self.expression(match["base"])[
                int(key) if key.isdigit() else self.expression(key)
            ]
        if match := _COALESCE.fullmatch(text):
            found = self.expression(match["arg"])
            return match["default"] if found in (None, "") else found
        if match := _SPLIT.fullmatch(text):
            return str(self.expression(match["arg"])).split(match["sep"])
        if match := _CONTAINS.fullmatch(text):
            items = [item.strip('"') for item in match["items"].split(", ")]
            return self.expression(match["arg"]) in items
        if match := _CALL_REPLACE.fullmatch(text):
            return str(self.expression(match["arg"])).replace(match["old"], match["new"])
        if text.startswith('"') and text.endswith('"') and '"' not in text[1:-1]:
            return text[1:-1]
        if _TRAVERSAL.fullmatch(text):
            kind, first, *rest = text.split(".")
            value: Any = self.variables[first] if kind == "var" else self.value(self.locals[first])
            for key in rest:
                value = value[key]
            return value
        raise AssertionError(f"the test cannot evaluate the template expression {text!r}")
