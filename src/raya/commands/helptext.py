"""Help pages drawn as Typer drew them (unstyled), without Typer, click or rich.

The Usage line, the help text's paragraphs, then rounded panels: Arguments, Options (each
option's names, the kind of value it takes, its help with `[env var: ...]`,
`[default: ...]`, `[required]`) and, for `raya` and `raya image`, Commands. Every line is
padded to the width, as rich pads them.
"""

from __future__ import annotations

from raya.commands.parser import KINDS, Argument, Command, Group, Option
from raya.commands.registry import APP_HELP, COMMANDS, OPTIONS

HELP = "Show this message and exit."
# The narrowest column the options' help wraps into beside their names: narrower, each
# option's help goes on the lines under its names.
NARROWEST_TEXT = 20


def top_help(width: int) -> str:
    """`raya --help`: the root options and every command with its summary."""
    options = [(name, "", "", "", text) for name, text in OPTIONS.items()]
    commands = {name: summary for name, (_, summary) in COMMANDS.items()}
    return _page("raya [OPTIONS] COMMAND [ARGS]...", APP_HELP, width,
                 _table("Options", options, width) + _listing(commands, width))  # fmt: skip


def group_help(group: Group, width: int) -> str:
    """`raya image --help`: its commands with their summaries."""
    commands = {name: _paragraphs(command.help)[0] for name, command in group.commands.items()}
    options = [("--help", "", "", "", HELP)]
    return _page(group.usage(), group.help, width,
                 _table("Options", options, width) + _listing(commands, width))  # fmt: skip


def command_help(command: Command, width: int) -> str:
    """`raya CMD --help`: its help text, arguments and options."""
    panels = []
    if command.arguments:
        rows = [_argument_row(argument) for argument in command.arguments]
        panels += _table("Arguments", rows, width, required=True)
    rows = [_option_row(option) for option in command.options]
    panels += _table("Options", [*rows, ("--help", "", "", "", HELP)], width)
    return _page(command.usage(), command.help, width, panels)


def _page(usage: str, help: str, width: int, panels: list[str]) -> str:
    """Usage, the help text, then the panels. Each paragraph is filled to the width as one
    text: Typer kept the docstring's own line breaks, which then cut sentences wherever the
    source was wrapped, whatever the terminal's width."""
    lines = ["", *(" " + line for line in _wrap(f"Usage: {usage}", width - 2)), ""]
    for index, paragraph in enumerate(_paragraphs(help)):
        lines += [""] * (index > 0) + [" " + line for line in _wrap(paragraph, width - 2)]
    lines.append("")
    return "\n".join(line.ljust(width) for line in lines + panels) + "\n\n"


def _paragraphs(help: str) -> list[str]:
    """The docstring's paragraphs, each on one line."""
    lines = help.strip().splitlines()
    text = "\n".join(line.strip() for line in lines)
    return [" ".join(paragraph.split()) for paragraph in text.split("\n\n")]


Row = tuple[str, str, str, str, str]  # long names, short, the pair's "no", value, help


def _option_row(option: Option) -> Row:
    notes = [option.help]
    if option.envvar:
        notes.append(f"[env var: {option.envvar}]")
    default = _default(option)
    if default:
        notes.append(f"[default: {default}]")
    long = ",".join(name for name in option.names if name.startswith("--"))
    short = ",".join(name for name in option.names if not name.startswith("--"))
    kind = "" if option.flag else KINDS[option.kind][0]
    return long, short, ",".join(option.off), kind, "\n".join(notes)


def _default(option: Option) -> str:
    """What `[default: ...]` says: the `show_default` text in parentheses, as Typer shows
    it; a pair's side; nothing for a plain flag, a list or no default."""
    if isinstance(option.show_default, str):
        return f"({option.show_default})"
    if not option.show_default or option.multiple or option.default is None:
        return ""
    if option.off:
        return option.names[0].lstrip("-") if option.default else option.off[0].lstrip("-")
    return "" if option.flag else str(option.default)


def _argument_row(argument: Argument) -> Row:
    notes = [argument.help]
    if argument.default is not None and not argument.multiple:
        notes.append(f"[default: {argument.default}]")
    if argument.required:
        notes.append("[required]")
    return "", argument.dest, "", KINDS["text"][0], "\n".join(notes)


def _table(title: str, rows: list[Row], width: int, required: bool = False) -> list[str]:
    """A panel of rows laid out as Typer's rich table: each column as wide as its widest
    cell, two spaces between columns (empty ones too: Typer has a fifth, for a pair's short
    "no" name), the help wrapped into what is left. A column
    of `*` before them marks required arguments."""
    star = required and any("[required]" in row[4] for row in rows)
    widths = [max(len(row[k]) for row in rows) for k in range(4)]
    before = sum(widths) + 10 + (2 if star else 0)
    beside = width - 4 - before >= NARROWEST_TEXT  # else each help goes under its names
    cells = []
    for row in rows:
        mark = ("* " if "[required]" in row[4] else "  ") if star else ""
        names = [cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)]
        names.insert(3, "")  # Typer's column for a pair's short "no" name, before the value
        left = mark + "  ".join(names) + "  "
        if beside:
            cells.append((left, _notes(row[4], width - 4 - before)))
        else:  # the names on a line of their own, unaligned, the help under them
            flat = " ".join(cell for cell in (mark.strip(), *row[:4]) if cell)
            cells.append(("", [flat, *("    " + line for line in _notes(row[4], width - 8))]))
    return _panel(title, cells, width)


def _notes(text: str, width: int) -> list[str]:
    """The help and its notes: on one line when all fit (as rich's Columns sets them side
    by side), else each wrapped on lines of its own."""
    notes = text.split("\n")
    if len(" ".join(notes)) <= width:
        return [" ".join(notes)]
    return [line for note in notes for line in _wrap(note, width)]


def _listing(rows: dict[str, str], width: int) -> list[str]:
    """The Commands panel: each name, its summary wrapped beside it."""
    column = max(map(len, rows)) + 1
    cells = [(f"{name:<{column}} ", _notes(text, width - 4 - column - 1))
             for name, text in rows.items()]  # fmt: skip
    return _panel("Commands", cells, width)


def _panel(title: str, cells: list[tuple[str, list[str]]], width: int) -> list[str]:
    """A rounded box named `title`: each row's left part, its lines beside it."""
    inner = width - 4  # the borders and a space inside each
    lines = ["╭─ " + title + " " + "─" * (width - len(title) - 5) + "╮"]
    for left, text in cells:
        for index, line in enumerate(text):
            beside = left if index == 0 else " " * len(left)
            lines.append("│ " + f"{beside}{line}".ljust(inner) + " │")
    lines.append("╰" + "─" * (width - 2) + "╯")
    return lines


def _wrap(text: str, width: int) -> list[str]:
    """Words filled greedily into lines of at most `width` characters, as rich wraps: a
    word longer than a line folded over as many as it takes."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines += [word[k : k + width] for k in range(0, len(word), width)]
    return lines or [""]
