"""Butane (`fcos` 1.4-1.6) → Ignition (3.3-3.5), held to the real Butane's output.

`transpile` is the whole public interface: Butane YAML in, Ignition JSON text out,
or one `ButaneDiagnostics` carrying every problem found, each with its Butane
JSON path (`$.storage.files.0.path`) and its line:column in the YAML.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, NamedTuple

from raya.butane.report import render
from raya.butane.source import Diagnostic, YamlSyntaxError, compose
from raya.butane.translate import Walker
from raya.errors import ButaneError

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["ButaneDiagnostics", "Diagnostic", "Result", "to_json", "translate", "transpile"]

# Go's encoding/json escapes these inside strings; so does Butane's output. A byte that is
# not UTF-8 (kept from a local file or `!!binary` as a surrogate) it writes as \ufffd.
_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029",
     **{chr(0xDC80 + byte): "\\ufffd" for byte in range(128)}}
)
# The same characters, found: a document has few, and str.translate would look up every
# character of it.
_NEEDS_GO_ESCAPE = re.compile("[<>&\u2028\u2029\udc80-\udcff]")
# In an ASCII document only these three can occur: str.replace finds each several times
# faster than the regex scans for all of them (most documents have some `>`, few `<` or `&`).
_ASCII_GO_ESCAPES = tuple((char, _GO_ESCAPES[ord(char)]) for char in "<>&")


# An escaped \b or \f: an odd run of backslashes before the letter.
_SHORT_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\([bf])")
_MAY_SHORT_ESCAPE = re.compile(r"\\[bf]")
_LONG = {"b": "\\u0008", "f": "\\u000c"}


class ButaneDiagnostics(ButaneError):
    """Every error (and, in strict mode, warning) of one transpilation."""

    def __init__(self, source: str, text: str, findings: list[Diagnostic]) -> None:
        self.source = source
        self.text = text
        self.findings = findings
        self.diagnostics = [(d.json_path, d.line, d.column, d.message) for d in findings]
        super().__init__("\n".join(_one_line(source, d) for d in findings))

    def summary(self) -> ButaneError:
        """A one-line error for a CLI that has already shown the full report."""
        errors = sum(d.severity == "error" for d in self.findings)
        warnings = len(self.findings) - errors
        return ButaneError(f"{self.source}: {errors} error(s), {warnings} warning(s) in the "
                           "Butane config (see above)")

    def report(self) -> str:
        """Butane-style report: each finding with the YAML lines around it."""
        return render(self.source, self.text, self.findings)


def _one_line(source: str, d: Diagnostic) -> str:
    where = f"{source}:{d.line}:{d.column}" if d.line else source
    return f"{where}: {d.severity}[{d.json_path}]: {d.message}"


class Result(NamedTuple):
    config: dict[str, Any] | None  # None when an error was found
    diagnostics: list[Diagnostic]  # errors and warnings, in source order

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]


def translate(text: str, files_dir: Path | None = None) -> Result:
    """The Ignition config as a dict plus every diagnostic (warnings do not stop it)."""
    translator = Walker(files_dir)
    try:
        config = translator.config(compose(text))
    except YamlSyntaxError as error:
        return Result(None, [error.diagnostic])
    except RecursionError:  # an alias that contains itself, or absurd nesting
        return Result(None, [Diagnostic("error", (), 0, 0, "YAML nested too deeply (or an "
                                        "alias refers to itself)")])
    if translator.undecoded:
        return Result(None, sorted(translator.undecoded, key=lambda d: (d.line, d.column)))
    # Butane stops after the first stage with an error; later stages never report.
    last = min((d.stage for d in translator.diagnostics if d.severity == "error"), default=2)
    diagnostics = sorted((d for d in translator.diagnostics if d.stage <= last),
                         key=lambda d: (d.line, d.column))
    if config is None or any(d.severity == "error" for d in diagnostics):
        return Result(None, diagnostics)
    return Result(config, diagnostics)


def _go_escape(match: re.Match[str]) -> str:
    return _GO_ESCAPES[ord(match.group())]


def to_json(config: dict[str, Any], *, pretty: bool = False) -> str:
    """Ignition JSON the way Butane writes it (Go's key order and escaping)."""
    if pretty:
        text = json.dumps(config, ensure_ascii=False, indent=2)
    else:
        text = json.dumps(config, ensure_ascii=False, separators=(",", ":"))
    if text.isascii():
        for char, escaped in _ASCII_GO_ESCAPES:
            if char in text:
                text = text.replace(char, escaped)
    else:
        text = _NEEDS_GO_ESCAPE.sub(_go_escape, text)
    if _MAY_SHORT_ESCAPE.search(text):  # several times faster than `in` on this text
        # Butane's JSON encoder (Go's, before 1.22) writes these two as \u0008 and \u000c.
        text = _SHORT_ESCAPE.sub(lambda m: m.group(1) + _LONG[m.group(2)], text)
    return text


def transpile(text: str, files_dir: Path | None = None, *, strict: bool = True,
              pretty: bool = False, source: str = "<stdin>") -> str:
    """Butane YAML → Ignition JSON text; raises ButaneDiagnostics with every problem.

    In strict mode (raya's mode) a warning is an error, as with `butane --strict`.
    """
    result = translate(text, files_dir)
    failing = result.diagnostics if strict else result.errors
    if result.config is None or failing:
        raise ButaneDiagnostics(source, text, failing or result.diagnostics)
    return to_json(result.config, pretty=pretty)
