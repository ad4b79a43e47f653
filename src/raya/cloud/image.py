"""The FCOS image: is its snapshot built, do its pins match upstream, building it, new pins.

The pins (`raya.model.pins`) decide everything: the snapshot's labels, the artifacts the Packer
template downloads and the checks made here. Every remote (Hetzner's API, the FCOS build
server, k3s' channel server and release downloads, k3s-selinux's releases on GitHub, the
add-ons' Helm chart repositories) is
an endpoint a caller can replace, so tests point them at local servers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from raya import __version__
from raya.defaults import (
    FCOS_BUILDS_URL,
    HCLOUD_API_URL,
    K3S_CHANNELS_URL,
    K3S_RELEASES_URL,
    K3S_SELINUX_API_URL,
    K3S_SELINUX_RELEASES_URL,
)
from raya.errors import ImageError
from raya.files import write_atomically
from raya.model.config import StackConfig
from raya.model.pins import (
    ARM_SHA256,
    CHART_VERSION,
    FCOS_ARCHITECTURES,
    K3S_ARCHITECTURES,
    K3S_SELINUX_VERSION,
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
)
from raya.nodes.addons import CERT_MANAGER, EXTERNAL_DNS, HCLOUD_CCM, HCLOUD_CSI
from raya.nodes.autoscaler import AUTOSCALER, VERSION

if TYPE_CHECKING:
    from hcloud import Client

K3S_CHANNEL = "stable"
# Architectures by Hetzner's names (`x86`, `arm`); FCOS and k3s name them their own way.
HCLOUD_ARCH = "x86"
ARM_ARCH = "arm"  # the one a pin may lack (pin files from before ARM support)
# What adds the checksums a pin lacks, for the release it pins.
COMPLETE_COMMAND = "raya image pins --complete"
# `packer init` and `required_plugins` arrived in Packer 1.7.
MIN_PACKER = (1, 7)
PACKER_INSTALL = (
    "install Packer >= 1.7 from HashiCorp: their apt repository "
    "(https://apt.releases.hashicorp.com, package `packer`) or a release zip from "
    "https://releases.hashicorp.com/packer/ unpacked onto PATH; Debian's own package is too old"
)
HTTP_TIMEOUT = 30.0
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Endpoints:
    """Where the upstream metadata and artifacts are published (base URLs, no trailing /)."""

    fcos_builds: str = FCOS_BUILDS_URL
    k3s_channels: str = K3S_CHANNELS_URL
    k3s_releases: str = K3S_RELEASES_URL
    k3s_selinux_releases: str = K3S_SELINUX_RELEASES_URL
    k3s_selinux_api: str = K3S_SELINUX_API_URL
    # The Helm chart repositories: the official ones, which the cluster itself fetches from.
    cert_manager_charts: str = CERT_MANAGER.repo
    external_dns_charts: str = EXTERNAL_DNS.repo
    hetzner_charts: str = HCLOUD_CCM.repo  # both of Hetzner's charts
    autoscaler_charts: str = AUTOSCALER.repo

    def __post_init__(self) -> None:
        for name in (
            "fcos_builds",
            "k3s_channels",
            "k3s_releases",
            "k3s_selinux_releases",
            "k3s_selinux_api",
            "cert_manager_charts",
            "external_dns_charts",
            "hetzner_charts",
            "autoscaler_charts",
        ):
            object.__setattr__(self, name, getattr(self, name).rstrip("/"))

    def chart_repositories(self) -> dict[str, str]:
        """Each chart's name -> the repository raya reads its releases from."""
        return {
            CERT_MANAGER.name: self.cert_manager_charts,
            EXTERNAL_DNS.name: self.external_dns_charts,
            HCLOUD_CCM.name: self.hetzner_charts,
            HCLOUD_CSI.name: self.hetzner_charts,
            AUTOSCALER.name: self.autoscaler_charts,
        }


# The charts whose releases raya takes only up to an `appVersion`: the autoscaler's. raya
# names the autoscaler's image itself (raya.nodes.autoscaler.VERSION); its chart is chosen
# for its templates, and one made for a newer autoscaler minor may pass flags that the one
# raya runs does not know (it then exits at start), so only charts whose appVersion is of
# that minor or an older one are taken (the newest of them: 9.59.x, made for 1.35, passes
# 1.36.1 nothing it refuses: `config/flags/flags.go` removed no flag between the two tags).
APP_VERSIONS = {AUTOSCALER.name: VERSION}
_MINOR = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?", re.ASCII)


def kubernetes_minor(version: str) -> tuple[int, int] | None:
    """`1.36` of a Kubernetes-numbered version (`v1.36.5+k3s1`, `1.36.1`), None if none."""
    found = _MINOR.fullmatch(version.strip())
    return (int(found[1]), int(found[2])) if found else None


def autoscaler_skew(root: Path, k3s: K3sPin) -> str | None:
    """What is wrong with k3s pinned at `k3s` for the cluster autoscaler raya runs: a
    Kubernetes minor other than the autoscaler's (its README, "Releases": the autoscaler of
    the cluster's minor; it simulates that minor's scheduler), naming the constant to move;
    None when they agree."""
    ours, theirs = kubernetes_minor(VERSION), kubernetes_minor(k3s.version)
    if ours is None or theirs is None or ours == theirs:
        return None
    return (
        f"{k3s_pin_path(root)}: k3s {k3s.version} is Kubernetes {theirs[0]}.{theirs[1]}, but "
        f"the cluster autoscaler raya runs for autoscaled pools is {VERSION}, made for "
        f"Kubernetes {ours[0]}.{ours[1]} (raya.nodes.autoscaler.VERSION): move VERSION to the "
        f"newest cluster-autoscaler-{theirs[0]}.{theirs[1]}.x release (and check its flags "
        "against the pinned chart's templates) before deploying a cluster with an "
        "autoscaled pool on this k3s"
    )


@dataclass(frozen=True)
class Snapshot:
    id: int
    description: str
    status: str
    created: str


AnyPin = FcosPin | K3sPin | K3sSelinuxPin | ChartPins


@dataclass(frozen=True)
class PinChange:
    path: Path
    old: AnyPin
    new: AnyPin

    @property
    def changed(self) -> bool:
        return self.old != self.new


def template_path(root: Path) -> Path:
    return root / "image" / "fcos.pkr.hcl"


# The Packer template derives the same URLs from the same pins; a test holds them equal.
def fcos_image_name(version: str, architecture: str = HCLOUD_ARCH) -> str:
    return f"fedora-coreos-{version}-hetzner.{FCOS_ARCHITECTURES[architecture]}.raw.xz"


def fcos_build_url(builds_url: str, pin: FcosPin, architecture: str = HCLOUD_ARCH) -> str:
    fcos_arch = FCOS_ARCHITECTURES[architecture]
    return f"{builds_url}/prod/streams/{pin.stream}/builds/{pin.version}/{fcos_arch}"


def fcos_image_url(builds_url: str, pin: FcosPin, architecture: str = HCLOUD_ARCH) -> str:
    image = fcos_image_name(pin.version, architecture)
    return f"{fcos_build_url(builds_url, pin, architecture)}/{image}"


def k3s_binary_name(architecture: str) -> str:
    """k3s' release asset: `k3s` for amd64, `k3s-arm64` for arm64."""
    return "k3s" if architecture == HCLOUD_ARCH else f"k3s-{K3S_ARCHITECTURES[architecture]}"


def k3s_binary_url(releases_url: str, version: str, architecture: str = HCLOUD_ARCH) -> str:
    return f"{releases_url}/{version}/{k3s_binary_name(architecture)}"


def k3s_checksums_url(releases_url: str, version: str, architecture: str = HCLOUD_ARCH) -> str:
    return f"{releases_url}/{version}/sha256sum-{K3S_ARCHITECTURES[architecture]}.txt"


def k3s_selinux_rpm_url(releases_url: str, pin: K3sSelinuxPin) -> str:
    return f"{releases_url}/{pin.version}/{pin.rpm}"


def _fetch(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": f"raya/{__version__}"})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as error:
        raise ImageError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ImageError(f"{url}: cannot be fetched: {reason}") from None


def _fetch_json(url: str) -> Any:
    try:
        return json.loads(_fetch(url))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ImageError(f"{url}: not JSON: {error}") from None


def _text(data: Any, path: Sequence[str], url: str) -> str:
    """The string at `path` in `data`, or an error saying the upstream format changed."""
    value = data
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, str):
        raise ImageError(f"{url}: no string at {'.'.join(path)} (has the format changed?)")
    return value


def _sha256(value: str, where: str) -> str:
    if not _SHA256.fullmatch(value):
        raise ImageError(f"{where}: sha256 {value!r} is not 64 lowercase hex digits")
    return value


def latest_fcos(stream: str, builds_url: str = FCOS_BUILDS_URL) -> FcosPin:
    """The newest release of `stream`: its Hetzner `raw.xz` artifacts (x86_64 and aarch64),
    from the stream metadata."""
    url = f"{builds_url}/streams/{stream}.json"
    data = _fetch_json(url)
    found: dict[str, tuple[str, str]] = {}  # architecture -> release, sha256
    for architecture, fcos_arch in FCOS_ARCHITECTURES.items():
        artifact = ("architectures", fcos_arch, "artifacts", "hetzner")
        disk = (*artifact, "formats", "raw.xz", "disk")
        release = _text(data, (*artifact, "release"), url)
        found[architecture] = release, _sha256(_text(data, (*disk, "sha256"), url), url)
        location = _text(data, (*disk, "location"), url)
        expected = fcos_image_url(builds_url, FcosPin(stream, release, ""), architecture)
        if location != expected:
            raise ImageError(
                f"{url}: the {fcos_arch} hetzner raw.xz artifact is at {location}, "
                f"not at {expected} where the Packer template downloads it from"
            )
    (version, x86), (arm_version, arm) = found["x86"], found["arm"]
    if arm_version != version:
        raise ImageError(
            f"{url}: the aarch64 hetzner artifact is of release {arm_version}, the x86_64 one "
            f"of {version}; one pin holds both, so wait for the stream to agree"
        )
    return FcosPin(stream=stream, version=version, sha256=x86, aarch64_sha256=arm)


def upstream_fcos_sha256(
    pin: FcosPin, builds_url: str = FCOS_BUILDS_URL, architecture: str = HCLOUD_ARCH
) -> str:
    """The sha256 of the pinned release's Hetzner image for `architecture`, from the build
    metadata of that release (coreos-assembler's `meta.json`), never the stream's newest.
    The metadata must be of the pinned release (`buildid`) and architecture
    (`coreos-assembler.basearch`), as coreos-assembler's `cmd-generate-release-meta` reads
    them into the release's `release` and architecture."""
    url = f"{fcos_build_url(builds_url, pin, architecture)}/meta.json"
    data = _fetch_json(url)
    fcos_arch = FCOS_ARCHITECTURES[architecture]
    for field, expected in (("buildid", pin.version), ("coreos-assembler.basearch", fcos_arch)):
        found = _text(data, (field,), url)
        if found != expected:
            raise ImageError(
                f"{url}: {field} is {found!r}, not {expected!r}: not the metadata of the "
                "pinned release and architecture"
            )
    path = _text(data, ("images", "hetzner", "path"), url)
    expected = fcos_image_name(pin.version, architecture)
    if path != expected:
        raise ImageError(
            f"{url}: the hetzner image is {path}, not {expected} which the Packer template "
            "downloads"
        )
    return _sha256(_text(data, ("images", "hetzner", "sha256"), url), url)


def latest_k3s(channels_url: str = K3S_CHANNELS_URL, channel: str = K3S_CHANNEL) -> str:
    """The version k3s' release channel `channel` currently points at."""
    data = _fetch_json(channels_url)
    entries = data.get("data") if isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and entry.get("id") == channel:
            return _text(entry, ("latest",), channels_url)
    raise ImageError(f"{channels_url}: no channel {channel!r} in data[]")


def upstream_k3s_sha256(
    version: str, releases_url: str = K3S_RELEASES_URL, architecture: str = HCLOUD_ARCH
) -> str:
    """The sha256 of release `version`'s binary for `architecture` (`k3s` for amd64,
    `k3s-arm64`), from its `sha256sum-<amd64|arm64>.txt`."""
    url = k3s_checksums_url(releases_url, version, architecture)
    binary = k3s_binary_name(architecture)
    for line in _fetch(url).decode("utf-8", "replace").splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1] == binary:
            return _sha256(fields[0], url)
    raise ImageError(f"{url}: no line for the {binary} binary")


# The checksum file k3s-selinux's release pipeline attached to its releases (drone's
# github-release plugin, `checksum_file: CHECKSUMsum-coreos-noarch.txt`, CHECKSUM -> sha256),
# for assets GitHub publishes no digest of.
K3S_SELINUX_CHECKSUMS = "sha256sum-coreos-noarch.txt"


def _k3s_selinux_sha256(release: Any, url: str, pin: K3sSelinuxPin) -> str:
    """The sha256 of `pin`'s CoreOS RPM in `release` (GitHub's release object, read from
    `url`): the asset's `digest` (`sha256:<hex>`), else its line in the release's checksum
    file."""
    assets = release.get("assets") if isinstance(release, dict) else None
    by_name = {
        asset.get("name"): asset
        for asset in (assets if isinstance(assets, list) else ())
        if isinstance(asset, dict)
    }
    asset = by_name.get(pin.rpm)
    if asset is None:
        raise ImageError(f"{url}: release {pin.version} has no asset {pin.rpm}")
    digest = asset.get("digest")
    if isinstance(digest, str) and digest.startswith("sha256:"):
        return _sha256(digest.removeprefix("sha256:"), f"{url}: {pin.rpm} digest")
    checksums = by_name.get(K3S_SELINUX_CHECKSUMS)
    if checksums is None:
        raise ImageError(
            f"{url}: release {pin.version} publishes no sha256 of {pin.rpm}: no digest and "
            f"no {K3S_SELINUX_CHECKSUMS}"
        )
    listing = _text(checksums, ("browser_download_url",), url)
    for line in _fetch(listing).decode("utf-8", "replace").splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].rsplit("/", 1)[-1] == pin.rpm:
            return _sha256(fields[0], listing)
    raise ImageError(f"{listing}: no line for {pin.rpm}")


def upstream_k3s_selinux_sha256(version: str, api_url: str = K3S_SELINUX_API_URL) -> str:
    """The sha256 of k3s-selinux release `version`'s CoreOS RPM, as GitHub publishes it."""
    url = f"{api_url}/releases/tags/{version}"
    return _k3s_selinux_sha256(_fetch_json(url), url, K3sSelinuxPin(version, None))


def latest_k3s_selinux(api_url: str = K3S_SELINUX_API_URL) -> K3sSelinuxPin:
    """The release GitHub calls k3s-selinux's latest (the newest that is neither a draft nor
    a pre-release: what k3s' install.sh installs for its stable channel), with its RPM's
    sha256."""
    url = f"{api_url}/releases/latest"
    release = _fetch_json(url)
    version = _text(release, ("tag_name",), url)
    if not K3S_SELINUX_VERSION.fullmatch(version):
        raise ImageError(f"{url}: {version!r} is not a k3s-selinux stable or latest tag")
    pin = K3sSelinuxPin(version, None)
    return K3sSelinuxPin(version, _k3s_selinux_sha256(release, url, pin))


def _release(version: str) -> tuple[int, int, int] | None:
    """A released chart version as numbers, None for a pre-release or anything else."""
    found = CHART_VERSION.fullmatch(version)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def chart_releases(
    chart: str, repo_url: str, app_version: str | None = None
) -> dict[str, str | None]:
    """Every released version of `chart` in the Helm repository at `repo_url` (of those, if
    `app_version` is given, the ones whose `appVersion` is of its Kubernetes minor or an
    older one), with the digest (sha256 of the chart archive) its `index.yaml` publishes for
    it, None where it has none."""
    url = f"{repo_url}/index.yaml"
    try:
        index = yaml.load(_fetch(url), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        raise ImageError(f"{url}: not a Helm repository index: {error}") from None
    entries = index.get("entries") if isinstance(index, dict) else None
    listed = entries.get(chart) if isinstance(entries, dict) else None
    if not isinstance(listed, list):
        raise ImageError(f"{url}: no chart {chart!r} under entries (is it the right repository?)")
    newest_app = None if app_version is None else kubernetes_minor(app_version)
    releases: dict[str, str | None] = {}
    for entry in listed:
        if not isinstance(entry, dict):
            continue
        version = entry.get("version")
        made_for = kubernetes_minor(str(entry.get("appVersion", "")))
        if newest_app is not None and (made_for is None or made_for > newest_app):
            continue
        if isinstance(version, str) and _release(version) is not None:
            digest = entry.get("digest")
            where = f"{url}: {chart} {version}"
            releases[version] = None if digest is None else _sha256(str(digest), where)
    if not releases:
        raise ImageError(f"{url}: chart {chart!r} has no released version{_of(app_version)}")
    return releases


def _of(app_version: str | None) -> str:
    """How `chart_releases` narrows a chart's releases, in words."""
    minor = None if app_version is None else kubernetes_minor(app_version)
    return "" if minor is None else f" of appVersion {minor[0]}.{minor[1]} or older"


def newest_chart(releases: Mapping[str, str | None]) -> ChartPin:
    version = max(releases, key=lambda version: _release(version) or (0, 0, 0))
    return ChartPin(version=version, digest=releases[version])


def chart_updates(
    root: Path, current: ChartPins, endpoints: Endpoints
) -> tuple[ChartPins, tuple[str, ...]]:
    """The newest release of each chart (of the autoscaler's, the newest made for its minor
    or an older one, `APP_VERSIONS`), and what is wrong with the current pins: a pinned
    version the repository no longer lists (or lists for a newer autoscaler), or lists with
    another digest than the pin's."""
    latest, problems = {}, []
    for chart, repo_url in endpoints.chart_repositories().items():
        app_version = APP_VERSIONS.get(chart)
        releases = chart_releases(chart, repo_url, app_version)
        latest[chart] = newest_chart(releases)
        pin = current.by_name()[chart]
        index = f"{repo_url}/index.yaml"
        if pin.version not in releases:
            problems.append(
                f"{chart} {pin.version} is pinned but not listed{_of(app_version)} in {index}"
            )
        elif pin.digest is not None and releases[pin.version] != pin.digest:
            problems.append(
                f"{chart} {pin.version} is pinned with sha256 {pin.digest} but {index} "
                f"publishes {releases[pin.version]}"
            )
    path = chart_pins_path(root)
    return (
        ChartPins.from_names(latest),
        tuple(f"{path}: {problem}" for problem in problems),
    )


def latest_pins(stream: str, endpoints: Endpoints) -> Pins:
    version = latest_k3s(endpoints.k3s_channels)
    k3s = {
        architecture: upstream_k3s_sha256(version, endpoints.k3s_releases, architecture)
        for architecture in K3S_ARCHITECTURES
    }
    return Pins(
        fcos=latest_fcos(stream, endpoints.fcos_builds),
        k3s=K3sPin(version=version, sha256=k3s["x86"], aarch64_sha256=k3s["arm"]),
        k3s_selinux=latest_k3s_selinux(endpoints.k3s_selinux_api),
    )


def check_pins(
    root: Path, pins: Pins, endpoints: Endpoints, architecture: str = HCLOUD_ARCH
) -> None:
    """Raise if a pinned sha256 of `architecture`'s artefacts (and of the noarch k3s-selinux
    RPM) is missing or differs from what upstream publishes for that release."""
    if missing := unpinned(root, pins, architecture):
        raise ImageError("; ".join(missing) + "; not building")
    problems: list[str] = []

    def compare(
        path: Path,
        what: str,
        pinned: str | None,
        upstream: Callable[[], str],
        field: str = _sha256_field(architecture),
    ) -> None:
        if pinned is not None and (published := upstream()) != pinned:
            problems.append(f"{path}: {field} is {pinned} but {what} is published with {published}")

    compare(
        fcos_pin_path(root),
        f"FCOS {pins.fcos.version} {FCOS_ARCHITECTURES[architecture]}",
        pins.fcos.sha256_for(architecture),
        lambda: upstream_fcos_sha256(pins.fcos, endpoints.fcos_builds, architecture),
    )
    compare(
        k3s_pin_path(root),
        f"k3s {pins.k3s.version} {K3S_ARCHITECTURES[architecture]}",
        pins.k3s.sha256_for(architecture),
        lambda: upstream_k3s_sha256(pins.k3s.version, endpoints.k3s_releases, architecture),
    )
    compare(
        k3s_selinux_pin_path(root),
        f"k3s-selinux {pins.k3s_selinux.version} {pins.k3s_selinux.rpm}",
        pins.k3s_selinux.sha256,
        lambda: upstream_k3s_selinux_sha256(pins.k3s_selinux.version, endpoints.k3s_selinux_api),
        "sha256",
    )
    if problems:
        raise ImageError("; ".join(problems) + "; not building")


def _sha256_field(architecture: str) -> str:
    """The pin files' field holding the sha256 of `architecture`'s artefact."""
    return "sha256" if architecture == HCLOUD_ARCH else ARM_SHA256


def unpinned(root: Path, pins: Pins, architecture: str) -> tuple[str, ...]:
    """One line per pin file that has no sha256 for `architecture`'s artefact (pin files from
    before ARM support have none for arm) or for the noarch k3s-selinux RPM (a pin written by
    hand before its release was read), naming the command that adds it."""
    field = _sha256_field(architecture)
    return tuple(
        f"{path}: no {field} pinned for {what}; `{COMPLETE_COMMAND}` "
        "adds it for the pinned release without moving it"
        for path, field, what, pinned in (
            (
                fcos_pin_path(root),
                field,
                f"FCOS {pins.fcos.version} {FCOS_ARCHITECTURES[architecture]}",
                pins.fcos.sha256_for(architecture),
            ),
            (
                k3s_pin_path(root),
                field,
                f"k3s {pins.k3s.version} {K3S_ARCHITECTURES[architecture]}",
                pins.k3s.sha256_for(architecture),
            ),
            (
                k3s_selinux_pin_path(root),
                "sha256",
                f"k3s-selinux {pins.k3s_selinux.version} {pins.k3s_selinux.rpm}",
                pins.k3s_selinux.sha256,
            ),
        )
        if pinned is None
    )


def complete_pins(pins: Pins, endpoints: Endpoints) -> Pins:
    """`pins` with the sha256s they lack (aarch64's, k3s-selinux's RPM's), read from the
    upstream files of the pinned releases themselves (FCOS' build metadata of that version,
    k3s' `sha256sum-arm64.txt` of that tag, GitHub's release of that k3s-selinux tag): no
    version moves, and what is pinned stays as it is."""
    fcos, k3s, selinux = pins.fcos, pins.k3s, pins.k3s_selinux
    if fcos.aarch64_sha256 is None:
        arm = upstream_fcos_sha256(fcos, endpoints.fcos_builds, ARM_ARCH)
        fcos = dataclasses.replace(fcos, aarch64_sha256=arm)
    if k3s.aarch64_sha256 is None:
        arm = upstream_k3s_sha256(k3s.version, endpoints.k3s_releases, ARM_ARCH)
        k3s = dataclasses.replace(k3s, aarch64_sha256=arm)
    if selinux.sha256 is None:
        rpm = upstream_k3s_selinux_sha256(selinux.version, endpoints.k3s_selinux_api)
        selinux = dataclasses.replace(selinux, sha256=rpm)
    return Pins(fcos=fcos, k3s=k3s, k3s_selinux=selinux)


def pin_changes(root: Path, current: Pins, latest: Pins) -> tuple[PinChange, ...]:
    return (
        PinChange(fcos_pin_path(root), current.fcos, latest.fcos),
        PinChange(k3s_pin_path(root), current.k3s, latest.k3s),
        PinChange(k3s_selinux_pin_path(root), current.k3s_selinux, latest.k3s_selinux),
    )


def write_pins(changes: Sequence[PinChange]) -> None:
    """Rewrite the pin files that changed, each atomically; the others keep their bytes."""
    for change in changes:
        if change.changed:
            new = change.new
            text = dump_chart_pins(new) if isinstance(new, ChartPins) else dump_pin(new)
            try:
                write_atomically(change.path, text.encode(), 0o644)
            except OSError as error:
                raise ImageError(f"{change.path}: cannot write the pin: {error.strerror}") from None


def hcloud_client(token: str, endpoint: str, timeout: float = HTTP_TIMEOUT) -> Client:
    """The Hetzner Cloud API at `endpoint`, raya naming itself to it, waiting when it
    answers 429 until its budget has a request again (raya.cloud.ratelimit)."""
    # Imported here: hcloud (and requests) cost every command that imports this module
    # a fifth of a second of start-up.
    from hcloud import Client

    from raya.cloud.ratelimit import RateLimited

    client = Client(
        token=token,
        api_endpoint=endpoint,
        application_name="raya",
        application_version=__version__,
        timeout=timeout,
    )
    # hcloud-python takes no session nor adapter: its ClientBase (2.27) makes one session
    # and sends every request through it, so the adapter mounted there sees each answer.
    client._client._session.mount(endpoint, RateLimited())
    return client


def find_snapshots(
    token: str,
    labels: Mapping[str, str],
    endpoint: str = HCLOUD_API_URL,
    architecture: str = HCLOUD_ARCH,
) -> tuple[Snapshot, ...]:
    """The snapshots of `architecture` carrying exactly these labels, oldest first."""
    import requests
    from hcloud import HCloudException

    client = hcloud_client(token, endpoint)
    try:
        images = client.images.get_all(
            type=["snapshot"],
            label_selector=label_selector(dict(labels)),
            architecture=[architecture],
        )
    except (HCloudException, requests.RequestException) as error:
        raise ImageError(f"Hetzner API {endpoint}: {error}") from None
    snapshots = (
        Snapshot(
            id=int(image.id or 0),
            description=image.description or "",
            status=image.status or "",
            created=image.created.isoformat() if image.created else "",
        )
        for image in images
    )
    return tuple(sorted(snapshots, key=lambda snapshot: snapshot.id))


def find_packer() -> str:
    """The `packer` on PATH, if it is recent enough for the hcloud plugin."""
    packer = shutil.which("packer")
    if packer is None:
        raise ImageError(f"packer is not on PATH: {PACKER_INSTALL}")
    try:
        result = subprocess.run(
            [packer, "version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ImageError(f"{packer} version: {error}") from None
    found = re.search(r"Packer v(?P<version>(\d+)\.(\d+)\.\d+)", result.stdout)
    if result.returncode != 0 or not found:
        raise ImageError(f"{packer} version: not Packer's answer: {result.stdout.strip()!r}")
    if (int(found.group(2)), int(found.group(3))) < MIN_PACKER:
        raise ImageError(f"{packer} is Packer {found['version']}, too old: {PACKER_INSTALL}")
    return packer


def packer_variables(
    config: StackConfig,
    endpoints: Endpoints,
    location: str,
    server_type: str,
    architecture: str = HCLOUD_ARCH,
) -> dict[str, str]:
    """The template's variables: the cluster (its label), the architecture to build, the
    build server's location and type (raya.cloud.catalogue.build_type) and where the
    artifacts come from."""
    return {
        "architecture": architecture,
        "cluster_name": config.cluster_name,
        "location": location,
        "server_type": server_type,
        "fcos_builds_url": endpoints.fcos_builds,
        "k3s_releases_url": endpoints.k3s_releases,
        "k3s_selinux_releases_url": endpoints.k3s_selinux_releases,
    }


def packer_commands(
    packer: str, template: Path, variables: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """`packer init` (installs the hcloud plugin) and `packer build`, in that order."""
    flags = [arg for name in sorted(variables) for arg in ("-var", f"{name}={variables[name]}")]
    return [packer, "init", str(template)], [packer, "build", *flags, str(template)]


def packer_environment(token: str, endpoint: str) -> dict[str, str]:
    """Packer's hcloud plugin reads the token and API endpoint from these variables."""
    return dict(os.environ, HCLOUD_TOKEN=token, HCLOUD_ENDPOINT=endpoint)


def run_packer(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> None:
    """Run Packer with the terminal as its output (it streams); raise if it fails."""
    try:
        result = subprocess.run(list(argv), env=dict(env), cwd=cwd, check=False)
    except OSError as error:
        raise ImageError(f"{argv[0]}: {error}") from None
    if result.returncode != 0:
        raise ImageError(
            f"`packer {argv[1]}` failed with exit status {result.returncode}; "
            "its output above says why"
        )
