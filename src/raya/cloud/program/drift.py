"""Drift: what a server runs against what the current inputs render, part by part.

Servers ignore changes to their `user_data` and `image` (a change would re-create the VM),
so what each runs is read back from the state: its `image`, and labels holding digests of
the parts of the config it was created with (the labels' keys are ignored too, so they keep
the creation's values). Pure: no Pulumi here, so `raya.cloud.deploy` reads the reports as well.
"""

from __future__ import annotations

from collections.abc import Mapping

# Server labels recording the digests (`raya.nodes.render.part_digests`) of what it was
# created with.
DIGEST_LABELS = {"users": "raya-users", "config": "raya-config"}
# The order parts are reported in.
PARTS = ("users", "image", "config")
# What the program logs per drifting node, and `raya.cloud.deploy` picks out of the engine's events.
PREFIX = "raya drift: "


def drift_parts(
    running_labels: Mapping[str, str],
    running_image: str,
    digests: Mapping[str, str],
    image: str,
) -> tuple[str, ...]:
    """The parts (users, image, config) in which a server differs from the current inputs;
    a part `digests` leaves out is not compared (a preview without secrets cannot render the
    config's: `raya.cloud.deploy.preview_without_secrets`)."""
    differ = {
        part
        for part, label in DIGEST_LABELS.items()
        if part in digests and running_labels.get(label) != digests[part]
    }
    if running_image != image:
        differ.add("image")
    return tuple(part for part in PARTS if part in differ)


def message(node: str, parts: tuple[str, ...]) -> str:
    return (
        f"{PREFIX}{node}: {', '.join(parts)} differ from what it runs; nothing replaced "
        "(a replacement of this node applies them)"
    )


def parse(text: str) -> tuple[str, tuple[str, ...]] | None:
    """The node and parts of a `message`, or None for any other text."""
    text = text.strip()
    if not text.startswith(PREFIX) or ": " not in text[len(PREFIX) :]:
        return None
    node, rest = text[len(PREFIX) :].split(": ", 1)
    parts = tuple(rest.split(" differ", 1)[0].split(", "))
    return (node, parts) if all(part in PARTS for part in parts) else None
