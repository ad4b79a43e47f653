"""docs/testing.md against the code: every user setting has a row, every row a test that
pytest collects, every quoted promise is on its page."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from raya.commands.registry import every_command
from raya.errors import ConfigError
from raya.model.config import KEYS, NAMESPACE, SECRET_KEYS
from raya.model.fleet import POOL_KEYS, load_fleet
from tests.support import REPO

DOC = REPO / "docs" / "testing.md"
# Commands that build or inspect rather than run the cluster, and the options that choose
# which project, stack or endpoint a command works on (docs/testing.md says so).
NOT_DAY_TWO = {("butane",), ("keys",), ("render",), ("image", "build"), ("image", "pins")}
SELECTORS = {"--root", "--stack", "--hcloud-endpoint"}
_CODE = re.compile(r"`([^`]+)`")


def section(title: str) -> list[list[str]]:
    """The rows of the table under `## title`, each a list of its cells."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    rows = []
    for line in text[start : end if end >= 0 else None].splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows[1:]  # the header row left out


def fleet_top_level_keys(tmp_path: Path) -> set[str]:
    """The top-level keys `load_fleet` accepts, as it names them when it refuses another."""
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": [], "not-a-key": 1}))
    with pytest.raises(ConfigError) as refused:
        load_fleet(path)
    accepted = str(refused.value).rsplit("accepted: ", 1)[1]
    return set(accepted.split(", "))


def user_settings(tmp_path: Path) -> set[str]:
    """Every setting the parsers read and every day-two command's options and arguments."""
    settings = {f"{NAMESPACE}:{key}" for key in (*KEYS, *SECRET_KEYS)}
    settings |= fleet_top_level_keys(tmp_path)
    settings |= {f"pools.{field}" for field in POOL_KEYS}
    for path, command in every_command():
        if path in NOT_DAY_TWO:
            continue
        name = " ".join(path)
        settings |= {
            f"{name} {option.names[0]}"
            for option in command.options
            if option.names[0] not in SELECTORS
        }
        settings |= {f"{name} <{argument.dest}>" for argument in command.arguments}
    return settings


@cache
def collected(files: frozenset[str]) -> frozenset[str]:
    """The node ids pytest collects from `files`."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *sorted(files)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return frozenset(line for line in run.stdout.splitlines() if "::" in line)


def named_tests(rows: list[list[str]]) -> list[str]:
    return [test for row in rows for test in _CODE.findall(row[-1])]


def check_tests_exist(rows: list[list[str]]) -> None:
    tests = named_tests(rows)
    assert tests
    found = collected(frozenset(test.split("::")[0] for test in tests))
    missing = [
        test for test in tests
        if test not in found and not any(f.startswith(f"{test}[") for f in found)
    ]  # fmt: skip
    assert missing == []


def test_every_setting_has_a_row_and_every_row_a_setting(tmp_path: Path) -> None:
    rows = section("Settings")
    named = [_CODE.findall(row[0])[0] for row in rows]
    assert len(named) == len(set(named))  # one row each
    expected = user_settings(tmp_path)
    # Figures that would move only with a new setting: 28 raya: keys, 2 fleet keys, 10 pool
    # fields; a new one needs its row (and this count) updated.
    assert len([s for s in expected if s.startswith("raya:")]) == 28
    assert len([s for s in expected if s.startswith("pools.")]) == 10
    assert set(named) - expected == set()  # no row for a setting that is gone
    assert expected - set(named) == set()  # no setting without a row


def test_every_settings_test_is_collected() -> None:
    check_tests_exist(section("Settings"))


def test_every_promise_is_on_its_page() -> None:
    rows = section("Promises")
    assert rows
    for page, words, _ in rows:
        (target,) = re.findall(r"\]\(([^)]+)\)", page)  # the link, from docs/
        text = " ".join((DOC.parent / target).read_text(encoding="utf-8").split())
        quoted = words.removeprefix('"').removesuffix('"')
        assert quoted in text, (target, quoted)


def test_every_promise_test_is_collected() -> None:
    check_tests_exist(section("Promises"))
