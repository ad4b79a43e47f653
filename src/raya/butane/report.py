"""Diagnostics rendered like Butane's: the YAML lines around each finding, underlined."""

from __future__ import annotations

from raya.butane.source import Diagnostic

_CONTEXT = 2  # lines shown before and after the one at fault


def render(source: str, text: str, findings: list[Diagnostic]) -> str:
    lines = text.encode("utf-8", "backslashreplace").decode("utf-8").split("\n")
    blocks = []
    for d in findings:
        head = f"{d.severity}[{d.json_path}]"
        if not d.line:
            blocks.append(f"{head}: {d.message}\n  --> {source}\n")
            continue
        first = max(1, d.line - _CONTEXT)
        last = min(len(lines), d.line + _CONTEXT)
        gutter = len(str(last))
        bar = " " * (gutter + 1) + " |"
        out = [f"{head}:", f"  --> {source}:{d.line}:{d.column}", bar]
        for number in range(first, last + 1):
            out.append(f" {number:>{gutter}} | {lines[number - 1]}".rstrip())
            if number == d.line:
                out.append(f"{bar} {' ' * (d.column - 1)}{'^' * d.width} {d.message}")
        out.append(bar)
        blocks.append("\n".join(out) + "\n")
    return "\n".join(blocks)
