"""Entries translated once and copied (raya.butane.translate.Walker.entry): every document
translates exactly as it does alone, with nothing shared, whatever came before it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from raya.butane import translate, transpile
from raya.butane.translate import _ENTRIES
from tests.butane.helpers import decoded

HEADER = "variant: fcos\nversion: 1.4.0\n"


def alone(text: str) -> Any:
    """What `text` translates to with nothing shared: the result and every finding."""
    _ENTRIES.clear()
    result = translate(text)
    _ENTRIES.clear()
    return result


@pytest.fixture(autouse=True)
def nothing_shared() -> None:
    _ENTRIES.clear()


def files(text: str) -> dict[str, bytes]:
    """Each file's contents, decoded, by path."""
    config = json.loads(transpile(text))
    return {
        entry["path"]: decoded(entry["contents"])["source"] for entry in config["storage"]["files"]
    }


def test_documents_sharing_entries_translate_as_each_alone() -> None:
    shared = "    - path: /etc/shared\n      contents:\n        inline: |\n          same\n"
    texts = [
        f"{HEADER}storage:\n  files:\n{shared}    - path: /etc/own\n      contents:\n"
        f"        inline: node {i}\n"
        for i in range(3)
    ]
    expected = [alone(text) for text in texts]
    assert [translate(text) for text in texts] == expected
    assert len(_ENTRIES) == 4  # the shared entry once, each node's own


def test_an_alias_to_another_entry_is_not_taken_from_an_earlier_document() -> None:
    """The second entry reads the same in both documents; what its alias names does not."""
    first, second = (
        f"{HEADER}storage:\n  files:\n    - path: /a\n      contents: &c\n        inline: {word}\n"
        "    - path: /b\n      contents: *c\n"
        for word in ("one", "two")
    )
    assert files(first)["/b"] == b"one"
    assert files(second)["/b"] == b"two"


def test_a_tag_directive_changes_what_the_same_entry_means() -> None:
    """`!e!binary` is base64 under one %TAG prefix, an unknown tag (the text) under another."""
    entry = "storage:\n  files:\n    - path: /a\n      contents:\n        inline: !e!binary MTI=\n"
    first, second = (
        f"%TAG !e! {prefix}\n---\n{HEADER}{entry}"
        for prefix in ("tag:yaml.org,2002:", "tag:example.com,2000:")
    )
    assert files(first)["/a"] == b"12"
    assert files(second)["/a"] == b"MTI="


def test_findings_are_placed_as_in_a_walk_of_the_document_alone() -> None:
    """A duplicate path is found after the entries are walked, on the second one's node: a
    copied entry's nodes were never visited, so the document is walked again."""
    entry = "    - path: /a\n      contents:\n        inline: x\n"
    translate(f"{HEADER}storage:\n  files:\n{entry}")
    twice = f"{HEADER}storage:\n  files:\n{entry}{entry}"
    found = translate(twice)
    assert found.config is None
    assert found.diagnostics == alone(twice).diagnostics
    assert [(d.json_path, d.line) for d in found.errors] == [("$.storage.files.1", 8)]


def test_an_entry_with_a_finding_is_never_copied() -> None:
    """An unknown key is a warning, refused in strict mode: the second time too."""
    text = f"{HEADER}storage:\n  files:\n    - path: /a\n      colour: blue\n"
    for _ in range(2):
        assert [d.message for d in translate(text).diagnostics] == ["unused key colour"]
