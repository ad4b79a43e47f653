"""`raya butane`: stdout gets Ignition, stderr the diagnostics, exit 1 on failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.runner import invoke

GOOD = "variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n    - path: /a\n      mode: 0644\n"
WARNS = GOOD + "      bogus: 1\n"


def test_reads_stdin_and_prints_compact_json() -> None:
    result = invoke(["butane"], input=GOOD)
    assert result.exit_code == 0
    files = [{"path": "/a", "mode": 420}]
    expected = {"ignition": {"version": "3.3.0"}, "storage": {"files": files}}
    assert result.stdout == json.dumps(expected, separators=(",", ":")) + "\n"


def test_pretty_and_file_argument(tmp_path: Path) -> None:
    source = tmp_path / "node.bu"
    source.write_text(GOOD)
    result = invoke(["butane", "--pretty", str(source)])
    assert result.exit_code == 0 and result.stdout.startswith("{\n  ")
    assert json.loads(result.stdout)["storage"]["files"][0]["mode"] == 420


def test_warnings_are_shown_and_fatal_only_with_strict() -> None:
    lenient = invoke(["butane"], input=WARNS)
    assert lenient.exit_code == 0 and "unused key bogus" in lenient.stderr
    strict = invoke(["butane", "--strict"], input=WARNS)
    assert strict.exit_code == 1 and strict.stdout == ""
    assert "warning[$.storage.files.0.bogus]" in strict.stderr
    assert "--> <stdin>:7:7" in strict.stderr


def test_missing_input_file_is_a_clean_failure(tmp_path: Path) -> None:
    # Through the real entry point: one line on stderr, no traceback, exit 1.
    result = subprocess.run([sys.executable, "-m", "raya", "butane", str(tmp_path / "nope.bu")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "nope.bu" in result.stderr and "Traceback" not in result.stderr


def test_files_dir_must_exist(tmp_path: Path) -> None:
    result = invoke(["butane", "--files-dir", str(tmp_path / "no")], input=GOOD)
    assert result.exit_code == 2
