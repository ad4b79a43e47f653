"""Unit contents as Ignition parses them: go-systemd's unit/deserialize.go, step by step.

Ignition's validateUnitContent (config/v3_x/types/unit.go) runs `unit.Deserialize` and
reports "invalid unit content: <error>"; the vectors cls-unit-lexer and cls-unit-line-break
hold the real Butane's answers. These tests pin each rule of that lexer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raya.butane import translate, unitfile
from raya.butane.unitfile import UnitSyntaxError, deserialize


def options(text: str) -> list[tuple[str, str]]:
    return list(deserialize(text))


def test_options_are_read_per_section_and_comments_and_preamble_skipped() -> None:
    assert options("junk before\n[Unit]\n# c \\\n still comment\nA = 1\n\n[Install]\n"
                       "WantedBy=x\n") == [("Unit", "A"), ("Install", "WantedBy")]


# toEOL splits at "\n" only: a form feed, NEL, U+2028 or a vertical tab is text on the line.
@pytest.mark.parametrize("odd", ["\f", "\x85", "\u2028", "\u2029", "\v", "\x1c"])
def test_only_newline_ends_a_line(odd: str) -> None:
    assert options(f"[Unit]\nDescription=a{odd}b\n[Service]\nExecStart=/x\n") == [
        ("Unit", "Description"), ("Service", "ExecStart")]


# lexOptionNameFunc: a "\r" or "\n" before "=" is an error, which a backslash-space (no
# continuation) or a CRLF continuation (toEOL trims "\r" before "\n", so the "\\" is not
# last) both lead to.
@pytest.mark.parametrize("text", ["[Service]\nExecStart=/a \\ \n  /b\n",
                                  "[Service]\r\nExecStart=/a \\\r\n  b\r\n", "[S]\nNoEquals\n"])
def test_a_line_break_inside_an_option_name_is_an_error(text: str) -> None:
    with pytest.raises(UnitSyntaxError, match="unexpected newline"):
        deserialize(text)


def test_backslash_newline_continues_a_value() -> None:
    assert options("[Service]\nExecStart=/a \\\n  /b\nUser=x\n") == [
        ("Service", "ExecStart"), ("Service", "User")]


def test_unterminated_section_and_garbage_after_it() -> None:
    with pytest.raises(UnitSyntaxError, match="end of section"):
        deserialize("[Unit\nA=1\n")
    with pytest.raises(UnitSyntaxError, match="garbage"):
        deserialize("[Unit] x\nA=1\n")


# lex(): before each step, with 2048+ bytes buffered, the next 2048 must hold a line break.
# bufio's 4096-byte buffer decides what is buffered, so a long line after a long prefix can
# pass unseen while the same line at the start fails: the rule is the buffer's, not the line's.
def test_long_lines_are_judged_on_the_buffer() -> None:
    long = "X=" + "a" * 2100 + "\n"
    with pytest.raises(UnitSyntaxError, match="line too long"):
        deserialize("[Unit]\n" + long)
    assert options("[Unit]\n" + "Y=" + "b" * 2040 + "\n" + "Z=1\n") == [
        ("Unit", "Y"), ("Unit", "Z")]
    with pytest.raises(UnitSyntaxError, match="line too long"):
        deserialize("[Unit]\n# " + "c" * 3000 + "\nA=1\n")
    # After three 1000-byte lines only 1089 bytes are buffered: the long line is not seen.
    short = "A=" + "a" * 997 + "\n"
    assert options("[Unit]\n" + short * 3 + long) == [("Unit", "A")] * 3 + [("Unit", "X")]


def _warnings(body: str, version: str = "1.4.0", files_dir: Path | None = None) -> list[str]:
    result = translate(f"variant: fcos\nversion: {version}\n{body}", files_dir)
    return [d.json_path for d in result.diagnostics if d.severity == "warning"]


# Ignition's Systemd.Validate (NewNoInstallSectionForInstantiableUnitError) is in the v3_3
# types too, so fcos 1.4 warns like 1.5 and 1.6; the warning names where the instance's
# contents came from (contents_local when it was a local file).
@pytest.mark.parametrize("version", ["1.4.0", "1.5.0", "1.6.0"])
def test_instances_of_templates_without_install_warn_in_every_version(version: str) -> None:
    body = ("systemd:\n  units:\n    - name: w@.service\n      contents: \"[Service]\\nX=1\\n\"\n"
            "    - name: w@a.service\n      enabled: true\n")
    assert _warnings(body, version) == ["$.systemd.units.1.contents"]


def test_the_template_warning_names_contents_local(tmp_path: Path) -> None:
    (tmp_path / "i.service").write_text("[Service]\nX=1\n[Install]\nWantedBy=a.target\n")
    body = ("systemd:\n  units:\n    - name: w@.service\n      contents: \"[Service]\\nX=1\\n\"\n"
            "    - name: w@a.service\n      enabled: true\n      contents_local: i.service\n")
    assert _warnings(body, "1.5.0", tmp_path) == ["$.systemd.units.1.contents_local"]


# Ignition's validateModeSpecialBits: setuid, setgid and sticky bits warn before spec 3.6.0.
@pytest.mark.parametrize("mode", ["01777", "0o4750", "02775"])
def test_special_mode_bits_warn(mode: str) -> None:
    assert _warnings(f"storage:\n  directories:\n    - path: /d\n      mode: {mode}\n") == [
        "$.storage.directories.0.mode"]


def test_an_illegal_negative_mode_also_has_special_bits() -> None:
    # validateModeSpecialBits looks at uint32(mode): -1 has every bit.
    result = translate("variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n    - path: /f\n"
                       "      mode: -1\n")
    assert [d.severity for d in result.diagnostics] == ["error", "warning"]


def test_the_spaces_trimmed_are_exactly_go_is_space_over_all_of_unicode() -> None:
    # Written out in unitfile.py (start-up time); Go's unicode.IsSpace: Latin-1's six
    # spaces plus NEL and NBSP, and Unicode's White_Space (U+1680, U+2000-U+200A, ...).
    derived = "".join(chr(c) for c in range(0x110000) if unitfile.go_is_space(chr(c)))
    assert derived == unitfile._GO_SPACES
    assert len(derived) == 25
