"""The Packer template reads both pins itself and stamps exactly the labels raya looks up."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raya.cloud.image import (
    fcos_image_url,
    k3s_binary_url,
    k3s_selinux_rpm_url,
    packer_variables,
)
from raya.defaults import FCOS_BUILDS_URL, K3S_RELEASES_URL, K3S_SELINUX_RELEASES_URL
from raya.model.pins import (
    FcosPin,
    K3sPin,
    K3sSelinuxPin,
    Pins,
    dump_pin,
    load_pins,
    snapshot_labels,
)
from tests.cloud.image import hcl
from tests.cloud.image.conftest import IMAGE_DIR, PINS
from tests.support import require_tool

TEMPLATE = IMAGE_DIR / "fcos.pkr.hcl"


def write_pins(folder: Path, pins: Pins) -> Path:
    (folder / "fcos.pin").write_text(dump_pin(pins.fcos))
    (folder / "k3s.pin").write_text(dump_pin(pins.k3s))
    (folder / "k3s-selinux.pin").write_text(dump_pin(pins.k3s_selinux))
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
    assert labels["k3s_selinux_version"] == "v1.6.stable.1"
    assert sorted(set(evaluator.pins_read)) == ["fcos.pin", "k3s-selinux.pin", "k3s.pin"]


@settings(max_examples=40, deadline=None)
@given(
    stream=st.sampled_from(["stable", "testing", "next"]),
    fcos=st.tuples(
        st.integers(30, 99), st.integers(0, 99999999), st.integers(0, 9), st.integers(0, 9)
    ),
    k3s=st.tuples(*(st.integers(0, 99),) * 3, st.integers(1, 9)),
    selinux=st.tuples(
        st.integers(0, 99),
        st.integers(0, 99),
        st.sampled_from(["stable", "latest"]),
        st.integers(1, 99),
    ),
    cluster=st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True),
)
def test_labels_agree_for_any_pins(
    tmp_path_factory: pytest.TempPathFactory,
    stream: str,
    fcos: tuple[int, int, int, int],
    k3s: tuple[int, int, int, int],
    selinux: tuple[int, int, str, int],
    cluster: str,
) -> None:
    pins = Pins(
        fcos=FcosPin(stream, f"{fcos[0]}.{fcos[1]:08d}.{fcos[2]}.{fcos[3]}", "1" * 64),
        k3s=K3sPin(f"v{k3s[0]}.{k3s[1]}.{k3s[2]}+k3s{k3s[3]}", "2" * 64),
        k3s_selinux=K3sSelinuxPin("v{}.{}.{}.{}".format(*selinux), "3" * 64),
    )
    folder = write_pins(tmp_path_factory.mktemp("pins"), pins)
    assert load_pins_from(folder) == pins
    labels, evaluator = stamped(folder, cluster)
    assert labels == snapshot_labels(pins, cluster)
    # The RPM the template downloads is the one raya checks, named as the spec file does.
    evaluator.variables["k3s_selinux_releases_url"] = K3S_SELINUX_RELEASES_URL
    url = evaluator.value(hcl.locals_of(hcl.load(TEMPLATE))["k3s_selinux_rpm_url"])
    assert url == k3s_selinux_rpm_url(K3S_SELINUX_RELEASES_URL, pins.k3s_selinux)
    assert url.endswith(
        f"/v{selinux[0]}.{selinux[1]}.{selinux[2]}.{selinux[3]}/"
        f"k3s-selinux-{selinux[0]}.{selinux[1]}-{selinux[3]}.coreos.noarch.rpm"
    )


def load_pins_from(folder: Path) -> Pins:
    """load_pins wants a project root with image/; the test keeps the pins in one folder."""
    root = folder.parent / f"{folder.name}-root"
    (root / "image").mkdir(parents=True, exist_ok=True)
    for name in ("fcos.pin", "k3s.pin", "k3s-selinux.pin"):
        (root / "image" / name).write_bytes((folder / name).read_bytes())
    return load_pins(root)


def test_the_template_reads_the_committed_pins() -> None:
    labels, _ = stamped(IMAGE_DIR, "raya")
    assert labels == snapshot_labels(load_pins(IMAGE_DIR.parent), "raya")


@pytest.mark.parametrize("architecture", ["x86", "arm"])
def test_the_artifact_urls_are_the_ones_raya_checks(tmp_path: Path, architecture: str) -> None:
    template = hcl.load(TEMPLATE)
    variables = hcl.variables_of(template)
    defaults = {
        name: hcl.Evaluator(template, tmp_path, {}).value(body["default"])
        for name, body in variables.items()
        if "default" in body
    }
    assert defaults["fcos_builds_url"] == FCOS_BUILDS_URL
    assert defaults["k3s_releases_url"] == K3S_RELEASES_URL
    assert defaults["k3s_selinux_releases_url"] == K3S_SELINUX_RELEASES_URL
    assert defaults["architecture"] == "x86"
    assert "default" not in variables["cluster_name"]

    write_pins(tmp_path, PINS)
    given = {
        "architecture": architecture,
        "cluster_name": "raya",
        "fcos_builds_url": "http://m/fcos",
        "k3s_releases_url": "http://m/k3s",
        "k3s_selinux_releases_url": "http://m/k3s-selinux",
        "location": "sin",
        "server_type": {"x86": "cpx11", "arm": "cax11"}[architecture],
    }
    evaluator = hcl.Evaluator(template, tmp_path, given)
    locals_ = hcl.locals_of(template)
    assert evaluator.value(locals_["fcos_image_url"]) == fcos_image_url(
        "http://m/fcos", PINS.fcos, architecture
    )
    assert evaluator.value(locals_["k3s_binary_url"]) == k3s_binary_url(
        "http://m/k3s", PINS.k3s.version, architecture
    )
    # install.sh checks the artefacts against the pins' sha256 of that architecture.
    (build,) = template["build"]
    (provisioner,) = build["provisioner"]
    passed = dict(
        evaluator.value(item).split("=", 1) for item in provisioner['"shell"']["environment_vars"]
    )
    assert passed["FCOS_SHA256"] == PINS.fcos.sha256_for(architecture)
    assert passed["K3S_SHA256"] == PINS.k3s.sha256_for(architecture)
    # One noarch RPM for both architectures.
    assert passed["K3S_SELINUX_RPM_URL"] == (
        "http://m/k3s-selinux/v1.6.stable.1/k3s-selinux-1.6-1.coreos.noarch.rpm"
    )
    assert passed["K3S_SELINUX_SHA256"] == "c" * 64
    # Not recorded yet: install.sh is handed a value it refuses (test_install.py).
    unrecorded = Pins(PINS.fcos, PINS.k3s, K3sSelinuxPin("v1.6.stable.1", None))
    evaluator = hcl.Evaluator(template, write_pins(tmp_path, unrecorded), given)
    handed = dict(
        evaluator.value(item).split("=", 1) for item in provisioner['"shell"']["environment_vars"]
    )
    assert handed["K3S_SELINUX_SHA256"] == "unrecorded"
    assert {architecture: passed["FCOS_SHA256"]} in (
        {"x86": "a" * 64},
        {"arm": "8" * 64},
    )  # conftest's pins: the x86 and aarch64 values differ
    # The build server is the one raya chose from Hetzner's catalogue, where it chose it.
    source = hcl.source_of(template, "hcloud", "fcos")
    assert evaluator.value(source["server_type"]) == given["server_type"]
    assert evaluator.value(source["location"]) == given["location"]


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
    passed = set(packer_variables(config, Endpoints(), "ash", "cpx11"))
    assert passed <= set(declared)
    # Those Packer would otherwise ask for, or take a default raya did not choose.
    assert {"cluster_name", "location", "server_type"} <= passed
    assert "default" not in declared["location"] and "default" not in declared["server_type"]


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
    ("architecture", "accepted"),
    [("x86", True), ("arm", True), ("x86_64", False), ("aarch64", False), ("", False)],
)
def test_the_architecture_is_one_hetzner_names(architecture: str, accepted: bool) -> None:
    """The `architecture` variable's validation block, evaluated."""
    template = hcl.load(TEMPLATE)
    (validation,) = hcl.variables_of(template)["architecture"]["validation"]
    evaluator = hcl.Evaluator(template, IMAGE_DIR, {"architecture": architecture})
    assert evaluator.value(validation["condition"]) is accepted
    assert evaluator.value(validation["error_message"]) == (
        "The architecture is x86 or arm, as Hetzner names them."
    )


def without_packer_block(folder: Path) -> Path:
    """The template minus its `packer {}` block: Debian's Packer (1.6) predates
    `required_plugins` (1.7) but has the hcloud builder built in, so it validates the rest."""
    text = TEMPLATE.read_text()
    stripped = re.sub(r"^packer \{\n.*?^\}\n", "", text, count=1, flags=re.S | re.M)
    assert "required_plugins" in text and "required_plugins" not in stripped
    (folder / "fcos.pkr.hcl").write_text(stripped)
    (folder / "install.sh").write_bytes((IMAGE_DIR / "install.sh").read_bytes())
    return folder / "fcos.pkr.hcl"


@pytest.mark.parametrize(
    ("architecture", "pins", "problem"),
    [
        ("x86", PINS, None),
        ("arm", PINS, None),
        ("mips", PINS, "The architecture is x86 or arm"),
        # Pins from before ARM support: fine for x86, no aarch64 sha256 for an arm build.
        (
            "x86",
            Pins(FcosPin("stable", "44.20260720.3.1", "a" * 64), PINS.k3s, PINS.k3s_selinux),
            None,
        ),
        (
            "arm",
            Pins(FcosPin("stable", "44.20260720.3.1", "a" * 64), PINS.k3s, PINS.k3s_selinux),
            "Invalid index",
        ),
        # A k3s-selinux sha256 not recorded yet (null): the template validates (the
        # committed pin), install.sh is handed "unrecorded" and refuses it.
        ("x86", Pins(PINS.fcos, PINS.k3s, K3sSelinuxPin("v1.6.stable.1", None)), None),
    ],
)
def test_packer_validates_the_template_for_each_architecture(
    tmp_path: Path, architecture: str, pins: Pins, problem: str | None
) -> None:
    packer = require_tool("packer")
    template = without_packer_block(write_pins(tmp_path, pins))
    result = subprocess.run(
        [packer, "validate", "-var", "cluster_name=raya", "-var", f"architecture={architecture}",
         "-var", "location=ash", "-var", "server_type=cpx11", str(template)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HCLOUD_TOKEN": "unused"},
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    if problem is None:
        assert result.returncode == 0, output
    else:
        assert result.returncode != 0 and problem in output, output


def test_packer_fmt_is_clean() -> None:
    packer = require_tool("packer")
    result = subprocess.run(
        [packer, "fmt", "-check", "-diff", str(TEMPLATE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
