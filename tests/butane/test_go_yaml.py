"""How Butane's YAML decoder (go-yaml v3) reads a config, rule by rule.

Each rule cites its source: go-yaml v3's decode.go (`scalar`, `sequence`, `mapping`) and
resolve.go, and Butane's config/common and translate code that calls it. The vectors
(cls-yaml-explicit-tag, cls-quoted-bool, cls-binary-tag, cls-null-list-item,
cls-multi-document) hold the real Butane's answers; these tests pin the rules themselves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raya.butane import ButaneDiagnostics, transpile
from tests.butane.helpers import decoded

HEAD = "variant: fcos\nversion: 1.5.0\n"


def config(body: str) -> Any:
    return json.loads(transpile(HEAD + body))


def refusal(body: str) -> list[tuple[str, int, str]]:
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile(HEAD + body)
    return [(path, line, text) for path, line, _, text in caught.value.diagnostics]


# decode.go `scalar`: a quoted or `!!str` scalar is a string whatever it looks like; a
# string lands in a Go bool only if it is one of the YAML 1.1 words (y, yes, on, off...).
@pytest.mark.parametrize(("written", "value"), [
    ('"yes"', True), ("'off'", False), ("!!str on", True), ("Y", True), ("NO", False),
    ("!!bool 'true'", True), ("!!bool false", False), ("True", True)])
def test_yaml_1_1_words_in_any_style_are_booleans(written: str, value: bool) -> None:
    out = config(f"systemd:\n  units:\n    - name: a.service\n      mask: {written}\n")
    assert out["systemd"]["units"][0]["mask"] is value


@pytest.mark.parametrize("written", ['"true"', "'false'", "!!str true", "1", "!!int 1"])
def test_other_strings_and_numbers_are_not_booleans(written: str) -> None:
    [(path, line, text)] = refusal(f"systemd:\n  units:\n    - name: a.service\n"
                                   f"      mask: {written}\n")
    assert (path, line) == ("$", 6) and text.startswith("$.systemd.units.0.mask: expected")


# resolve.go: an explicit tag decides the type: `!!int "493"` is 493, `!!str 2000` a string
# that no Go int accepts ("cannot unmarshal !!str `2000` into int").
def test_explicit_tags_decide_the_type_of_a_scalar() -> None:
    out = config('storage:\n  directories:\n    - path: /d\n      mode: !!int "493"\n')
    assert out["storage"]["directories"][0]["mode"] == 493
    assert [(p, n) for p, n, _ in refusal(
        "passwd:\n  groups:\n    - name: g\n      gid: !!str 2000\n")] == [("$", 6)]
    assert "cannot decode !!str `abc` as a !!int" in refusal(
        "passwd:\n  users:\n    - name: !!int abc\n")[0][2]


# decode.go `scalar`: `!!binary` is base64, decoded to the bytes the field then holds.
def test_binary_scalars_are_decoded_bytes() -> None:
    out = config("storage:\n  files:\n    - path: /f\n      contents:\n"
                 "        inline: !!binary AP8K\npasswd:\n  users:\n"
                 "    - name: !!binary Y29yZQ==\n")
    assert decoded(out)["storage"]["files"][0]["contents"]["source"] == b"\x00\xff\n"
    assert out["passwd"]["users"][0]["name"] == "core"
    assert "invalid base64" in refusal("passwd:\n  users:\n    - name: !!binary Y29yZQ\n")[0][2]


# decode.go `sequence` keeps only the items that decode, and `null` cannot be set on a Go
# string or struct: a null item is dropped, not kept as "" or {}. (A null struct item with
# another after it is also a warning: test_transpile's null-object test.)
def test_null_list_items_are_dropped() -> None:
    out = config("kernel_arguments:\n  should_exist: [a, ~, null, b]\npasswd:\n  users:\n"
                 "    - name: core\n      groups: [wheel, NULL, '']\n    - ~\n")
    assert out["kernelArguments"] == {"shouldExist": ["a", "b"]}
    assert out["passwd"]["users"] == [{"groups": ["wheel", ""], "name": "core"}]


# yaml.go `Unmarshal` parses one document: whatever follows the first `---` document,
# even a syntax error, is never read.
def test_only_the_first_document_counts() -> None:
    assert transpile(HEAD + "---\nvariant: nope\n---\n[unclosed\n") == (
        '{"ignition":{"version":"3.4.0"}}')


# Butane's config/common: when go-yaml refuses to decode (or the variant or version is
# unknown), Butane reports that alone, with a line and no JSON path, and validates nothing.
def test_decoding_errors_are_reported_alone_at_the_root() -> None:
    found = refusal("passwd:\n  users:\n    - name: core\n      system: 1\n      typo: x\n"
                    "storage:\n  files:\n    - path: relative\n")
    assert [(p, n) for p, n, _ in found] == [("$", 6)]
    with pytest.raises(ButaneDiagnostics) as caught:
        transpile("variant: fcos\nversion: 9.9.9\n")
    assert [d[0] for d in caught.value.diagnostics] == ["$"]


# go-yaml applies `<<` (decode.go `merge`), but Butane's unused-key pass walks the YAML
# tree, where `<<` matches no field: "unused key <<", a warning that --strict refuses.
def test_merge_keys_apply_but_are_unused_keys() -> None:
    body = ("storage:\n  directories:\n    - &d\n      path: /one\n      mode: 0750\n"
            "    - <<: *d\n      path: /two\n")
    assert refusal(body) == [("$.storage.directories.1.<<", 8, "unused key <<")]
    out = json.loads(transpile(HEAD + body, strict=False))
    assert out["storage"]["directories"][1] == {"path": "/two", "mode": 0o750}


# Go's encoding/json writes each byte that is not UTF-8 as \ufffd (a real U+FFFD stays as
# it is): a local unit file in Latin-1 comes out as Butane writes it.
def test_invalid_utf8_from_local_files_is_written_as_go_does(tmp_path: Path) -> None:
    (tmp_path / "a.service").write_bytes(b"[Unit]\nDescription=Caf\xe9 \xef\xbf\xbd\n")
    out = transpile(HEAD + "systemd:\n  units:\n    - name: a.service\n"
                    "      contents_local: a.service\n", tmp_path)
    assert '"contents":"[Unit]\\nDescription=Caf\\ufffd \ufffd\\n"' in out


# go-yaml's parser.fail names the context mark's 0-based line (plus one for scanner
# errors only), so a parser error names the line before the one PyYAML points at.
def test_syntax_errors_name_the_line_go_yaml_names() -> None:
    with pytest.raises(ButaneDiagnostics) as caught:  # parser error: "did not find key"
        transpile(HEAD + "storage:\n  files:\n    - path: /a\n   bad: 1\n")
    # The context is the mapping under "files:" (0-based line 3); the bad key is on line 6.
    assert caught.value.diagnostics[0][:2] == ("$", 3)
    with pytest.raises(ButaneDiagnostics) as caught:  # scanner error: unclosed quote
        transpile(HEAD + "passwd:\n  users:\n    - name: 'core\n")
    assert caught.value.diagnostics[0][:2] == ("$", 5)
