"""What the program declares, whole, against what it declared before its outputs were combined
more cheaply (issue 26): every resource's type, name, inputs, secrecy, dependencies and
options, every node's render arguments, and the stack outputs, for the example fleet and for
three control planes with twelve agents (placement groups past Hetzner's limit of 10, the
registration balancer).

Generated values (keys, certificates, passwords, ids, addresses) differ from run to run, so
each is written as the output it came from: `<agent-0-host-key.privateKeyOpenssh>`. A node's
`userData` is checked to be exactly the render of the arguments its render was called with,
and written as `<ignition of NODE>`; those arguments are in the record, as references too.
The JSON files under `declared/` were written by the program of main at 13cc718, and
rewritten for issue 34 (the DNS accounts' custom roles, the balancers' subnet);
`RAYA_WRITE_DECLARED=1` rewrites them after a deliberate change of what the program declares.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from raya.cloud.program import define
from raya.model.fleet import Cluster, build_cluster
from raya.model.pins import load_chart_pins, load_pins
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK, load_cluster
from raya.nodes.identity import token_hash
from raya.nodes.render import part_digests, render_node
from tests.cloud.program.mocks import SECRET_SIG, Run, is_secret, run_program
from tests.cloud.program.test_program import CLUSTER_TOKEN, provider_mocks
from tests.support import REPO

PINS = load_pins(REPO)
RENDER = functools.partial(render_node, charts=load_chart_pins(REPO))
EXAMPLE = load_cluster(EXAMPLE_ROOT, EXAMPLE_STACK)
DECLARED = Path(__file__).parent / "declared"
SERVER = "hcloud:index/server:Server"


def fleet(control_planes: int, agents: int) -> Cluster:
    config = dataclasses.replace(EXAMPLE.config, control_planes=control_planes)
    return build_cluster(config, ("cx23",) * agents, "test fleet")


def references(result: Run) -> dict[str, str]:
    """Each generated value -> the output it is: every resource's id and the outputs the
    provider computed (not its inputs echoed back), and the join secret's hash k3s records."""
    found: dict[str, str] = {}
    for name in sorted(result.resources):
        registered = result.resources[name]
        found.setdefault(str(registered.id), f"<{name}.id>")
        for key in sorted(set(registered.outputs) - set(registered.inputs)):
            value = registered.outputs[key]
            if isinstance(value, str):
                found.setdefault(value, f"<{name}.{key}>")
    join_secret = result.resources["join-secret"].outputs["result"]
    found[token_hash(join_secret)] = "<token hash of join-secret.result>"
    return found


def suffixes(result: Run) -> dict[str, str]:
    """Each random suffix (a `RandomId`'s hex) -> its reference: it is part of a text (a
    custom role's id), not all of it."""
    return {
        r.outputs["hex"]: f"<{name}.hex>"
        for name, r in result.resources.items()
        if r.typ == "random:index/randomId:RandomId"
    }


def normalized(
    value: Any, refs: dict[str, str], parts: Mapping[str, str] = MappingProxyType({})
) -> Any:
    """`value` with each generated value replaced by its reference, and each of `parts` where
    a text holds it; a secret input stays marked as one; a text that is an output decoded
    from base64 says so."""
    if is_secret(value):
        return {"secret": normalized(value["value"], refs, parts)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): normalized(item, refs, parts) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [normalized(item, refs, parts) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool) and value == int(value):
        return refs.get(str(int(value)), value)
    if not isinstance(value, str):
        return value
    encoded = base64.b64encode(value.encode()).decode()
    if value in refs or encoded in refs:
        return refs.get(value) or f"<decoded {refs[encoded]}>"
    try:
        decoded = base64.b64decode(value, validate=True).decode()
    except ValueError:  # not base64, or not text
        decoded = ""
    if decoded in refs:
        return f"<base64 of {refs[decoded]}>"
    if "\n" in value:  # a document (the kubeconfig): its values, normalized
        return {"yaml": normalized(yaml.safe_load(value), refs, parts)}
    for part, reference in parts.items():
        value = value.replace(part, reference)
    return value


def declared(cluster: Cluster) -> dict[str, Any]:
    """One run of the program for `cluster` on a new state, as references (see above)."""
    renders: dict[str, tuple[Any, str | None, str]] = {}

    def render(cluster: Cluster, node: Any, secrets: Any, *, volume_id: str | None = None) -> Any:
        rendered = RENDER(cluster, node, secrets, volume_id=volume_id)
        renders[node.name] = (secrets, volume_id, rendered.ignition.decode())
        return rendered

    mocks = provider_mocks()
    result = run_program(
        mocks, lambda: define(cluster, PINS, render, hcloud_token=CLUSTER_TOKEN)
    )
    refs = references(result)
    for name, (_, _, text) in sorted(renders.items()):
        user_data = result.resources[name].inputs["userData"]
        # The server's config is exactly what its render returned, and a secret.
        assert user_data == {SECRET_SIG[0]: SECRET_SIG[1], "value": text}, name
        refs[text] = f"<ignition of {name}>"
        for part, digest in part_digests(text.encode()).items():
            refs.setdefault(digest, f"<{part} digest of {name}>")
    return {
        "resources": {
            name: {
                "type": r.typ,
                "inputs": normalized(r.inputs, refs, suffixes(result)),
                "dependencies": sorted(
                    urn.rsplit("::", 1)[-1] for urn in mocks.dependencies[name]
                ),
                "secret_outputs": sorted(r.secret_outputs),
                "options": dataclasses.asdict(r.options),
            }
            for name, r in sorted(result.resources.items())
        },
        "renders": {
            name: {"secrets": normalized(secrets, refs), "volume_id": normalized(volume, refs)}
            for name, (secrets, volume, _) in sorted(renders.items())
        },
        "outputs": normalized(result.outputs, refs),
    }


@pytest.mark.parametrize(("control_planes", "agents"), [(1, 3), (3, 12)])
def test_the_program_declares_what_it_declared(control_planes: int, agents: int) -> None:
    path = DECLARED / f"{control_planes}-control-planes-{agents}-agents.json"
    found = declared(fleet(control_planes, agents))
    text = json.dumps(found, indent=1, sort_keys=True) + "\n"
    if os.environ.get("RAYA_WRITE_DECLARED") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert json.loads(text) == json.loads(path.read_text())
