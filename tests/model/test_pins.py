"""The image pins, their validation, and the snapshot labels derived from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raya.errors import ConfigError
from raya.model.pins import (
    ChartPin,
    ChartPins,
    FcosPin,
    K3sPin,
    K3sSelinuxPin,
    Pins,
    chart_pins_path,
    dump_chart_pins,
    dump_pin,
    fcos_pin_path,
    k3s_pin_path,
    k3s_selinux_pin_path,
    label_selector,
    label_value,
    load_chart_pins,
    load_pins,
    parse_fcos_pin,
    parse_k3s_pin,
    snapshot_labels,
)
from tests.support import REPO

FCOS_SHA = "0ce6d44b5027b4e333fbb2b056b015830bc61d4205399190cd9371f98cada19f"
K3S_SHA = "d73847bcd3c5fccef0115b372e2f9a91f3032dc84bbf71518a4617565294d313"
FCOS = {"stream": "stable", "version": "44.20260720.3.1", "sha256": FCOS_SHA}
K3S = {"version": "v1.36.5+k3s1", "sha256": K3S_SHA}
SELINUX = {"version": "v1.6.stable.1", "sha256": "5" * 64}
SELINUX_PIN = K3sSelinuxPin("v1.6.stable.1", "5" * 64)


def write(
    tmp_path: Path, fcos: object = FCOS, k3s: object = K3S, selinux: object = SELINUX
) -> Path:
    (tmp_path / "image").mkdir(exist_ok=True)
    for path, data in (
        (fcos_pin_path(tmp_path), fcos),
        (k3s_pin_path(tmp_path), k3s),
        (k3s_selinux_pin_path(tmp_path), selinux),
    ):
        path.write_text(data if isinstance(data, str) else json.dumps(data))
    return tmp_path


def test_the_repository_pins_are_the_issues_starting_point() -> None:
    assert load_pins(REPO) == Pins(
        fcos=FcosPin("stable", "44.20260720.3.1", FCOS_SHA),
        k3s=K3sPin("v1.36.5+k3s1", K3S_SHA),
        # The stable k3s-selinux release when it was pinned; its sha256 could not be read
        # where it was written: `raya image pins --update` records it.
        k3s_selinux=K3sSelinuxPin("v1.6.stable.1", None),
    )


def test_repository_pin_files_are_in_dump_form() -> None:
    pins = load_pins(REPO)
    assert fcos_pin_path(REPO).read_text() == dump_pin(pins.fcos)
    assert k3s_pin_path(REPO).read_text() == dump_pin(pins.k3s)
    assert k3s_selinux_pin_path(REPO).read_text() == dump_pin(pins.k3s_selinux)


@pytest.mark.parametrize("stream", ["stable", "testing", "next"])
def test_every_stream_is_accepted(tmp_path: Path, stream: str) -> None:
    assert load_pins(write(tmp_path, fcos={**FCOS, "stream": stream})).fcos.stream == stream


def test_the_aarch64_sha256_is_optional_and_round_trips(tmp_path: Path) -> None:
    """Pin files written before ARM support stay valid, and keep their bytes when dumped."""
    assert load_pins(write(tmp_path)).fcos.aarch64_sha256 is None
    pins = Pins(
        FcosPin("stable", "44.20260720.3.1", FCOS_SHA, aarch64_sha256="1" * 64),
        K3sPin("v1.36.5+k3s1", K3S_SHA, aarch64_sha256="2" * 64),
        SELINUX_PIN,
    )
    root = write(tmp_path, fcos=dump_pin(pins.fcos), k3s=dump_pin(pins.k3s))
    assert load_pins(root) == pins
    assert json.loads(dump_pin(pins.k3s)) == {**K3S, "aarch64_sha256": "2" * 64}
    assert (pins.fcos.sha256_for("x86"), pins.fcos.sha256_for("arm")) == (FCOS_SHA, "1" * 64)


def test_dump_round_trips(tmp_path: Path) -> None:
    pins = Pins(
        FcosPin("next", "45.20261001.1.0", "a" * 64),
        K3sPin("v1.37.0+k3s2", "0" * 64),
        K3sSelinuxPin("v1.7.latest.2", None),
    )
    root = write(
        tmp_path,
        fcos=dump_pin(pins.fcos),
        k3s=dump_pin(pins.k3s),
        selinux=dump_pin(pins.k3s_selinux),
    )
    assert load_pins(root) == pins
    assert dump_pin(pins.fcos) == (
        '{\n  "stream": "next",\n  "version": "45.20261001.1.0",\n  "sha256": "'
        + "a" * 64
        + '"\n}\n'
    )


@pytest.mark.parametrize(
    ("fcos", "message"),
    [
        (
            {**FCOS, "stream": "rawhide"},
            "field 'stream' is 'rawhide'; accepted: stable, testing, next",
        ),
        ({**FCOS, "stream": 1}, "field 'stream' is required and must be a string"),
        ({"version": FCOS["version"], "sha256": FCOS_SHA}, "field 'stream' is required"),
        (
            {**FCOS, "version": "44"},
            "field 'version' is '44'; accepted: an FCOS version such as 44.20260720.3.1",
        ),
        ({**FCOS, "version": "44.2026072.3.1"}, "field 'version' is '44.2026072.3.1'; accepted"),
        ({**FCOS, "sha256": FCOS_SHA.upper()}, "field 'sha256' is '0CE6"),
        (
            {**FCOS, "sha256": FCOS_SHA[:-1]},
            f"field 'sha256' is '{FCOS_SHA[:-1]}'; accepted: 64 lowercase hex digits",
        ),
        (
            {**FCOS, "sha256": FCOS_SHA[:-1] + "g"},
            f"field 'sha256' is '{FCOS_SHA[:-1]}g'; accepted: 64 lowercase hex digits",
        ),
        (
            {**FCOS, "arch": "x86_64"},
            "unknown field(s) arch; accepted: stream, version, sha256, aarch64_sha256",
        ),
        (
            {**FCOS, "aarch64_sha256": "A" * 64},
            f"field 'aarch64_sha256' is '{'A' * 64}'; accepted: 64 lowercase hex digits",
        ),
        (
            {**FCOS, "aarch64_sha256": None},
            "field 'aarch64_sha256' is required and must be a string",
        ),
        ([], "expected a JSON object with stream, version, sha256"),
        ("{", "not JSON: "),
    ],
)
def test_bad_fcos_pin(tmp_path: Path, fcos: object, message: str) -> None:
    root = write(tmp_path, fcos=fcos)
    with pytest.raises(ConfigError) as caught:
        load_pins(root)
    assert str(caught.value).startswith(f"{fcos_pin_path(root)}: {message}")


@pytest.mark.parametrize(
    ("k3s", "message"),
    [
        ({**K3S, "version": "1.36.5"}, "field 'version' is '1.36.5'; accepted: a k3s release"),
        ({**K3S, "version": "v1.36.5-k3s1"}, "field 'version' is 'v1.36.5-k3s1'; accepted: a k3s"),
        ({**K3S, "version": "v1.36.5+k3s1 "}, "field 'version' is 'v1.36.5+k3s1 '; accepted"),
        ({**K3S, "sha256": ""}, "field 'sha256' is ''; accepted: 64 lowercase hex digits"),
        ({"version": "v1.36.5+k3s1"}, "field 'sha256' is required and must be a string"),
        (
            {**K3S, "stream": "stable"},
            "unknown field(s) stream; accepted: version, sha256, aarch64_sha256",
        ),
        ({**K3S, "aarch64_sha256": "9" * 63}, f"field 'aarch64_sha256' is '{'9' * 63}'"),
    ],
)
def test_bad_k3s_pin(tmp_path: Path, k3s: object, message: str) -> None:
    root = write(tmp_path, k3s=k3s)
    with pytest.raises(ConfigError) as caught:
        load_pins(root)
    assert str(caught.value).startswith(f"{k3s_pin_path(root)}: {message}")


def test_the_k3s_selinux_pin_names_its_coreos_rpm(tmp_path: Path) -> None:
    assert load_pins(write(tmp_path)).k3s_selinux == SELINUX_PIN
    # k3s-selinux's scripts/version: v<version>.<channel>.<release> builds
    # k3s-selinux-<version>-<release>.coreos.noarch.rpm (policy/coreos/k3s-selinux.spec).
    assert SELINUX_PIN.rpm == "k3s-selinux-1.6-1.coreos.noarch.rpm"
    assert K3sSelinuxPin("v1.12.latest.30", None).rpm == "k3s-selinux-1.12-30.coreos.noarch.rpm"
    unrecorded = write(tmp_path, selinux={**SELINUX, "sha256": None})
    assert load_pins(unrecorded).k3s_selinux == K3sSelinuxPin("v1.6.stable.1", None)
    assert json.loads(dump_pin(load_pins(unrecorded).k3s_selinux)) == {
        "version": "v1.6.stable.1",
        "sha256": None,
    }


@pytest.mark.parametrize(
    ("selinux", "message"),
    [
        # testing builds are signed with the testing key: never pinned.
        ({**SELINUX, "version": "v1.7.testing.3"}, "field 'version' is 'v1.7.testing.3'; accepted"),
        ({**SELINUX, "version": "1.6.stable.1"}, "field 'version' is '1.6.stable.1'; accepted"),
        ({**SELINUX, "version": "v1.6.stable"}, "field 'version' is 'v1.6.stable'; accepted"),
        ({**SELINUX, "version": "v1.٦.stable.1"}, "field 'version' is 'v1.٦.stable.1'; accepted"),
        ({**SELINUX, "sha256": "C" * 64}, "field 'sha256' is '" + "C" * 64 + "'; accepted: 64"),
        ({"version": "v1.6.stable.1"}, "field 'sha256' is required and must be a string"),
        ({**SELINUX, "rpm": "x.rpm"}, "unknown field(s) rpm; accepted: version, sha256"),
        ([], "expected a JSON object with version, sha256"),
    ],
)
def test_bad_k3s_selinux_pin(tmp_path: Path, selinux: object, message: str) -> None:
    root = write(tmp_path, selinux=selinux)
    with pytest.raises(ConfigError) as caught:
        load_pins(root)
    assert str(caught.value).startswith(f"{k3s_selinux_pin_path(root)}: {message}")


def test_missing_pin_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_k3s_pin(tmp_path / "k3s.pin")
    assert str(caught.value) == f"{tmp_path / 'k3s.pin'}: pin file not found"
    with pytest.raises(ConfigError, match=r"fcos\.pin: pin file not found$"):
        parse_fcos_pin(tmp_path / "fcos.pin")


def test_snapshot_labels() -> None:
    labels = snapshot_labels(load_pins(REPO), "raya")
    assert labels == {
        "managed_by": "raya",
        "os": "fcos",
        "fcos_stream": "stable",
        "fcos_version": "44.20260720.3.1",
        "k3s_version": "v1.36.5-k3s1",
        "k3s_selinux_version": "v1.6.stable.1",
    }
    assert label_selector(labels) == (
        "fcos_stream=stable,fcos_version=44.20260720.3.1,k3s_selinux_version=v1.6.stable.1,"
        "k3s_version=v1.36.5-k3s1,managed_by=raya,os=fcos"
    )


def test_labels_change_with_every_pin_field_that_names_the_image() -> None:
    pins = load_pins(REPO)
    base = snapshot_labels(pins, "raya")
    variants = [
        Pins(FcosPin("testing", pins.fcos.version, pins.fcos.sha256), pins.k3s, SELINUX_PIN),
        Pins(FcosPin("stable", "44.20260720.3.2", pins.fcos.sha256), pins.k3s, SELINUX_PIN),
        Pins(pins.fcos, K3sPin("v1.36.5+k3s2", pins.k3s.sha256), SELINUX_PIN),
        # A new policy release is a new image.
        Pins(pins.fcos, pins.k3s, K3sSelinuxPin("v1.6.stable.2", "5" * 64)),
    ]
    for variant in variants:
        assert snapshot_labels(variant, "raya") != base
    assert snapshot_labels(pins, "lab") != base


@pytest.mark.parametrize(
    ("value", "label"),
    [("v1.36.5+k3s1", "v1.36.5-k3s1"), ("", ""), ("a_b.c-d", "a_b.c-d"), ("x" * 63, "x" * 63)],
)
def test_label_value(value: str, label: str) -> None:
    assert label_value(value) == label


@pytest.mark.parametrize("value", ["-a", "a-", "a b", "é", "x" * 64, "a/b"])
def test_bad_label_value(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        label_value(value)
    assert str(caught.value) == (
        f"{value!r} cannot be a Hetzner label value (alphanumerics and -_. only)"
    )


CHARTS: dict[str, dict[str, str | None]] = {
    "cert-manager": {"version": "v1.18.2", "digest": "1" * 64},
    "external-dns": {"version": "1.14.3", "digest": None},
    "hcloud-cloud-controller-manager": {"version": "1.35.0", "digest": "2" * 64},
    "hcloud-csi": {"version": "2.22.1", "digest": None},
    "cluster-autoscaler": {"version": "9.59.1", "digest": "3" * 64},
}
ALL = (
    "cert-manager, external-dns, hcloud-cloud-controller-manager, hcloud-csi, "
    "cluster-autoscaler"
)


def write_charts(tmp_path: Path, data: object) -> Path:
    (tmp_path / "image").mkdir(exist_ok=True)
    chart_pins_path(tmp_path).write_text(data if isinstance(data, str) else json.dumps(data))
    return tmp_path


def test_chart_pins_round_trip(tmp_path: Path) -> None:
    pins = load_chart_pins(write_charts(tmp_path, CHARTS))
    assert pins == ChartPins(
        cert_manager=ChartPin("v1.18.2", "1" * 64),
        external_dns=ChartPin("1.14.3", None),
        hcloud_ccm=ChartPin("1.35.0", "2" * 64),
        hcloud_csi=ChartPin("2.22.1", None),
        cluster_autoscaler=ChartPin("9.59.1", "3" * 64),
    )
    assert dump_chart_pins(pins) == json.dumps(dict(sorted(CHARTS.items())), indent=2) + "\n"


def test_the_repository_chart_pins_are_valid_and_the_examples() -> None:
    pins = load_chart_pins(REPO)
    # `raya render --example` shows what a deployment of this repository installs.
    assert load_chart_pins(REPO / "src" / "raya" / "model" / "example") == pins
    assert chart_pins_path(REPO).read_text() == dump_chart_pins(pins)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], f"expected a JSON object with exactly the charts {ALL}; found"),
        (
            {"cert-manager": CHARTS["cert-manager"]},
            f"expected a JSON object with exactly the charts {ALL}; found cert-manager",
        ),
        (
            {k: v for k, v in CHARTS.items() if k != "hcloud-csi"},
            f"expected a JSON object with exactly the charts {ALL}; found cert-manager, "
            "cluster-autoscaler, external-dns, hcloud-cloud-controller-manager",
        ),
        (
            {**CHARTS, "traefik": CHARTS["cert-manager"]},
            "expected a JSON object with exactly the charts",
        ),
        (
            {**CHARTS, "external-dns": {"version": "1.14.3"}},
            "external-dns: field 'digest' is required and must be a string",
        ),
        (
            {**CHARTS, "external-dns": {"version": "1.14.3", "digest": "x"}},
            "field 'external-dns.digest' is 'x'; accepted: 64 lowercase hex digits",
        ),
        (
            {**CHARTS, "external-dns": {"version": "1.15.0-rc.1", "digest": None}},
            "field 'external-dns.version' is '1.15.0-rc.1'; accepted: a released chart version",
        ),
        (
            {**CHARTS, "cert-manager": {**CHARTS["cert-manager"], "repo": "x"}},
            "cert-manager: unknown field(s) repo; accepted: version, digest",
        ),
        ({**CHARTS, "cert-manager": "v1.18.2"}, "cert-manager: expected a JSON object"),
        ("{", "not JSON: "),
    ],
)
def test_bad_chart_pins(tmp_path: Path, data: object, message: str) -> None:
    root = write_charts(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        load_chart_pins(root)
    assert str(caught.value).startswith(f"{chart_pins_path(root)}: {message}")
