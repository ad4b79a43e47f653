"""`raya image pins` and the upstream metadata readers, against fake metadata on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from raya.cloud.image import (
    Endpoints,
    chart_releases,
    chart_updates,
    check_pins,
    complete_pins,
    latest_fcos,
    latest_k3s,
    latest_k3s_selinux,
    latest_pins,
    newest_chart,
    pin_changes,
    unpinned,
    upstream_fcos_sha256,
    upstream_k3s_selinux_sha256,
    upstream_k3s_sha256,
    write_pins,
)
from raya.errors import ImageError
from raya.model.pins import (
    ChartPin,
    ChartPins,
    FcosPin,
    K3sPin,
    K3sSelinuxPin,
    Pins,
    dump_chart_pins,
    dump_pin,
    load_chart_pins,
    load_pins,
)
from tests.cloud.image.conftest import (
    CHARTS,
    FCOS,
    K3S,
    K3S_SELINUX,
    PINS,
    FakeWeb,
    make_project,
)

NEW_FCOS = FcosPin(
    stream="stable", version="44.20260810.3.0", sha256="3" * 64, aarch64_sha256="ab" * 32
)
NEW_K3S = K3sPin(version="v1.36.6+k3s1", sha256="4" * 64, aarch64_sha256="cd" * 32)


def pins(project: Path, web: FakeWeb, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "COLUMNS": "200",
        "RAYA_FCOS_BUILDS_URL": web.fcos,
        "RAYA_K3S_CHANNELS_URL": web.k3s_channels,
        "RAYA_K3S_RELEASES_URL": web.k3s_releases,
        "RAYA_K3S_SELINUX_API_URL": web.k3s_selinux_api,
        "RAYA_CERT_MANAGER_CHARTS_URL": web.cert_manager_charts,
        "RAYA_EXTERNAL_DNS_CHARTS_URL": web.external_dns_charts,
        "RAYA_HETZNER_CHARTS_URL": web.hetzner_charts,
        "RAYA_AUTOSCALER_CHARTS_URL": web.autoscaler_charts,
        # The raya under test, where a worktree puts its own sources first.
        **{name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ},
    }
    return subprocess.run(
        [sys.executable, "-m", "raya", "image", "pins", "--root", str(project), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def snapshot(project: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of image/ with its bytes and modification time."""
    return {
        path.name: (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted((project / "image").iterdir())
    }


def endpoints(web: FakeWeb) -> Endpoints:
    return Endpoints(
        fcos_builds=web.fcos,
        k3s_channels=web.k3s_channels,
        k3s_releases=web.k3s_releases,
        k3s_selinux_releases=web.k3s_selinux_releases,
        k3s_selinux_api=web.k3s_selinux_api,
        cert_manager_charts=web.cert_manager_charts,
        external_dns_charts=web.external_dns_charts,
        hetzner_charts=web.hetzner_charts,
        autoscaler_charts=web.autoscaler_charts,
    )


@pytest.mark.parametrize("update", [False, True])
def test_current_pins_are_left_alone(project: Path, web: FakeWeb, update: bool) -> None:
    web.publish(PINS)
    before = snapshot(project)
    result = pins(project, web, *(["--update"] if update else []))
    assert result.returncode == 0, result.stderr
    assert f"image/fcos.pin: current, stable {FCOS.version}" in result.stdout
    assert f"image/k3s.pin: current, {K3S.version}" in result.stdout
    assert (
        f"image/charts.pin: current, cert-manager {CHARTS.cert_manager.version} "
        f"(sha256 {CHARTS.cert_manager.digest}), external-dns {CHARTS.external_dns.version}"
    ) in result.stdout
    assert snapshot(project) == before


def test_without_update_newer_releases_are_only_reported(project: Path, web: FakeWeb) -> None:
    web.publish(Pins(NEW_FCOS, NEW_K3S, K3S_SELINUX))
    before = snapshot(project)
    result = pins(project, web)
    assert result.returncode == 0, result.stderr
    assert f"image/fcos.pin: outdated, stable {FCOS.version}" in result.stdout
    assert f"newest stable {NEW_FCOS.version} (sha256 {NEW_FCOS.sha256})" in result.stdout
    assert f"newest {NEW_K3S.version}" in result.stdout
    assert "raya image pins --update" in result.stdout
    assert snapshot(project) == before


def test_update_rewrites_what_changed(project: Path, web: FakeWeb) -> None:
    web.publish(Pins(NEW_FCOS, NEW_K3S, K3S_SELINUX))
    result = pins(project, web, "--update")
    assert result.returncode == 0, result.stderr
    assert (
        f"image/fcos.pin: stable {FCOS.version} (sha256 {FCOS.sha256}) -> "
        f"stable {NEW_FCOS.version} (sha256 {NEW_FCOS.sha256})"
    ) in result.stdout
    assert (
        f"image/k3s.pin: {K3S.version} (sha256 {K3S.sha256}) -> {NEW_K3S.version}" in result.stdout
    )
    assert load_pins(project) == Pins(NEW_FCOS, NEW_K3S, K3S_SELINUX)
    assert (project / "image" / "k3s.pin").read_text() == dump_pin(NEW_K3S)
    assert sorted(path.name for path in (project / "image").iterdir()) == [
        "charts.pin", "fcos.pin", "fcos.pkr.hcl", "install.sh", "k3s-selinux.pin", "k3s.pin",
    ]  # fmt: skip
    # What was written is what a build then verifies against the same upstream.
    check_pins(project, load_pins(project), endpoints(web))


def test_update_touches_only_the_pin_that_changed(project: Path, web: FakeWeb) -> None:
    web.publish(Pins(FCOS, NEW_K3S, K3S_SELINUX))
    before = snapshot(project)
    result = pins(project, web, "--update")
    assert result.returncode == 0, result.stderr
    after = snapshot(project)
    assert after["fcos.pin"] == before["fcos.pin"]
    assert after["k3s.pin"][0] == dump_pin(NEW_K3S).encode()


def test_update_follows_another_stream(project: Path, web: FakeWeb) -> None:
    testing = FcosPin("testing", "44.20260805.2.0", sha256="5" * 64, aarch64_sha256="ef" * 32)
    web.publish(PINS)
    web.publish_fcos(testing)
    result = pins(project, web, "--update", "--stream", "testing")
    assert result.returncode == 0, result.stderr
    assert load_pins(project).fcos == testing
    assert "/fcos/streams/testing.json" in web.paths()


def test_an_unknown_stream_is_a_usage_error(project: Path, web: FakeWeb) -> None:
    result = pins(project, web, "--stream", "rawhide")
    assert result.returncode == 2
    assert "stable, testing, next" in result.stderr
    assert web.requests == []


def test_an_upstream_failure_changes_nothing(project: Path, web: FakeWeb) -> None:
    web.publish_k3s(NEW_K3S)  # no FCOS stream metadata: 404
    before = snapshot(project)
    result = pins(project, web, "--update")
    assert result.returncode == 1
    assert f"{web.fcos}/streams/stable.json: HTTP 404" in result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(project) == before


def test_latest_fcos_reads_the_hetzner_artifact(web: FakeWeb) -> None:
    web.publish_fcos(NEW_FCOS)
    assert latest_fcos("stable", web.fcos) == NEW_FCOS


def test_latest_fcos_refuses_an_artifact_elsewhere(web: FakeWeb) -> None:
    web.publish_fcos(NEW_FCOS)
    stream = web.files["/fcos/streams/stable.json"].replace(b"-hetzner.x86_64", b"-hetzner.x86-64")
    web.files["/fcos/streams/stable.json"] = stream
    with pytest.raises(ImageError, match="where the Packer template downloads it from"):
        latest_fcos("stable", web.fcos)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not JSON"),
        (b'{"architectures": {"x86_64": {"artifacts": {}}}}', "no string at architectures"),
        (b"[]", "no string at architectures.x86_64.artifacts.hetzner.release"),
    ],
)
def test_latest_fcos_explains_a_changed_format(web: FakeWeb, body: bytes, message: str) -> None:
    web.files["/fcos/streams/next.json"] = body
    with pytest.raises(ImageError, match=message) as caught:
        latest_fcos("next", web.fcos)
    assert f"{web.fcos}/streams/next.json" in str(caught.value)


def test_upstream_fcos_sha256_reads_the_build_metadata(web: FakeWeb) -> None:
    web.publish_fcos(FCOS, latest=False, meta_sha256="7" * 64)
    assert upstream_fcos_sha256(FCOS, web.fcos) == "7" * 64


def test_upstream_fcos_sha256_refuses_a_bad_digest(web: FakeWeb) -> None:
    web.publish_fcos(FCOS, latest=False, meta_sha256="not-a-digest")
    with pytest.raises(ImageError, match="is not 64 lowercase hex digits"):
        upstream_fcos_sha256(FCOS, web.fcos)


def test_latest_k3s_follows_the_stable_channel(web: FakeWeb) -> None:
    web.publish_k3s(NEW_K3S)
    assert latest_k3s(web.k3s_channels) == NEW_K3S.version
    assert latest_k3s(web.k3s_channels, "latest") == "v9.9.9+k3s1"
    with pytest.raises(ImageError, match=r"no channel 'v1\.99'"):
        latest_k3s(web.k3s_channels, "v1.99")


def test_upstream_k3s_sha256_takes_the_k3s_line(web: FakeWeb) -> None:
    web.publish_k3s(K3S, stable=False)
    assert upstream_k3s_sha256(K3S.version, web.k3s_releases) == K3S.sha256
    path = f"/k3s/releases/download/{K3S.version}/sha256sum-amd64.txt"
    web.files[path] = f"{'1' * 64}  k3s-airgap-images-amd64.tar\n".encode()
    with pytest.raises(ImageError, match="no line for the k3s binary"):
        upstream_k3s_sha256(K3S.version, web.k3s_releases)


def test_check_pins_shows_both_values_of_every_mismatch(project: Path, web: FakeWeb) -> None:
    web.publish_fcos(FCOS, meta_sha256="5" * 64)
    web.publish_k3s(K3S, listed_sha256="6" * 64)
    web.publish_k3s_selinux(K3S_SELINUX)
    with pytest.raises(ImageError) as caught:
        check_pins(project, PINS, endpoints(web))
    message = str(caught.value)
    for value in (FCOS.sha256, "5" * 64, K3S.sha256, "6" * 64, "fcos.pin", "k3s.pin"):
        assert value in message


def test_endpoints_may_end_with_a_slash(web: FakeWeb) -> None:
    web.publish(Pins(NEW_FCOS, NEW_K3S, K3S_SELINUX))
    slashed = Endpoints(
        fcos_builds=web.fcos + "/",
        k3s_channels=web.k3s_channels + "/",
        k3s_releases=web.k3s_releases + "/",
        k3s_selinux_api=web.k3s_selinux_api + "/",
    )
    assert latest_pins("stable", slashed) == Pins(NEW_FCOS, NEW_K3S, K3S_SELINUX)


def test_a_pin_is_replaced_whole_never_rewritten_in_place(project: Path) -> None:
    """docs/image.md: pins are rewritten atomically. The new bytes go to a temporary file that
    is renamed over the pin (a new inode); when the rename fails the pin keeps its bytes and
    no temporary file stays behind."""
    pin = project / "image" / "k3s.pin"
    before = pin.read_bytes(), pin.stat().st_ino
    (change,) = [
        c for c in pin_changes(project, PINS, Pins(FCOS, NEW_K3S, K3S_SELINUX)) if c.changed
    ]

    def refuse(source: object, target: object) -> None:
        raise PermissionError(13, "Permission denied")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", refuse)
        with pytest.raises(ImageError, match=r"k3s\.pin: cannot write the pin: Permission denied"):
            write_pins([change])
    assert (pin.read_bytes(), pin.stat().st_ino) == before
    assert sorted(path.name for path in pin.parent.iterdir()) == [
        "charts.pin", "fcos.pin", "fcos.pkr.hcl", "install.sh", "k3s-selinux.pin",
        "k3s.pin"]

    write_pins([change])
    assert pin.read_text() == dump_pin(NEW_K3S)
    assert pin.stat().st_ino != before[1]
NEW_CHARTS = ChartPins(
    cert_manager=ChartPin(version="v1.19.1", digest="8" * 64),
    external_dns=ChartPin(version="1.20.0", digest="9" * 64),
    hcloud_ccm=ChartPin(version="1.36.0", digest="a" * 64),
    hcloud_csi=ChartPin(version="2.23.0", digest="b" * 64),
    cluster_autoscaler=ChartPin(version="9.59.2", digest="c" * 64),
)


def test_update_records_new_chart_releases_and_their_digests(project: Path, web: FakeWeb) -> None:
    web.publish(PINS, NEW_CHARTS)
    before = snapshot(project)
    result = pins(project, web)
    assert result.returncode == 0, result.stderr
    assert "image/charts.pin: outdated, cert-manager v1.18.2" in result.stdout
    assert f"newest cert-manager v1.19.1 (sha256 {'8' * 64}), external-dns 1.20.0" in result.stdout
    # Hetzner's two charts, read from the one index of their repository.
    assert (
        f"hcloud-cloud-controller-manager 1.36.0 (sha256 {'a' * 64}), "
        f"hcloud-csi 2.23.0 (sha256 {'b' * 64})"
    ) in result.stdout
    assert snapshot(project) == before
    result = pins(project, web, "--update")
    assert result.returncode == 0, result.stderr
    assert load_chart_pins(project) == NEW_CHARTS
    assert (project / "image" / "charts.pin").read_text() == dump_chart_pins(NEW_CHARTS)
    after = snapshot(project)
    assert after["fcos.pin"] == before["fcos.pin"] and after["k3s.pin"] == before["k3s.pin"]
    assert {
        "/charts/jetstack/index.yaml",
        "/charts/external-dns/index.yaml",
        "/charts/hetzner/index.yaml",
    } <= set(web.paths())


def test_a_digest_not_yet_recorded_is_recorded(project: Path, web: FakeWeb) -> None:
    unrecorded = dataclasses.replace(
        CHARTS, cert_manager=ChartPin(CHARTS.cert_manager.version, None)
    )
    (project / "image" / "charts.pin").write_text(dump_chart_pins(unrecorded))
    web.publish(PINS)
    result = pins(project, web)
    assert "cert-manager v1.18.2 (sha256 not recorded)" in result.stdout
    assert pins(project, web, "--update").returncode == 0
    assert load_chart_pins(project) == CHARTS


def test_the_newest_release_skips_pre_releases_and_other_charts(
    project: Path, web: FakeWeb
) -> None:
    web.publish_charts(CHARTS)
    releases = chart_releases("cert-manager", web.cert_manager_charts)
    assert releases == {"v1.18.2": CHARTS.cert_manager.digest, "v0.9.0": "4" * 64}
    assert newest_chart(releases) == CHARTS.cert_manager
    assert chart_updates(project, CHARTS, endpoints(web)) == (CHARTS, ())
    with pytest.raises(ImageError, match="no chart 'external-dns' under entries"):
        chart_releases("external-dns", web.cert_manager_charts)


def test_a_repository_without_digests_gives_none(web: FakeWeb) -> None:
    web.publish_index("/charts/plain", "external-dns", ChartPin("1.20.0", None))
    releases = chart_releases("external-dns", f"{web.url}/charts/plain")
    assert newest_chart(releases) == ChartPin("1.20.0", None)


def test_a_republished_chart_is_an_error_until_updated(project: Path, web: FakeWeb) -> None:
    republished = dataclasses.replace(CHARTS.external_dns, digest="7" * 64)
    web.publish(PINS, dataclasses.replace(CHARTS, external_dns=republished))
    before = snapshot(project)
    result = pins(project, web)
    assert result.returncode == 1
    assert (
        f"warning: {project}/image/charts.pin: external-dns 1.14.3 is pinned with sha256 "
        f"{'2' * 64} but {web.external_dns_charts}index.yaml publishes {'7' * 64}"
    ) in result.stderr.replace("\n", "")
    assert "image/charts.pin: outdated" in result.stdout
    assert snapshot(project) == before
    # --update records what the repository now publishes, with the warning.
    result = pins(project, web, "--update")
    assert result.returncode == 0 and "warning: " in result.stderr
    assert load_chart_pins(project).external_dns == republished


def test_the_autoscalers_chart_moves_only_among_charts_made_for_its_minor_or_older(
    project: Path, web: FakeWeb
) -> None:
    # raya runs the autoscaler 1.36.1 (its image tag). The repository lists 9.59.1 and 9.59.2
    # (appVersion 1.35.0: made for an older autoscaler, whose templates pass 1.36.1 nothing
    # it refuses) and 10.0.0, newer, made for 1.37.0: the update takes 9.59.2.
    web.publish(PINS, NEW_CHARTS)
    result = pins(project, web, "--update")
    assert result.returncode == 0, result.stderr
    assert f"cluster-autoscaler 9.59.2 (sha256 {'c' * 64})" in result.stdout
    assert "10.0.0" not in result.stdout
    assert load_chart_pins(project).cluster_autoscaler == ChartPin("9.59.2", "c" * 64)
    assert "/charts/autoscaler/index.yaml" in web.paths()
    # Once a chart made for 1.36 (9.60.0, appVersion 1.36.1) is out, that one.
    made_for_ours = ChartPin("9.60.0", "f" * 64)
    web.publish_index("/charts/autoscaler", "cluster-autoscaler", made_for_ours,
                      app_version="1.36.1")  # fmt: skip
    updates, problems = chart_updates(project, NEW_CHARTS, endpoints(web))
    assert updates.cluster_autoscaler == made_for_ours and problems == ()
    # A pin of a chart made for the next autoscaler (by hand) is no release raya takes:
    # said, and moved back.
    pinned = dataclasses.replace(NEW_CHARTS, cluster_autoscaler=ChartPin("10.0.0", "e" * 64))
    updates, problems = chart_updates(project, pinned, endpoints(web))
    assert updates.cluster_autoscaler == made_for_ours
    assert problems == (
        f"{project}/image/charts.pin: cluster-autoscaler 10.0.0 is pinned but not listed of "
        f"appVersion 1.36 or older in {web.autoscaler_charts}/index.yaml",
    )
    assert set(chart_releases("cluster-autoscaler", web.autoscaler_charts)) == {
        "10.0.0", "9.60.0", "9.59.2", "9.59.1", "0.9.0",
    }  # fmt: skip
    assert set(chart_releases("cluster-autoscaler", web.autoscaler_charts, "1.35.0")) == {
        "9.59.2", "9.59.1", "0.9.0",
    }  # fmt: skip
    with pytest.raises(ImageError, match=r"has no released version of appVersion 0\.9 or older"):
        chart_releases("cluster-autoscaler", web.autoscaler_charts, "0.9.9")


NEXT_MINOR_K3S = K3sPin(version="v1.37.1+k3s1", sha256="5" * 64, aarch64_sha256="ef" * 32)
SKEW = (
    "image/k3s.pin: k3s v1.37.1+k3s1 is Kubernetes 1.37, but the cluster autoscaler raya runs "
    "for autoscaled pools is 1.36.1, made for Kubernetes 1.36 (raya.nodes.autoscaler.VERSION): "
    "move VERSION to the newest cluster-autoscaler-1.37.x release"
)


def test_an_update_to_a_new_kubernetes_minor_warns_that_the_autoscaler_stays(
    project: Path, web: FakeWeb
) -> None:
    # k3s' stable channel moves to 1.37 while raya's autoscaler is 1.36.1: --update moves k3s
    # (the pins are raya's inputs, the autoscaler raya's code) and says which constant to move.
    web.publish(Pins(FCOS, NEXT_MINOR_K3S, K3S_SELINUX))
    result = pins(project, web, "--update")
    assert result.returncode == 0, result.stderr
    assert load_pins(project).k3s == NEXT_MINOR_K3S
    warning = " ".join(result.stderr.split())
    assert f"warning: {project}/{SKEW}" in warning
    # Then the pins as they are: the mismatch is what is wrong with them (exit 1).
    checked = pins(project, web)
    assert checked.returncode == 1
    assert f"warning: {project}/{SKEW}" in " ".join(checked.stderr.split())
    assert "not of the cluster autoscaler's Kubernetes minor" in checked.stderr
    # k3s of the autoscaler's minor (the repository's pins): no such warning.
    web.publish(PINS)
    assert "autoscaler raya runs" not in pins(project, web, "--update").stderr


def test_a_pinned_version_gone_from_the_repository_is_an_error(
    project: Path, web: FakeWeb
) -> None:
    web.publish(PINS, NEW_CHARTS)
    index = yaml.safe_load(web.files["/charts/jetstack/index.yaml"])
    index["entries"]["cert-manager"] = [
        e for e in index["entries"]["cert-manager"] if e["version"] != "v1.18.2"
    ]
    web.files["/charts/jetstack/index.yaml"] = yaml.safe_dump(index).encode()
    updates, problems = chart_updates(project, CHARTS, endpoints(web))
    assert updates == NEW_CHARTS
    assert problems == (
        f"{project}/image/charts.pin: cert-manager v1.18.2 is pinned but not listed in "
        f"{web.cert_manager_charts}/index.yaml",
    )
    assert pins(project, web).returncode == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"entries: [", "not a Helm repository index"),
        (b"apiVersion: v1\n", "no chart 'cert-manager' under entries"),
        (b"entries:\n  cert-manager:\n  - version: 1.0.0-rc.1\n", "has no released version"),
        (
            b"entries:\n  cert-manager:\n  - {version: v1.0.0, digest: abc}\n",
            "cert-manager v1.0.0: sha256 'abc' is not 64 lowercase hex digits",
        ),
    ],
)
def test_a_bad_index_is_explained(web: FakeWeb, body: bytes, message: str) -> None:
    web.files["/charts/bad/index.yaml"] = body
    with pytest.raises(ImageError, match=message) as caught:
        chart_releases("cert-manager", f"{web.url}/charts/bad")
    assert f"{web.url}/charts/bad/index.yaml" in str(caught.value)


def test_a_chart_repository_failure_changes_nothing(project: Path, web: FakeWeb) -> None:
    web.publish(Pins(NEW_FCOS, NEW_K3S, K3S_SELINUX))
    del web.files["/charts/external-dns/index.yaml"]
    before = snapshot(project)
    result = pins(project, web, "--update")
    assert result.returncode == 1
    assert f"{web.url}/charts/external-dns/index.yaml: HTTP 404" in result.stderr
    assert snapshot(project) == before


def test_update_adds_the_aarch64_sha256s_to_pins_that_had_none(
    tmp_path: Path, web: FakeWeb
) -> None:
    """A pin file from before ARM support (no aarch64_sha256) stays valid; an update records
    the aarch64 artefacts' sha256 beside the x86 ones, from their own upstream files."""
    old = Pins(
        FcosPin(FCOS.stream, FCOS.version, FCOS.sha256),
        K3sPin(K3S.version, K3S.sha256),
        K3S_SELINUX,
    )
    project = make_project(tmp_path / "project", pins=old)
    assert load_pins(project) == old
    assert "aarch64" not in (project / "image" / "fcos.pin").read_text()
    web.publish(PINS)
    result = pins(project, web, "--update")
    assert result.returncode == 0, result.stderr
    assert load_pins(project) == PINS
    assert load_pins(project).fcos.aarch64_sha256 == "8" * 64
    assert load_pins(project).k3s.aarch64_sha256 == "9" * 64
    for architecture in ("x86", "arm"):
        check_pins(project, load_pins(project), endpoints(web), architecture)


def test_the_arm_readers_take_the_aarch64_and_arm64_files(web: FakeWeb) -> None:
    web.publish(PINS)
    assert upstream_fcos_sha256(FCOS, web.fcos, "arm") == "8" * 64
    assert upstream_k3s_sha256(K3S.version, web.k3s_releases, "arm") == "9" * 64
    assert f"/fcos/prod/streams/stable/builds/{FCOS.version}/aarch64/meta.json" in web.paths()
    path = f"/k3s/releases/download/{K3S.version}/sha256sum-arm64.txt"
    web.files[path] = f"{'1' * 64}  k3s\n".encode()  # the amd64 name is not the arm64 binary
    with pytest.raises(ImageError, match="no line for the k3s-arm64 binary"):
        upstream_k3s_sha256(K3S.version, web.k3s_releases, "arm")


def test_check_pins_of_arm_compares_the_aarch64_values(project: Path, web: FakeWeb) -> None:
    web.publish(dataclasses.replace(PINS, k3s=dataclasses.replace(K3S, aarch64_sha256="7" * 64)))
    check_pins(project, PINS, endpoints(web), "x86")
    with pytest.raises(ImageError) as caught:
        check_pins(project, PINS, endpoints(web), "arm")
    assert str(caught.value) == (
        f"{project / 'image' / 'k3s.pin'}: aarch64_sha256 is {'9' * 64} but k3s "
        f"{K3S.version} arm64 is published with {'7' * 64}; not building"
    )


def test_latest_fcos_wants_both_architectures_of_one_release(web: FakeWeb) -> None:
    web.publish_fcos(NEW_FCOS)
    stream = web.files["/fcos/streams/stable.json"]
    web.files["/fcos/streams/stable.json"] = stream.replace(
        b'"release": "44.20260810.3.0", "formats": {"raw.xz": {"disk": {"location": "'
        + f"{web.url}/fcos/prod/streams/stable/builds/44.20260810.3.0/aarch64".encode(),
        b'"release": "44.20260811.3.0", "formats": {"raw.xz": {"disk": {"location": "'
        + f"{web.url}/fcos/prod/streams/stable/builds/44.20260811.3.0/aarch64".encode(),
    ).replace(b"44.20260810.3.0-hetzner.aarch64", b"44.20260811.3.0-hetzner.aarch64")
    assert web.files["/fcos/streams/stable.json"] != stream
    with pytest.raises(ImageError, match=r"aarch64 hetzner artifact is of release 44\.20260811"):
        latest_fcos("stable", web.fcos)


UNRECORDED = K3sSelinuxPin(K3S_SELINUX.version, None)
RPM = "k3s-selinux-1.6-1.coreos.noarch.rpm"  # v1.6.stable.1's, as its spec file names it


def test_update_records_the_k3s_selinux_sha256(tmp_path: Path, web: FakeWeb) -> None:
    """The committed pin names the release with no sha256 (none could be read where it was
    written): `--update` records the one GitHub publishes for its CoreOS RPM."""
    project = make_project(
        tmp_path / "project", pins=dataclasses.replace(PINS, k3s_selinux=UNRECORDED)
    )
    assert '"sha256": null' in (project / "image" / "k3s-selinux.pin").read_text()
    web.publish(PINS)
    result = pins(project, web, "--update")
    assert result.returncode == 0, result.stderr
    assert (
        f"image/k3s-selinux.pin: v1.6.stable.1 (sha256 not recorded) -> v1.6.stable.1 "
        f"(sha256 {'c' * 64})"
    ) in result.stdout
    assert load_pins(project).k3s_selinux == K3sSelinuxPin("v1.6.stable.1", "c" * 64)
    assert "/github/repos/k3s-io/k3s-selinux/releases/latest" in web.paths()
    check_pins(project, load_pins(project), endpoints(web))


def test_no_build_without_a_recorded_k3s_selinux_sha256(project: Path, web: FakeWeb) -> None:
    web.publish(PINS)
    with pytest.raises(ImageError) as caught:
        check_pins(project, dataclasses.replace(PINS, k3s_selinux=UNRECORDED), endpoints(web))
    assert str(caught.value) == (
        f"{project / 'image' / 'k3s-selinux.pin'}: no sha256 pinned for k3s-selinux "
        "v1.6.stable.1 k3s-selinux-1.6-1.coreos.noarch.rpm; `raya image pins --complete` adds it "
        "for the pinned release without moving it; not building"
    )


def test_check_pins_compares_the_k3s_selinux_rpm(project: Path, web: FakeWeb) -> None:
    web.publish(dataclasses.replace(PINS, k3s_selinux=K3sSelinuxPin("v1.6.stable.1", "e" * 64)))
    for architecture in ("x86", "arm"):  # one noarch RPM for both
        with pytest.raises(ImageError) as caught:
            check_pins(project, PINS, endpoints(web), architecture)
        assert (
            f"{project / 'image' / 'k3s-selinux.pin'}: sha256 is {'c' * 64} but k3s-selinux "
            f"v1.6.stable.1 k3s-selinux-1.6-1.coreos.noarch.rpm is published with {'e' * 64}"
        ) in str(caught.value)


def test_the_k3s_selinux_sha256_of_an_asset_without_digest_is_its_checksum_line(
    web: FakeWeb,
) -> None:
    """Assets uploaded before GitHub published digests: the release's checksum file."""
    web.publish_k3s_selinux(K3S_SELINUX, digest=False)
    assert latest_k3s_selinux(web.k3s_selinux_api) == K3S_SELINUX
    assert upstream_k3s_selinux_sha256("v1.6.stable.1", web.k3s_selinux_api) == "c" * 64
    checksums = (
        "/github/k3s-io/k3s-selinux/releases/download/v1.6.stable.1/sha256sum-coreos-noarch.txt"
    )
    assert checksums in web.paths()
    web.files[checksums] = f"{'1' * 64}  k3s-selinux-1.6-1.coreos.src.rpm\n".encode()
    with pytest.raises(ImageError, match=re.escape(f"no line for {RPM}")):
        upstream_k3s_selinux_sha256("v1.6.stable.1", web.k3s_selinux_api)


def test_a_k3s_selinux_release_must_publish_its_rpm_and_sha256(web: FakeWeb) -> None:
    web.publish_k3s_selinux(K3S_SELINUX, digest=False)
    api = "/github/repos/k3s-io/k3s-selinux/releases/tags/v1.6.stable.1"
    release = json.loads(web.files[api])
    rpms = [asset for asset in release["assets"] if "sha256sum" not in asset["name"]]
    web.serve_json(api, {**release, "assets": rpms})
    with pytest.raises(ImageError, match=re.escape(f"publishes no sha256 of {RPM}")):
        upstream_k3s_selinux_sha256("v1.6.stable.1", web.k3s_selinux_api)
    web.serve_json(api, {**release, "assets": []})
    with pytest.raises(ImageError, match=re.escape(f"has no asset {RPM}")):
        upstream_k3s_selinux_sha256("v1.6.stable.1", web.k3s_selinux_api)


@pytest.mark.parametrize("tag", ["v1.7.testing.3", "1.6.stable.1", "v1.6-rc1.stable.1"])
def test_latest_k3s_selinux_takes_only_a_stable_or_latest_tag(web: FakeWeb, tag: str) -> None:
    web.publish_k3s_selinux(K3S_SELINUX, tag=tag)
    with pytest.raises(ImageError, match=f"'{tag}' is not a k3s-selinux stable or latest tag"):
        latest_k3s_selinux(web.k3s_selinux_api)


# ---- `--complete`: the aarch64 sha256s of the pinned releases, no version moved ----

X86_ONLY = Pins(
    FcosPin(FCOS.stream, FCOS.version, FCOS.sha256), K3sPin(K3S.version, K3S.sha256), K3S_SELINUX
)


def publish_pinned_and_newer(web: FakeWeb) -> None:
    """Upstream as it is when an ARM pool is added: the pinned releases publish both
    architectures' files, and the stream and the stable channel have moved on."""
    web.publish_fcos(PINS.fcos, latest=False)
    web.publish_k3s(PINS.k3s, stable=False)
    web.publish(Pins(NEW_FCOS, NEW_K3S, K3S_SELINUX))


def test_complete_adds_the_aarch64_sha256s_of_the_pinned_releases(
    tmp_path: Path, web: FakeWeb
) -> None:
    project = make_project(tmp_path / "project", pins=X86_ONLY)
    publish_pinned_and_newer(web)
    before = snapshot(project)
    result = pins(project, web, "--complete")
    assert result.returncode == 0, result.stderr
    # The versions pinned, not the stream's 44.20260810.3.0 nor the channel's v1.36.6+k3s1.
    assert load_pins(project) == PINS
    assert load_pins(project).fcos.aarch64_sha256 == "8" * 64
    assert load_pins(project).k3s.aarch64_sha256 == "9" * 64
    assert (
        f"image/fcos.pin: stable {FCOS.version} (sha256 {FCOS.sha256}); aarch64_sha256 added: "
        f"{'8' * 64}"
    ) in result.stdout
    assert (
        f"image/k3s.pin: {K3S.version} (sha256 {K3S.sha256}); aarch64_sha256 added: {'9' * 64}"
    ) in result.stdout
    after = snapshot(project)
    for name, field, added in (("fcos.pin", "aarch64_sha256", "8" * 64),
                               ("k3s.pin", "aarch64_sha256", "9" * 64)):  # fmt: skip
        old, new = before[name][0].decode(), after[name][0].decode()
        # Every byte up to the x86 sha256 stays; the one field is added after it.
        assert new.startswith(old.removesuffix("\n}\n") + ",\n")
        assert json.loads(new) == {**json.loads(old), field: added}
    assert after["charts.pin"] == before["charts.pin"]
    # Only the pinned releases' own aarch64 files were read: no stream, no channel.
    assert sorted(web.paths()) == [
        f"/fcos/prod/streams/stable/builds/{FCOS.version}/aarch64/meta.json",
        f"/k3s/releases/download/{K3S.version}/sha256sum-arm64.txt",
    ]
    # What was written is what a build of each architecture verifies against upstream.
    for architecture in ("x86", "arm"):
        check_pins(project, load_pins(project), endpoints(web), architecture)


def test_complete_records_the_k3s_selinux_sha256_of_the_pinned_release(
    tmp_path: Path, web: FakeWeb
) -> None:
    """The committed k3s-selinux pin has no sha256: `--complete` reads the one of the pinned
    tag's RPM although a newer release is GitHub's latest, and moves nothing else."""
    project = make_project(
        tmp_path / "project", pins=dataclasses.replace(PINS, k3s_selinux=UNRECORDED)
    )
    web.publish_k3s_selinux(K3S_SELINUX, latest=False)
    web.publish_k3s_selinux(K3sSelinuxPin("v1.7.stable.1", "d" * 64))
    before = snapshot(project)
    result = pins(project, web, "--complete")
    assert result.returncode == 0, result.stderr
    assert load_pins(project) == PINS
    assert (
        f"image/k3s-selinux.pin: v1.6.stable.1 (sha256 not recorded); sha256 added: {'c' * 64}"
    ) in result.stdout
    after = snapshot(project)
    assert {name for name in after if after[name] != before[name]} == {"k3s-selinux.pin"}
    assert web.paths() == ["/github/repos/k3s-io/k3s-selinux/releases/tags/v1.6.stable.1"]
    web.publish(PINS)
    check_pins(project, load_pins(project), endpoints(web))


def test_complete_pins_are_left_alone_and_nothing_is_fetched(
    project: Path, web: FakeWeb
) -> None:
    before = snapshot(project)
    result = pins(project, web, "--complete")
    assert result.returncode == 0, result.stderr
    assert f"image/fcos.pin: complete, stable {FCOS.version} (sha256 {FCOS.sha256})" in (
        result.stdout
    )
    assert f"image/k3s.pin: complete, {K3S.version}" in result.stdout
    assert snapshot(project) == before
    assert web.requests == []


def test_complete_adds_only_what_one_pin_lacks(tmp_path: Path, web: FakeWeb) -> None:
    project = make_project(tmp_path / "project", pins=Pins(PINS.fcos, X86_ONLY.k3s, K3S_SELINUX))
    publish_pinned_and_newer(web)
    before = snapshot(project)
    result = pins(project, web, "--complete")
    assert result.returncode == 0, result.stderr
    after = snapshot(project)
    assert after["fcos.pin"] == before["fcos.pin"]  # bytes and modification time
    assert load_pins(project) == PINS
    assert web.paths() == [f"/k3s/releases/download/{K3S.version}/sha256sum-arm64.txt"]


META = f"/fcos/prod/streams/stable/builds/{FCOS.version}/aarch64/meta.json"
ARM64_SUMS = f"/k3s/releases/download/{K3S.version}/sha256sum-arm64.txt"


def _meta(web: FakeWeb, **fields: object) -> None:
    web.serve_json(META, {**json.loads(web.files[META]), **fields})


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (
            lambda web: _meta(web, buildid=NEW_FCOS.version),
            f"{META}: buildid is '{NEW_FCOS.version}', not '{FCOS.version}': not the metadata "
            "of the pinned release and architecture",
        ),
        (
            lambda web: _meta(web, **{"coreos-assembler.basearch": "x86_64"}),
            f"{META}: coreos-assembler.basearch is 'x86_64', not 'aarch64'",
        ),
        (
            lambda web: _meta(
                web,
                images={"hetzner": {"path": f"fedora-coreos-{NEW_FCOS.version}-hetzner."
                                            "aarch64.raw.xz", "sha256": "8" * 64}},
            ),
            f"{META}: the hetzner image is fedora-coreos-{NEW_FCOS.version}-hetzner.aarch64."
            f"raw.xz, not fedora-coreos-{FCOS.version}-hetzner.aarch64.raw.xz",
        ),
        (lambda web: web.files.pop(META), f"{META}: HTTP 404"),
        (lambda web: web.files.pop(ARM64_SUMS), f"{ARM64_SUMS}: HTTP 404"),
        (
            lambda web: web.files.update({ARM64_SUMS: f"{'9' * 64}  k3s\n".encode()}),
            f"{ARM64_SUMS}: no line for the k3s-arm64 binary",
        ),
    ],
    ids=["another-release", "another-architecture", "another-image", "no-fcos-metadata",
         "no-arm64-sums", "no-arm64-line"],
)  # fmt: skip
def test_complete_refuses_what_is_not_the_pinned_release_and_writes_nothing(
    tmp_path: Path, web: FakeWeb, spoil: Any, message: str
) -> None:
    """Every sha256 is read before any pin is written: a refusal of either leaves both pin
    files (and the charts') byte for byte and time for time as they were."""
    project = make_project(tmp_path / "project", pins=X86_ONLY)
    publish_pinned_and_newer(web)
    spoil(web)
    before = snapshot(project)
    result = pins(project, web, "--complete")
    assert result.returncode == 1
    assert message in result.stderr.replace("\n", "")
    assert "Traceback" not in result.stderr
    assert snapshot(project) == before


@pytest.mark.parametrize("other", [["--update"], ["--stream", "next"]])
def test_complete_with_a_move_is_a_usage_error(
    project: Path, web: FakeWeb, other: list[str]
) -> None:
    before = snapshot(project)
    result = pins(project, web, "--complete", *other)
    assert result.returncode == 2
    assert "--complete" in result.stderr and "one or the other" in result.stderr
    assert web.requests == [] and snapshot(project) == before


def test_complete_pins_unit(web: FakeWeb) -> None:
    """complete_pins keeps every pinned value and fills the aarch64 ones from the pinned
    releases, whatever newer releases upstream publishes."""
    publish_pinned_and_newer(web)
    assert complete_pins(X86_ONLY, endpoints(web)) == PINS
    assert complete_pins(PINS, endpoints(web)) == PINS


def test_unpinned_names_the_command_that_adds_the_missing_sha256(project: Path) -> None:
    assert unpinned(project, X86_ONLY, "x86") == ()
    assert unpinned(project, X86_ONLY, "arm") == (
        f"{project}/image/fcos.pin: no aarch64_sha256 pinned for FCOS {FCOS.version} aarch64; "
        "`raya image pins --complete` adds it for the pinned release without moving it",
        f"{project}/image/k3s.pin: no aarch64_sha256 pinned for k3s {K3S.version} arm64; "
        "`raya image pins --complete` adds it for the pinned release without moving it",
    )


def test_the_report_names_complete_for_pins_without_aarch64(tmp_path: Path, web: FakeWeb) -> None:
    """Same releases upstream, only the aarch64 sha256s missing: the report says the pins
    differ (--update would add them too) and names the fix that moves nothing."""
    project = make_project(tmp_path / "project", pins=X86_ONLY)
    web.publish(PINS)
    before = snapshot(project)
    result = pins(project, web)
    assert result.returncode == 0, result.stderr
    assert (
        f"{project}/image/fcos.pin: no aarch64_sha256 pinned for FCOS {FCOS.version} aarch64; "
        "`raya image pins --complete` adds it for the pinned release without moving it"
    ) in result.stdout
    assert f"{project}/image/k3s.pin: no aarch64_sha256 pinned for k3s" in result.stdout
    assert snapshot(project) == before
    result = pins(make_project(tmp_path / "complete"), web)
    assert "--complete" not in result.stdout


def test_check_pins_refuses_a_missing_aarch64_sha256_without_fetching_it(
    project: Path, web: FakeWeb
) -> None:
    """Nothing to compare is no match: check_pins (the build's last check before Packer)
    refuses pins without the architecture's sha256 on its own, naming --complete."""
    with pytest.raises(ImageError) as caught:
        check_pins(project, X86_ONLY, endpoints(web), "arm")
    assert str(caught.value) == "; ".join(unpinned(project, X86_ONLY, "arm")) + "; not building"
    assert web.requests == []
    web.publish(PINS)
    check_pins(project, X86_ONLY, endpoints(web), "x86")  # an x86 build needs nothing more
