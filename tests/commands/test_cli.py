"""The `raya` command line: help everywhere, version, exit statuses and one-line errors."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from raya import __version__
from raya.cli import COMMANDS, app
from tests.support import REPO


def commands(
    command: Any = None, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group under `command` (default: the whole app), with its path."""
    command = command or typer.main.get_command(app)
    yield path, command
    context = typer.Context(command)
    for name in sorted(getattr(command, "list_commands", lambda _: [])(context)):
        yield from commands(command.get_command(context, name), (*path, name))


ALL = list(commands())


def raya(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"}
    return subprocess.run(
        [sys.executable, "-m", "raya", *args], cwd=cwd, capture_output=True, text=True, env=env
    )


def test_the_commands_of_the_issues_are_present() -> None:
    paths = {" ".join(path) for path, _ in ALL}
    assert {"keys", "render", "image"} <= paths


@pytest.mark.parametrize(("path", "command"), ALL, ids=[" ".join(p) or "raya" for p, _ in ALL])
def test_help_on_every_command(path: tuple[str, ...], command: Any) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert f"Usage: raya {' '.join(path)}".rstrip() in result.output
    assert command.help, f"raya {' '.join(path)} has no help text"
    for param in command.params:
        if param.param_type_name == "option":
            assert param.help, f"raya {' '.join(path)} {param.opts[0]} has no help text"
            assert param.opts[0] in result.output


def test_the_help_lists_each_command_with_its_own_summary() -> None:
    listed = raya("--help").stdout
    # Every command the modules define is registered (with its module), and no other.
    defined = {name: module for module in {module for module, _ in COMMANDS.values()}
               for name in typer.main.get_group(
                   importlib.import_module(f"raya.commands.{module}").commands).commands}
    assert defined == {name: module for name, (module, _) in COMMANDS.items()}
    for name, (_, summary) in COMMANDS.items():
        command = dict(ALL)[(name,)]
        assert " ".join(command.help.split("\n\n")[0].split()) == summary, name
        assert f" {name} " in listed


def typer_help(env: dict[str, str]) -> str:
    """`raya --help` as the Typer application itself prints it (not a terminal: unstyled)."""
    probe = "from raya.commands.root import app; app(['--help'], prog_name='raya')"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            env={**os.environ, "TERMINAL_WIDTH": "", **env})
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(
    "env", [{"COLUMNS": str(width)} for width in (45, 46, 53, 60, 71, 80, 97, 120, 200)]
    + [{"COLUMNS": "200", "TERMINAL_WIDTH": "77"}], ids=lambda env: " ".join(env.values()),
)
def test_fast_help_is_typers_help(env: dict[str, str]) -> None:
    """`raya --help` comes from raya.commands.registry without Typer (start-up time): the
    same bytes as Typer's help, so that the two never drift apart (a command, a summary,
    an option or the layout changed in one and not the other)."""
    result = subprocess.run([sys.executable, "-m", "raya", "--help"], capture_output=True,
                            text=True, env={**os.environ, "TERMINAL_WIDTH": "", **env})
    assert result.returncode == 0, result.stderr
    assert result.stdout == typer_help(env)


def test_help_narrower_than_the_fast_layout_is_typers() -> None:
    """Below 45 columns Typer's table squeezes the names: the fast layout steps aside."""
    env = {"COLUMNS": "40"}
    result = subprocess.run([sys.executable, "-m", "raya", "--help"], capture_output=True,
                            text=True, env={**os.environ, "TERMINAL_WIDTH": "", **env})
    assert result.stdout == typer_help(env)
    assert "typer" in loaded_by("--help", env=env)


# Modules a command must not pull in unless it needs them: start-up time (raya butane
# starts in a blink) and the deploy extra being optional. pydantic comes with Typer 0.29's
# conversion of options (pyproject.toml keeps Typer below it).
HEAVY = ("hcloud", "requests", "pulumi", "jinja2", "cryptography", "pydantic")


def loaded_by(*args: str, env: dict[str, str] | None = None) -> set[str]:
    """Top-level modules and raya's own modules a `raya ARGS` process has loaded at its end."""
    probe = (
        "import sys; from raya.cli import main\n"
        "try:\n    main()\n"
        "finally:\n"
        "    sys.stderr.write('\\nLOADED ' + ' '.join(sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True,
        input="variant: fcos\nversion: 1.4.0\n", env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stderr
    return {m for m in result.stderr.rsplit("LOADED ", 1)[1].split()
            if "." not in m or m.startswith("raya.")}


@pytest.mark.parametrize(
    "args", [["--version"], ["--help"], ["butane", "-"], ["butane", "--help"]], ids=" ".join
)
def test_light_commands_import_only_what_they_run(args: list[str]) -> None:
    loaded = loaded_by(*args)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    commands = {m for m in loaded if m.startswith("raya.commands.")}
    # root: the Typer application; transpile: what `raya butane` runs, Typer-free.
    assert commands <= {"raya.commands.root", "raya.commands.registry",
                        "raya.commands.butane", "raya.commands.transpile"}, commands
    # The probe sees what a heavy command loads, so a pass above is not for lack of eyes.
    if args == ["--help"]:
        assert {"jinja2", "cryptography"} <= loaded_by("render", "--help")


# What no command needs before its own work (start-up time): the cloud SDKs, which the
# functions that call them import.
SDKS = {"hcloud", "requests", "pulumi", "boto3", "botocore", "kubernetes"}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_command_loads_a_cloud_sdk_before_its_work(name: str) -> None:
    loaded = loaded_by(name, "--help")
    assert not loaded & SDKS, sorted(loaded & SDKS)
    assert f"raya.commands.{COMMANDS[name][0]}" in loaded  # the command's module itself


# What `raya --version`, `raya --help` and a plain `raya butane` must start without: Typer
# (and the click it vendors), rich, the templates and Pulumi, and for --version and --help
# the transpiler and PyYAML.
FAST_PATH_FREE = {"typer", "click", "rich", "jinja2", "pulumi", *HEAVY}


@pytest.mark.parametrize(
    "args", [["--version"], ["--help"], ["butane"], ["butane", "--strict", "--pretty", "-"],
             ["butane", "--files-dir", ".", "-"]], ids=" ".join,
)
def test_version_help_and_plain_butane_start_without_typer(args: list[str]) -> None:
    loaded = loaded_by(*args)
    assert not loaded & FAST_PATH_FREE, sorted(loaded & FAST_PATH_FREE)
    if args[0] != "butane":
        assert not loaded & {"yaml", "raya.butane", "raya.commands.transpile"}
    else:  # (PyYAML only for YAML outside raya.butane.blockyaml's subset: not this one)
        assert {"raya.butane", "raya.commands.transpile"} <= loaded
    # and the probe sees Typer when it is loaded: a command's help goes through it.
    assert "typer" in loaded_by("butane" if args[0] == "butane" else "keys", "--help")


# Stdlib modules a plain `raya butane` starts without (start-up time; issue 26): dataclasses
# pulls in inspect, ast and dis; pathlib only for --files-dir; urllib.parse for rare URLs.
BUTANE_FREE = {"dataclasses", "inspect", "ast", "pathlib", "urllib"}


def test_plain_butane_starts_without_dataclasses_or_pathlib(tmp_path: Path) -> None:
    config = tmp_path / "node.bu"
    config.write_text("variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n"
                      "    - path: /etc/motd\n      contents:\n        inline: hello\n")
    loaded = loaded_by("butane", "--strict", str(config))
    assert not loaded & BUTANE_FREE, sorted(loaded & BUTANE_FREE)
    # and the probe sees them when they are loaded: local files need pathlib.
    assert "pathlib" in loaded_by("butane", "--files-dir", str(tmp_path), str(config))


def test_version() -> None:
    result = raya("--version")
    assert result.returncode == 0
    assert result.stdout == f"raya {__version__}\n"


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "raya"
    result = subprocess.run([script, "--version"], capture_output=True, text=True)
    assert result.stdout == f"raya {__version__}\n"


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["no-such-command"], "No such command 'no-such-command'"),
        (["--no-such-option"], "No such option: --no-such-option"),
        (["keys", "--no-such-option"], "No such option: --no-such-option"),
        (["keys", "--stack"], "Option '--stack' requires an argument"),
        ([], "Usage: raya"),
    ],
)
def test_usage_errors_exit_2(args: list[str], problem: str) -> None:
    result = raya(*args)
    assert result.returncode == 2
    assert problem in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def bad_project(tmp_path: Path) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: raya\n")
    (tmp_path / "Pulumi.prod.yaml").write_text(
        "config:\n  raya:authorizedUsers: [octo-alice]\n  raya:managedSubdomain: raya\n"
        "  raya:parentZone: example.com\n  raya:nodesSubnet: 10.9.1.0/24\n"
        "  raya:acmeEmail: ops@example.org\n"
    )
    return tmp_path


def test_bad_input_is_one_line_exit_1(tmp_path: Path) -> None:
    root = bad_project(tmp_path)
    result = raya("keys", "--root", str(root))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: {root / 'Pulumi.prod.yaml'}: raya:nodesSubnet is 10.9.1.0/24, outside "
        "networkRange 10.0.0.0/16"
    ]


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    root = bad_project(tmp_path)
    result = raya("--debug", "keys", "--root", str(root))
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: ")


def test_long_error_is_not_wrapped(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*(["a-rather-long-folder-name"] * 6))
    deep.mkdir(parents=True)
    result = raya("keys", cwd=deep)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: {deep}: not inside a raya project (no Pulumi.yaml here or above)"
    ]


def test_error_text_is_not_taken_as_markup(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: raya\n")
    (tmp_path / "Pulumi.prod.yaml").write_text(
        "config:\n  raya:authorizedUsers: ['[bold]x']\n  raya:managedSubdomain: raya\n"
        "  raya:parentZone: example.com\n  raya:acmeEmail: ops@example.org\n"
    )
    result = raya("keys", "--root", str(tmp_path))
    assert result.returncode == 1
    assert "has '[bold]x', not a GitHub login" in result.stderr
