"""The `raya` command line: help everywhere, version, exit statuses and one-line errors,
and the start-up guard: no command loads Typer, rich or a heavy library before its work."""

from __future__ import annotations

import io
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench.startup import at_work

from raya import __version__
from raya.commands.parser import Argument, Command, Option, confirm
from raya.commands.registry import COMMANDS, every_command
from tests.runner import invoke
from tests.support import REPO

ALL = list(every_command())
IDS = [" ".join(path) for path, _ in ALL]


def raya(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"}
    return subprocess.run(
        [sys.executable, "-m", "raya", *args], cwd=cwd, capture_output=True, text=True, env=env
    )


def test_the_commands_of_the_issues_are_present() -> None:
    assert {"keys", "render", "image pins", "image build", "ssh", "status"} <= set(IDS)


@pytest.mark.parametrize(("path", "command"), ALL, ids=IDS)
def test_help_on_every_command(path: tuple[str, ...], command: Command) -> None:
    result = invoke([*path, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert f" Usage: raya {' '.join(path)} [OPTIONS]" in result.output
    assert command.help.strip(), f"raya {' '.join(path)} has no help text"
    text = words(result.output)
    params: list[Option | Argument] = [*command.options, *command.arguments]
    for param in params:
        assert param.help, f"raya {' '.join(path)} {param.dest} has no help text"
        assert " ".join(param.help.split()) in text, param.dest
    for option in command.options:
        assert f"│ {option.names[0]} " in result.output


def words(page: str) -> str:
    """The words of a help page, its panels' borders and line breaks taken out."""
    return " ".join(page.translate(str.maketrans("│╭╮╰╯─", "      ")).split())


def test_the_help_lists_each_command_with_its_own_summary() -> None:
    listed = raya("--help").stdout
    paths = {path[0] for path, _ in ALL}
    assert paths == set(COMMANDS)
    for path, command in ALL:
        summary = " ".join(command.help.split("\n\n")[0].split())
        if len(path) == 1:
            assert summary == COMMANDS[path[0]][1], path
            assert f" {path[0]} " in listed
        else:  # a group's command: in the group's own listing
            assert summary in words(raya(path[0], "--help").stdout), path


WIDTHS = (45, 46, 53, 60, 71, 80, 97, 120, 200)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("args", [[], ["image"], *(path.split() for path in IDS)], ids=" ".join)
def test_help_fills_its_width_in_closed_panels(width: int, args: list[str]) -> None:
    """Every line of a help page as wide as the terminal (padded, as rich pads it), each
    panel closed on both sides, every word of the texts kept (wrapped, never cut)."""
    result = invoke([*args, "--help"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert lines[-2:] == ["", ""] and lines[0] == " " * width
    assert all(len(line) == width for line in lines[:-2]), [
        line for line in lines if len(line) not in (0, width)
    ]
    inside = False
    for line in lines[:-2]:
        if line.startswith("╭─ "):
            assert line.endswith("╮") and not inside
            inside = True
        elif line.startswith("╰"):
            assert line == "╰" + "─" * (width - 2) + "╯" and inside
            inside = False
        else:
            assert line.startswith("│ ") == line.endswith(" │") == inside, line
    assert not inside


def test_help_wraps_at_the_width() -> None:
    """The same page 200 and 45 wide: the same text (a URL longer than a line is folded
    over two, as rich folds it), in more lines when narrow."""
    wide = invoke(["image", "pins", "--help"], env={"COLUMNS": "200"}).stdout
    narrow = invoke(["image", "pins", "--help"], env={"COLUMNS": "45"}).stdout
    assert "".join(words(wide).split()) == "".join(words(narrow).split())
    assert len(narrow.splitlines()) > len(wide.splitlines()) + 20
    assert "[default: https://kubernetes-sigs.github.io/external-dns/]" in words(wide)
    assert "│     https://kubernetes-sigs.github.io/ext │\n│     ernal-dns/]" in narrow


def test_help_width_comes_from_terminal_width_then_columns() -> None:
    env = {"COLUMNS": "200", "TERMINAL_WIDTH": "77"}
    assert {len(line) for line in invoke(["--help"], env=env).stdout.splitlines()} == {0, 77}


def test_help_shows_defaults_env_vars_and_required_as_typer_did() -> None:
    status = words(invoke(["status", "--help"], env={"COLUMNS": "200"}).stdout)
    assert "--stack -s <str> The stack (Pulumi.<stack>.yaml). [default: prod]" in status
    assert ("--root <path> Project folder, holding Pulumi.yaml. [default: (the nearest one "
            "at or above the current folder)]") in status  # fmt: skip
    assert "--drift --no-drift Run a preview" in status and "[default: drift]" in status
    assert ("--hcloud-endpoint <str> Hetzner Cloud API endpoint. [env var: HCLOUD_ENDPOINT] "
            "[default: https://api.hetzner.cloud/v1]") in status  # fmt: skip
    ssh = invoke(["ssh", "--help"], env={"COLUMNS": "200"}).stdout
    assert " Usage: raya ssh [OPTIONS] {node} [command]..." in ssh
    assert "│ *   node         <str>  The node: its name (agent-1)" in ssh and "[required]" in ssh
    roll = words(invoke(["roll", "--help"], env={"COLUMNS": "200"}).stdout)
    assert "--drain-timeout <float>" in roll and "[default: 600.0]" in roll
    assert "\n The control plane is replaced alone" in invoke(["roll", "--help"]).stdout


@pytest.mark.parametrize("width", [60, 80, 100])
@pytest.mark.parametrize(("path", "command"), ALL, ids=IDS)
def test_help_text_is_filled_as_sentences(
    width: int, path: tuple[str, ...], command: Command
) -> None:
    """Each paragraph of the help text filled to the width: a line ends only where the next
    word would not fit, or where the paragraph does, never where the docstring's source
    line happened to end."""
    page = invoke([*path, "--help"], env={"COLUMNS": str(width)}).stdout
    text = page.split("\n╭")[0].splitlines()[3:]  # after the usage
    paragraphs = [p.splitlines() for p in "\n".join(text).split("\n" + " " * width + "\n")]
    assert len(paragraphs) == command.help.strip().count("\n\n") + 1
    for lines in paragraphs:
        lines = [line.strip() for line in lines if line.strip()]
        for line, after in itertools.pairwise(lines):
            assert len(line) + 1 + len(after.split()[0]) > width - 2, (line, after)


@pytest.mark.parametrize("args", [["up", "--help"], ["roll", "--help"]])
def test_node_names_in_help_cover_pools_and_control_planes(args: list[str]) -> None:
    """`up --replace` and `roll` take any node of the fleet: the three control plane
    names, the list's agents and pool nodes (docs/fleet.md)."""
    text = words(invoke(args, env={"COLUMNS": "200"}).stdout)
    assert "control-plane, control-plane-<k>, agent-<i> or <pool>-<i>" in text


@pytest.mark.parametrize(
    ("args", "key", "value"),
    [(["--hcloud-endpoint", "http://a"], "hcloud_endpoint", "http://a"),
     (["--hcloud-endpoint=http://b"], "hcloud_endpoint", "http://b"),
     ([], "hcloud_endpoint", "http://env"),  # from HCLOUD_ENDPOINT
     ([], "drift", True), (["--no-drift"], "drift", False), (["--drift"], "drift", True),
     ([], "as_json", False), (["--json"], "as_json", True)],
)  # fmt: skip
def test_options_are_parsed_as_click_parsed_them(
    args: list[str], key: str, value: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HCLOUD_ENDPOINT", "http://env")
    parsed = dict(ALL)[("status",)].parse([*args, "-sstaging", "--root", "/x"])
    assert parsed is not None and parsed["stack"] == "staging" and parsed["root"] == Path("/x")
    assert parsed[key] == value


def test_repeated_options_lists_and_pass_through() -> None:
    up = dict(ALL)[("up",)].parse(["--replace", "agent-0", "--replace=agent-1"])
    assert up is not None and up["replace"] == ["agent-0", "agent-1"]
    roll = dict(ALL)[("roll",)].parse(["agent-0", "agent-1", "--drain-timeout", "5"])
    assert roll is not None and roll["nodes"] == ["agent-0", "agent-1"]
    assert roll["drain_timeout"] == 5.0
    ssh = dict(ALL)[("ssh",)]
    # unknown options go to the node's command, as click's ignore_unknown_options did
    assert ssh.parse(["a1", "uname", "-a", "-s", "dev"]) == {
        "node": "a1", "command": ["uname", "-a"], "stack": "dev", "root": None}
    assert ssh.parse(["a1", "--", "ls", "--root", "/"]) == {
        "node": "a1", "command": ["ls", "--root", "/"], "stack": "prod", "root": None}


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
        (["no-such-command"], "Error: No such command 'no-such-command'.\n"),
        (["--no-such-option"], "No such option: --no-such-option"),
        (["keys", "--no-such-option"], "No such option: --no-such-option"),
        (["keys", "--stack"], "Option '--stack' requires an argument"),
        (["keys", "--example=yes"], "Option '--example' does not take a value"),
        (["roll", "--drain-timeout", "soon"],
         "Invalid value for '--drain-timeout': 'soon' is not a valid float."),
        (["butane", "-d", "/nonexistent"],
         "Invalid value for '--files-dir' / '-d': Directory '/nonexistent' does not exist."),
        (["ssh"], "Missing argument 'node'."),
        (["keys", "extra"], "Got unexpected extra argument (extra)"),
        (["image", "nope"], "No such command 'nope'"),
        (["image", "pins", "--stream", "beta"],
         "Invalid value for --stream: 'beta'; accepted: stable, testing, next"),
        (["render", "--example", "--stack", "x"],
         "Invalid value: --example is its own project; it takes no --root or --stack"),
        ([], "Usage: raya"),
        (["image"], "Usage: raya image"),
    ],
)
def test_usage_errors_exit_2(args: list[str], problem: str) -> None:
    result = raya(*args)
    assert result.returncode == 2
    assert problem in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_usage_error_reads_as_clicks() -> None:
    result = raya("status", "--jsn")
    assert result.stdout == ""
    assert result.stderr == (
        "Usage: raya status [OPTIONS]\nTry 'raya status --help' for help.\n\n"
        "Error: No such option: --jsn Did you mean '--json'?\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # click's NoSuchCommand/NoSuchOption: difflib's close matches, sorted.
        (["rendr"], "No such command 'rendr'. Did you mean 'render'?"),
        (["statsu", "--json"], "No such command 'statsu'. Did you mean 'status'?"),
        (["backu"], "No such command 'backu'. (Did you mean one of: 'backup', 'backups'?)"),
        (["image", "buld"], "No such command 'buld'. Did you mean 'build'?"),
        (["--debg", "render"], "No such option: --debg Did you mean '--debug'?"),
        (["render", "--exmple"], "No such option: --exmple Did you mean '--example'?"),
        (
            ["status", "--no-drfit"],
            "No such option: --no-drfit (Did you mean one of: '--drift', '--no-drift'?)",
        ),
        (["keys", "--hlep"], "No such option: --hlep Did you mean '--help'?"),
        # Nothing close, or a short option (click suggests none): the message alone.
        (["deploy-everything"], "No such command 'deploy-everything'."),
        (["keys", "-x"], "No such option: -x"),
    ],
)
def test_a_mistyped_name_gets_a_suggestion(args: list[str], message: str) -> None:
    result = raya(*args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == f"Error: {message}"


@pytest.mark.parametrize(("answer", "agreed"), [("y\n", True), ("YES\n", True), ("n\n", False),
                                                ("\n", False), ("maybe\ny\n", True)])
def test_confirm_reads_y_or_n_as_click_did(
    answer: str, agreed: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(answer))
    assert confirm("Go on?") is agreed
    asked = "Go on? [y/N]: "
    again = "Error: invalid input\n" + asked if answer.startswith("maybe") else ""
    assert capsys.readouterr().out == asked + again


def test_confirm_without_an_answer_aborts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(KeyboardInterrupt):  # which raya.cli answers "Aborted!", exit 1
        confirm("Go on?", to_stderr=True)


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


@pytest.mark.parametrize(
    "args",
    [
        ["--debug", "keys", "--root", "{root}"],
        ["keys", "--debug", "--root", "{root}"],
        ["keys", "--root", "{root}", "--debug"],
    ],
    ids=["before", "after the command", "last"],
)
def test_debug_shows_the_traceback(tmp_path: Path, args: list[str]) -> None:
    root = bad_project(tmp_path)
    result = raya(*(arg.format(root=root) for arg in args))
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error: ")


def test_debug_after_a_double_dash_is_an_argument(tmp_path: Path) -> None:
    result = raya("keys", "--root", str(bad_project(tmp_path)), "--", "--debug")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "Error: Got unexpected extra argument (--debug)"


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


# What no command may load before its own work begins (start-up time, issue 26): the
# command-line and terminal libraries raya no longer uses, and the heavy ones that only
# the work needs.
HEAVY = {"typer", "click", "rich", "cryptography", "jinja2", "yaml", "hcloud", "requests",
         "pulumi", "kubernetes", "boto3", "botocore", "pydantic"}  # fmt: skip

# A fresh interpreter runs `raya ARGS` (sys.argv[3:]) and notes the modules loaded when the
# command's function (file sys.argv[1], name sys.argv[2]) is called, then those at the end.
PROBE = """
import sys
target, args, seen = tuple(sys.argv[1:3]), sys.argv[3:], []

def spy(frame, event, arg):
    if event == "call" and (frame.f_code.co_filename, frame.f_code.co_name) == target:
        seen.append(sorted(sys.modules))
        sys.setprofile(None)

sys.setprofile(spy)
from raya.cli import main
try:
    main(args)
except SystemExit:
    pass
finally:
    sys.setprofile(None)
    sys.stderr.write("\\nAT WORK " + " ".join(seen[0] if seen else ["-"]))
    sys.stderr.write("\\nAT END " + " ".join(sorted(sys.modules)))
"""


def loaded(command: Command, args: list[str]) -> tuple[set[str], set[str]]:
    """The top-level modules (and raya's own) loaded when `raya ARGS` started `command`'s
    work, and when it ended."""
    code = command.function.__code__
    result = subprocess.run(
        [sys.executable, "-c", PROBE, code.co_filename, code.co_name, *args],
        capture_output=True, text=True, input="", cwd=REPO,
    )  # fmt: skip
    _, started, ended = result.stderr.rsplit("\nAT ", 2)

    def names(line: str) -> set[str]:
        return {m for m in line.split()[1:] if "." not in m or m.startswith("raya.")}

    return names(started), names(ended)


@pytest.mark.parametrize(("path", "command"), ALL, ids=IDS)
def test_no_command_loads_a_heavy_module_before_its_work(
    path: tuple[str, ...], command: Command
) -> None:
    """Each command, run so that its first own step fails (as bench/startup.py measures
    it), has loaded none of HEAVY when its function is called: only its own module and
    the command layer."""
    started, _ = loaded(command, at_work(path, command))
    assert not started & HEAVY, sorted(started & HEAVY)
    assert f"raya.commands.{COMMANDS[path[0]][0]}" in started  # the command's module itself


def test_the_probe_sees_what_the_work_loads(tmp_path: Path) -> None:
    """A pass above is not for lack of eyes: after the work of `raya render --example`,
    the probe sees the libraries it needed."""
    render = dict(ALL)[("render",)]
    started, at_end = loaded(render, ["render", "--example", "--out", str(tmp_path)])
    assert not started & HEAVY
    assert {"yaml", "jinja2", "cryptography"} <= at_end


@pytest.mark.parametrize(
    "args", [["--version"], ["--help"], ["status", "--help"], ["image", "--help"]], ids=" ".join
)
def test_version_and_help_load_no_command_and_nothing_heavy(args: list[str]) -> None:
    _, at_end = loaded(dict(ALL)[("butane",)], args)
    assert not at_end & (HEAVY | {"raya.butane", "raya.model", "raya.nodes"}), at_end
    commands = {m for m in at_end if m.startswith("raya.commands.")}
    layer = {"raya.commands.registry", "raya.commands.parser", "raya.commands.helptext"}
    if args == ["--version"]:
        assert commands == set()
    elif args == ["--help"]:
        assert commands <= layer
    else:  # the command's module, and the ones it takes shared options from
        assert f"raya.commands.{COMMANDS[args[0]][0]}" in commands


# Stdlib modules a plain `raya butane` starts without (start-up time; issue 26): dataclasses
# pulls in inspect, ast and dis; pathlib only for --files-dir; urllib.parse for rare URLs;
# PyYAML only for YAML outside raya.butane.blockyaml's subset (not this config).
BUTANE_FREE = {"dataclasses", "inspect", "ast", "pathlib", "urllib", *HEAVY}


def test_plain_butane_starts_without_dataclasses_or_pathlib(tmp_path: Path) -> None:
    config = tmp_path / "node.bu"
    config.write_text("variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n"
                      "    - path: /etc/motd\n      contents:\n        inline: hello\n")
    butane = dict(ALL)[("butane",)]
    _, at_end = loaded(butane, ["butane", "--strict", str(config)])
    assert not at_end & BUTANE_FREE, sorted(at_end & BUTANE_FREE)
    assert "raya.butane" in at_end
    # and the probe sees them when they are loaded: local files need pathlib.
    assert "pathlib" in loaded(butane, ["butane", "--files-dir", str(tmp_path), str(config)])[1]


# A command line in a doc's code block: `raya <command>` first on the line, or after `$ `.
# Benchmark tables (butane.md) name commands too, beside their figures in ms.
_TYPED = re.compile(r"^\s*(?:\$ )?(\./)?raya (?:[a-z]|--)")


def test_every_doc_runs_raya_one_way() -> None:
    """Each command to type is `./raya ...`, as the quick start runs it (issue 36)."""
    typed = 0
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        block = False
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                block = not block
            elif block and (match := _TYPED.match(line)) and " ms" not in line:
                assert match[1], f"{doc.name}:{number}: {line.strip()}"
                typed += 1
    assert typed >= 15  # the quick start, deploy.md, using.md, image.md, ...
