"""The real Butane's outputs and errors (vendored in vectors/) are ours too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.butane.divergent import DIVERGENT
from tests.butane.helpers import decoded, vectors
from tests.runner import invoke

CASES = sorted(p.stem for p in (vectors() / "cases").glob("*.bu"))
OK = [c for c in CASES if (vectors() / "expected" / f"{c}.ign").exists()]
FAILING = [c for c in CASES if (vectors() / "expected" / f"{c}.err").exists()]


def _cases(names: list[str], check: str) -> list[object]:
    """The cases, with those listed in DIVERGENT for this check marked strict xfail."""
    def param(case: str) -> object:
        checks, why = DIVERGENT.get(case, ((), ""))
        marks = [pytest.mark.xfail(strict=True, reason=why)] if check in checks else []
        return pytest.param(case, marks=marks, id=case)
    return [param(case) for case in names]


_HEAD = re.compile(r"^(error|warning)\[(\$[^\]]*)\]:\n\s+--> [^:]+:(\d+):(\d+)", re.M)
_PATH = re.compile(r"^(?:error|warning)\[(\$[^\]]*)\]", re.M)
# go-yaml's own messages: "yaml: line 39: found ...", "line 6: cannot unmarshal ...".
_YAML_LINE = re.compile(r"\bline (\d+):")


def _run(case: str, *extra: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    # Butane ran in the vectors directory with `--files-dir files`; so do we, so that
    # file names in messages come out the same.
    monkeypatch.chdir(vectors())
    result = invoke(["butane", "--strict", *extra, "--files-dir", "files", f"cases/{case}.bu"])
    return result.exit_code, result.stdout, result.stderr


def test_every_case_has_an_expectation() -> None:
    assert sorted(OK + FAILING) == CASES and OK and FAILING


def test_divergent_list_names_only_existing_cases_and_checks() -> None:
    for case, (checks, why) in DIVERGENT.items():
        expected = {"errors"} if case in FAILING else {"decoded", "pretty"}
        assert case in CASES and checks and set(checks) <= expected and why, case


@pytest.mark.parametrize("case", _cases(OK, "decoded"))
def test_output_equals_butane_once_data_urls_are_decoded(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stdout, stderr = _run(case, monkeypatch=monkeypatch)
    assert code == 0, stderr
    expected = json.loads((vectors() / "expected" / f"{case}.ign").read_text())
    assert decoded(json.loads(stdout)) == decoded(expected)


@pytest.mark.parametrize("case", _cases(OK, "pretty"))
def test_pretty_output_is_byte_identical_to_butane(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stronger than required: same key order, same escaping, same gzip bytes.
    code, stdout, _ = _run(case, "--pretty", monkeypatch=monkeypatch)
    assert code == 0
    assert stdout == (vectors() / "expected" / f"{case}.ign").read_text()


@pytest.mark.parametrize("case", _cases(FAILING, "errors"))
def test_errors_name_the_same_paths_and_positions_as_butane(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stdout, stderr = _run(case, monkeypatch=monkeypatch)
    assert code == 1 and stdout == ""
    report = (vectors() / "expected" / f"{case}.err").read_text()
    expected = set(_HEAD.findall(report))
    if expected:
        assert set(_HEAD.findall(stderr)) == expected
        return
    # Butane stopped before translating (go-yaml decoding, variant or version): it names
    # no JSON path, only the YAML lines at fault; raya then reports at `$` on those lines.
    assert set(_PATH.findall(stderr)) == {"$"}
    lines = {int(line) for line in _YAML_LINE.findall(report)}
    if lines:
        assert {int(line) for _, _, line, _ in _HEAD.findall(stderr)} == lines


def test_missing_local_message_matches_butane(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, stderr = _run("e10-missing-local", monkeypatch=monkeypatch)
    assert "open files/does-not-exist.txt: no such file or directory" in stderr


def test_report_quotes_the_yaml_like_butane(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, stderr = _run("e02-relative-path", monkeypatch=monkeypatch)
    expected = (vectors() / "expected" / "e02-relative-path.err").read_text()
    block = expected.split("Error translating")[0].rstrip()
    assert stderr.startswith(block)


def test_library_reports_all_findings_at_once() -> None:
    from raya.butane import ButaneDiagnostics, transpile

    text = (vectors() / "cases" / "e07-unit-no-suffix.bu").read_text()
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile(text, Path("files"), source="e07.bu")
    assert caught.value.diagnostics == [
        ("$.systemd.units.0.name", 5, 13,
         caught.value.diagnostics[0][3]),
        ("$.systemd.units.0.contents", 7, 17,
         'unit "k3s" is enabled, but has no install section so enable does nothing'),
    ]
    assert caught.value.diagnostics[0][3].startswith("invalid systemd unit extension")
    assert "e07.bu:5:13: error[$.systemd.units.0.name]" in str(caught.value)


def test_same_bytes_from_fresh_interpreters_with_different_hash_seeds() -> None:
    import os
    import subprocess
    import sys

    script = (
        "import pathlib, sys\n"
        "from raya.butane import transpile\n"
        "root = pathlib.Path(sys.argv[1])\n"
        "for case in sorted((root / 'cases').glob('*.bu')):\n"
        "    try:\n"
        "        print(transpile(case.read_text(), root / 'files'))\n"
        "    except Exception as error:\n"
        "        print(type(error).__name__, error)\n"
    )
    outputs = {
        subprocess.run([sys.executable, "-c", script, str(vectors())], capture_output=True,
                       text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("0", "1", "12345")
    }
    assert len(outputs) == 1 and next(iter(outputs))
