"""raya's own command layer: each command's options and arguments declared, parsed from argv.

Small on purpose (start-up time, issue 26): no Typer, click or rich, nor dataclasses,
inspect or typing at run time. What it accepts is click's grammar as raya used it:
`--opt VALUE`, `--opt=VALUE`, `-s VALUE`, `-sVALUE`, flags and `--x/--no-x` pairs,
repeated options, defaults from environment variables, positional arguments (the last
may take the rest), `--` ending the options, `--help` anywhere before it. Usage errors
exit 2 with click's message ("Usage: ..." / "Try '... --help' for help." / "Error: ...").
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence


class UsageError(Exception):
    """Bad command-line input: raya prints it under the command's usage and exits 2."""


def no_such(what: str, name: str, known: Iterable[str]) -> str:
    """Click's message for an unknown command or long option, with the known names closest
    to `name` (click's `NoSuchCommand`/`NoSuchOption`: difflib's close matches)."""
    from difflib import get_close_matches

    close = sorted(get_close_matches(name, list(known)))
    message = f"No such command '{name}'." if what == "command" else f"No such option: {name}"
    if not close:
        return message
    if len(close) == 1:
        return f"{message} Did you mean '{close[0]}'?"
    return f"{message} (Did you mean one of: {', '.join(map(repr, close))}?)"


class BadParameter(UsageError):
    """A value the command's own checks refuse (click's "Invalid value")."""

    def __init__(self, message: str, param_hint: str | None = None) -> None:
        hint = f" for {param_hint}" if param_hint else ""
        super().__init__(f"Invalid value{hint}: {message}")


def _path(value: str) -> object:
    # pathlib reads '' as '.', the current folder: a file or folder nobody named.
    if not value or "\0" in value:
        raise ValueError(f"{value!r} is not a path; accepted: a file or folder path")
    from pathlib import Path  # only when a path is given (pathlib costs start-up time)

    return Path(value)


def _float(value: str) -> object:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid float.") from None


def _seconds(value: str) -> object:
    """A time to wait: float() also reads 'nan', 'inf' and '1e999' (infinite), and a negative
    number, none of them a time anything could wait for."""
    seconds = _float(value)
    assert isinstance(seconds, float)
    if not 0 < seconds < float("inf"):
        raise ValueError(
            f"{value!r} is not a time to wait; accepted: a number of seconds greater than 0"
        )
    return seconds


def _stack(value: str) -> object:
    """A Pulumi stack name, as Pulumi's backends check it (pulumi/pulumi, `validateStackName`:
    `^[A-Za-z0-9_.-]{1,100}$`); raya also reads `Pulumi.<stack>.yaml`, so no '/' either."""
    characters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
    if not 0 < len(value) <= 100 or value.strip(characters):
        raise ValueError(
            f"{value!r} is not a stack name; accepted: 1-100 letters, digits, '_', '.' or '-'"
        )
    return value


def _directory(value: str) -> object:
    """An existing directory, as click's `Path(exists=True, file_okay=False)` checks it."""
    if not os.path.exists(value):
        raise ValueError(f"Directory {value!r} does not exist.")
    if not os.path.isdir(value):
        raise ValueError(f"Directory {value!r} is a file.")
    return _path(value)


def _url(value: str) -> object:
    """An http(s) URL with a host: an empty one, or one without its scheme, would be read as
    a path on no server."""
    scheme, separator, rest = value.partition("://")
    host = rest.partition("/")[0]
    if scheme not in ("http", "https") or not separator or not host or value != value.strip():
        raise ValueError(
            f"{value!r} is not a URL; accepted: an http:// or https:// URL with a host, such as "
            "https://example.org/path"
        )
    return value


def _max_unavailable(value: str) -> object:
    from raya.model.unavailable import MaxUnavailable

    return MaxUnavailable.parse(value)


# Each kind of value: (the name help shows for it, what turns the text into the value).
KINDS: dict[str, tuple[str, Callable[[str], object]]] = {
    "text": ("<str>", str),
    "path": ("<path>", _path),
    "seconds": ("<float>", _seconds),
    "stack": ("<str>", _stack),
    "url": ("<str>", _url),
    "directory": ("<directory>", _directory),
    "max-unavailable": ("<count|percent%>", _max_unavailable),
}


class Option:
    """`--name`/`-n` taking a value of `kind`, a flag (`kind="flag"`, or names "--x/--no-x"
    for a pair), or a repeatable one (`multiple`). `show_default`: False, or the text help
    shows in place of the default."""

    def __init__(
        self, *names: str, help: str, default: object = None, kind: str = "text",
        envvar: str | None = None, show_default: bool | str = True, dest: str | None = None,
        multiple: bool = False,
    ) -> None:  # fmt: skip
        self.names: tuple[str, ...] = ()
        self.off: tuple[str, ...] = ()  # the names of a pair's "no" side
        for name in names:
            on, _, off = name.partition("/")
            self.names += (on,)
            self.off += (off,) if off else ()
        self.kind = "flag" if self.off else kind
        self.flag = self.kind == "flag"
        self.default: object = ([] if multiple else False if self.flag else None) \
            if default is None else default  # fmt: skip
        self.help, self.envvar, self.show_default = help, envvar, show_default
        self.multiple = multiple
        self.dest = dest or self.names[0].lstrip("-").replace("-", "_")

    @property
    def hint(self) -> str:
        """How click names the option in errors: '--files-dir' / '-d'."""
        return " / ".join(f"'{name}'" for name in self.names)

    def convert(self, value: str) -> object:
        try:
            return KINDS[self.kind][1](value)
        except ValueError as error:
            raise UsageError(f"Invalid value for {self.hint}: {error}") from None


class Argument:
    """A positional argument; `multiple`: it takes all the remaining ones (the last only)."""

    def __init__(
        self, name: str, *, help: str, default: object = None, required: bool = False,
        multiple: bool = False,
    ) -> None:  # fmt: skip
        self.dest, self.help, self.required, self.multiple = name, help, required, multiple
        self.default: object = [] if multiple and default is None else default


class Command:
    """A command: its function, what it takes, and its help (the function's docstring)."""

    def __init__(
        self, path: str, function: Callable[..., None], params: Sequence[Option | Argument],
        *, pass_unknown: bool = False,
    ) -> None:  # fmt: skip
        self.path, self.function, self.pass_unknown = path, function, pass_unknown
        self.options = [p for p in params if isinstance(p, Option)]
        self.arguments = [p for p in params if isinstance(p, Argument)]
        self.help = function.__doc__ or ""

    def usage(self) -> str:
        words = [f"raya {self.path} [OPTIONS]"]
        for argument in self.arguments:
            name = f"{{{argument.dest}}}" if argument.required else f"[{argument.dest}]"
            words.append(name + ("..." if argument.multiple else ""))
        return " ".join(words)

    def parse(self, args: Sequence[str]) -> dict[str, object] | None:
        """The function's keyword arguments from `args`; None when --help was asked for."""
        values: dict[str, object] = {}
        repeated: dict[str, list[object]] = {}  # the values of `multiple` options
        positional: list[str] = []
        words = iter(args)
        for word in words:
            if word == "--":
                positional += words
            elif word == "--help":
                return None
            elif word.startswith("-") and word != "-":
                option, value = self._match(word)
                if option is None:
                    positional.append(word)
                elif option.flag:
                    if value is not None:
                        raise UsageError(f"Option '{word.split('=')[0]}' does not take a value.")
                    values[option.dest] = word not in option.off
                else:
                    if value is None:
                        value = next(words, None)
                        if value is None:
                            raise UsageError(f"Option '{word}' requires an argument.")
                    converted = option.convert(value)
                    if option.multiple:
                        repeated.setdefault(option.dest, []).append(converted)
                    else:
                        values[option.dest] = converted
            else:
                positional.append(word)
        values.update(repeated)
        for option in self.options:
            if option.dest not in values:
                given = os.environ.get(option.envvar or "") or option.default
                values[option.dest] = option.convert(given) if isinstance(given, str) else given
        for argument in self.arguments:
            if argument.multiple:
                values[argument.dest], positional = positional, []
            elif positional:
                values[argument.dest] = positional.pop(0)
            elif argument.required:
                raise UsageError(f"Missing argument '{argument.dest}'.")
            else:
                values[argument.dest] = argument.default
        if positional:
            raise UsageError(f"Got unexpected extra argument{'s' * (len(positional) > 1)} "
                             f"({' '.join(positional)})")  # fmt: skip
        return values

    def _match(self, word: str) -> tuple[Option | None, str | None]:
        """The option `word` names and the value it carries (`--x=1`, `-s1`), if any."""
        for option in self.options:
            if word.startswith("--"):
                name, equals, value = word.partition("=")
                if name in option.names or name in option.off:
                    return option, value if equals else None
            else:
                for name in option.names:
                    if len(name) == 2 and word.startswith(name):
                        return option, word[2:] or None
        if self.pass_unknown:
            return None, None
        name = word.split("=")[0]
        if not name.startswith("--"):  # as click: no suggestion for a short option
            raise UsageError(f"No such option: {name}")
        known = [n for o in self.options for n in (*o.names, *o.off) if n.startswith("--")]
        raise UsageError(no_such("option", name, [*known, "--help"]))


class Group:
    """Commands under one name (`raya image`): its own help lists them."""

    def __init__(self, path: str, help: str) -> None:
        self.path, self.help = path, help
        self.commands: dict[str, Command] = {}

    def usage(self) -> str:
        return f"raya {self.path} [OPTIONS] COMMAND [ARGS]..."


class Commands:
    """What a module adds to `raya`: its commands by name, declared with `command`."""

    def __init__(self) -> None:
        self.table: dict[str, Command | Group] = {}

    def command(
        self, *params: Option | Argument, name: str | None = None, group: str = "",
        pass_unknown: bool = False,
    ) -> Callable[[Callable[..., None]], Callable[..., None]]:  # fmt: skip
        """Declare the decorated function as command `name` (default: the function's)."""

        def declare(function: Callable[..., None]) -> Callable[..., None]:
            own = name or function.__name__
            path = f"{group} {own}".strip()
            found = Command(path, function, params, pass_unknown=pass_unknown)
            owner = self.table[group] if group else None
            if isinstance(owner, Group):
                owner.commands[own] = found
            else:
                assert not group, f"no group {group} declared"
                self.table[own] = found
            return function

        return declare

    def group(self, name: str, help: str) -> None:
        """Declare group `name`: its commands are declared with `group=name`."""
        self.table[name] = Group(name, help)


def confirm(text: str, *, to_stderr: bool = False) -> bool:
    """Ask `text [y/N]: ` and read the answer as click's `confirm` does: y/yes or n/no (any
    case), nothing for no, anything else asks again; no input at all aborts (exit 1)."""
    stream = sys.stderr if to_stderr else sys.stdout
    while True:
        stream.write(f"{text} [y/N]: ")
        stream.flush()
        line = sys.stdin.readline()
        if not line:
            raise KeyboardInterrupt  # click's Abort: "Aborted!", exit 1
        answer = line.strip().lower()
        if answer in ("y", "yes", "n", "no", ""):
            return answer in ("y", "yes")
        stream.write("Error: invalid input\n")

