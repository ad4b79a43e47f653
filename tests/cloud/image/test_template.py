"""The Packer template reads both pins itself and stamps exactly the labels raya looks up."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raya.cloud.image import (
    FCOS_BUILDS_URL,
    K3S_RELEASES_URL,
    fcos_image_url,
    k3s_binary_url,
    packer_variables,
)
from raya.model.pins import FcosPin, K3sPin, Pins, dump_pin, load_pins, snapshot_labels
from tests.cloud.image import hcl
from tests.cloud.image.conftest import IMAGE_DIR, PINS
from tests.support import require_tool

TEMPLATE = IMAGE_DIR / "fcos.pkr.hcl"


def write_pins(folder: Path, pins: Pins) -> Path:
    (folder / "fcos.pin").write_text(dump_pin(pins.fcos))
    (folder / "k3s.pin").write_text(dump_pin(pins.k3s))
    return folder


def stamped(folder: Path, cluster: str) -> tuple[dict[str, str], hcl.Evaluator]:
    template = hcl.load(TEMPLATE)
    evaluator = hcl.Evaluator(template, folder, {"cluster_name": cluster})
    source = hcl.source_of(template, "hcloud", "fcos")
    return evaluator.value(source["snapshot_labels"]), evaluator


def test_the_template_stamps_the_labels_raya_selects(tmp_path: Path) -> None:
    labels, evaluator = stamped(write_pins(tmp_path, PINS), "raya-test")
    assert labels == snapshot_labels(PINS, "raya-test")
    assert labels["k3s_version"] == "v1.36.5-k3s1"
    assert sorted(set(evaluator.pins_read)) == ["fcos.pin", "k3s.pin"]


@settings(max_examples=40, deadline=None)
@given(
    stream=st.sampled_from(["stable", "testing", "next"]),
    fcos=st.tuples(
        st.integers(30, 99), st.integers(0, 99999999), st.integers(0, 9), st.integers(0, 9)
    ),
    k3s=st.tuples(*(st.integers(0, 99),) * 3, st.integers(1, 9)),
    cluster=st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True),
)
def test_labels_agree_for_any_pins(
    tmp_path_factory: pytest.TempPathFactory,
    stream: str,
    fcos: tuple[int, int, int, int],
    k3s: tuple[int, int, int, int],
    cluster: str,
) -> None:
    pins = Pins(
        fcos=FcosPin(stream, f"{fcos[0]}.{fcos[1]:08d}.{fcos[2]}.{fcos[3]}", "1" * 64),
        k3s=K3sPin(f"v{k3s[0]}.{k3s[1]}.{k3s[2]}+k3s{k3s[3]}", "2" * 64),
    )
    folder = write_pins(tmp_path_factory.mktemp("pins"), pins)
    assert load_pins_from(folder) == pins
    assert stamped(folder, cluster)[0] == snapshot_labels(pins, cluster)


def load_pins_from(folder: Path) -> Pins:
    """load_pins wants a project root with image/; the test keeps the pins in one folder."""
    root = folder.parent / f"{folder.name}-root"
    (root / "image").mkdir(parents=True, exist_ok=True)
    for name in ("fcos.pin", "k3s.pin"):
        (root / "image" / name).write_bytes((folder / name).read_bytes())
    return load_pins(root)


def test_the_template_reads_the_committed_pins() -> None:
    labels, _ = stamped(IMAGE_DIR, "raya")
    assert labels == snapshot_labels(load_pins(IMAGE_DIR.parent), "raya")


def test_the_artifact_urls_are_the_ones_raya_checks(tmp_path: Path) -> None:
    template = hcl.load(TEMPLATE)
    variables = hcl.variables_of(template)
    defaults = {
        name: hcl.Evaluator(template, tmp_path, {}).value(body["default"])
        for name, body in variables.items()
        if "default" in body
    }
    assert defaults["fcos_builds_url"] == FCOS_BUILDS_URL
    assert defaults["k3s_releases_url"] == K3S_RELEASES_URL
    assert "default" not in variables["cluster_name"]

    write_pins(tmp_path, PINS)
    given = {
        "cluster_name": "raya",
        "fcos_builds_url": "http://m/fcos",
        "k3s_releases_url": "http://m/k3s",
    }
    evaluator = hcl.Evaluator(template, tmp_path, given)
    locals_ = hcl.locals_of(template)
    assert evaluator.value(locals_["fcos_image_url"]) == fcos_image_url("http://m/fcos", PINS.fcos)
    assert evaluator.value(locals_["k3s_binary_url"]) == k3s_binary_url(
        "http://m/k3s", PINS.k3s.version
    )


def test_every_variable_raya_passes_is_declared() -> None:
    from raya.cloud.image import Endpoints
    from raya.model.config import parse_stack_config

    config = parse_stack_config(
        {
            "authorizedUsers": ["octo-alice"],
            "managedSubdomain": "raya",
            "parentZone": "example.com",
            "acmeEmail": "ops@example.org",
        },
        "test",
    )
    declared = hcl.variables_of(hcl.load(TEMPLATE))
    assert set(packer_variables(config, Endpoints())) <= set(declared)


def test_install_sh_gets_every_input_it_requires() -> None:
    template = hcl.load(TEMPLATE)
    (build,) = template["build"]
    (provisioner,) = build["provisioner"]
    shell = provisioner['"shell"']
    assert shell["script"] == '"${path.root}/install.sh"'
    passed = {item.strip('"').split("=", 1)[0] for item in shell["environment_vars"]}
    script = (IMAGE_DIR / "install.sh").read_text()
    required = set(re.search(r"for name in ([A-Z0-9_ ]+); do", script)[1].split())  # type: ignore[index]
    assert required <= passed
    assert passed - required == {"DISK"}


@pytest.mark.parametrize(
    ("server_type", "accepted"),
    [("cx23", True), ("cpx11", True), ("ccx13", True), ("cx53", True),
     ("cax11", False), ("cax21", False), ("cax41", False)],
)
def test_arm_server_types_are_refused(server_type: str, accepted: bool) -> None:
    """The `server_type` variable's validation block, evaluated: Hetzner's ARM types are cax*."""
    template = hcl.load(TEMPLATE)
    (validation,) = hcl.variables_of(template)["server_type"]["validation"]
    evaluator = hcl.Evaluator(template, IMAGE_DIR, {"server_type": server_type})
    assert evaluator.value(validation["condition"]) is accepted
    assert evaluator.value(validation["error_message"]) == (
        "The image is x86_64: cax* server types are ARM."
    )


def test_the_default_server_type_passes_its_own_validation() -> None:
    template = hcl.load(TEMPLATE)
    variable = hcl.variables_of(template)["server_type"]
    default = hcl.Evaluator(template, IMAGE_DIR, {}).value(variable["default"])
    (validation,) = variable["validation"]
    assert hcl.Evaluator(template, IMAGE_DIR, {"server_type": default}).value(
        validation["condition"]
    ) is True


def test_packer_fmt_is_clean() -> None:
    packer = require_tool("packer")
    result = subprocess.run(
        [packer, "fmt", "-check", "-diff", str(TEMPLATE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
