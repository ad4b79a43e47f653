"""The pins (`image/fcos.pin`, `image/k3s.pin`, `image/k3s-selinux.pin`, `image/charts.pin`)
and the snapshot labels.

The pins are JSON so that the Packer template can read them with `jsondecode(file(...))`:
they are the one source of truth for the image build, its lookup and the pin updates. The
chart pins say which Helm chart versions the control plane's add-ons and the cluster
autoscaler install.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from raya.defaults import FCOS_STREAMS
from raya.errors import ConfigError
from raya.model.jsonfile import read_json

_SHA256 = re.compile(r"[0-9a-f]{64}")
# Versions go into download URLs and labels: ASCII digits only (Python's \d takes any script's).
_FCOS_VERSION = re.compile(r"\d+\.\d{8}\.\d+\.\d+", re.ASCII)
_K3S_VERSION = re.compile(r"v\d+\.\d+\.\d+\+k3s\d+", re.ASCII)
# k3s-selinux's release tags, v<version>.<channel>.<release> (its scripts/version): the stable
# and latest channels, whose RPMs are signed with rpm.rancher.io's key; not testing.
K3S_SELINUX_VERSION = re.compile(r"v(\d+\.\d+)\.(?:stable|latest)\.(\d+)", re.ASCII)
# A released (not pre-release) chart version: SemVer, with the `v` some repositories use.
CHART_VERSION = re.compile(r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)", re.ASCII)
# The charts raya installs, by the key their pin has in `charts.pin`.
CHART_NAMES = (
    "cert-manager",
    "external-dns",
    "hcloud-cloud-controller-manager",
    "hcloud-csi",
    "cluster-autoscaler",
)
# Hetzner label values: at most 63 characters, alphanumeric at both ends, `-_.` inside.
_LABEL_VALUE = re.compile(r"([a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?)?")


# Hetzner's architectures (as its images name them) and what FCOS and k3s call them.
FCOS_ARCHITECTURES = {"x86": "x86_64", "arm": "aarch64"}
K3S_ARCHITECTURES = {"x86": "amd64", "arm": "arm64"}
# The pins' optional field for the aarch64 artefact; `sha256` stays the x86 one, so pin files
# written before ARM support stay valid.
ARM_SHA256 = "aarch64_sha256"


@dataclass(frozen=True)
class FcosPin:
    stream: str
    version: str
    sha256: str  # the x86_64 Hetzner image
    aarch64_sha256: str | None = None  # the aarch64 one; None: not pinned, no ARM build

    def sha256_for(self, architecture: str) -> str | None:
        """The pinned sha256 of the artefact for Hetzner architecture `architecture`."""
        return self.sha256 if architecture == "x86" else self.aarch64_sha256


@dataclass(frozen=True)
class K3sPin:
    version: str
    sha256: str  # the amd64 binary
    aarch64_sha256: str | None = None  # the arm64 binary

    def sha256_for(self, architecture: str) -> str | None:
        return self.sha256 if architecture == "x86" else self.aarch64_sha256


@dataclass(frozen=True)
class K3sSelinuxPin:
    """k3s' SELinux policy: a k3s-selinux release, whose CoreOS RPM (noarch: one for every
    architecture) the image carries."""

    version: str  # the release's tag, e.g. v1.6.stable.1
    # sha256 of the RPM; None until `raya image pins --complete` records it (no build before).
    sha256: str | None

    @property
    def rpm(self) -> str:
        """The release's CoreOS RPM: <name>-<version>-<release>.coreos.noarch.rpm, as its
        spec file (policy/coreos/k3s-selinux.spec) names it from the tag."""
        found = K3S_SELINUX_VERSION.fullmatch(self.version)
        if not found:
            raise ValueError(f"{self.version!r} is not a k3s-selinux stable or latest tag")
        return f"k3s-selinux-{found[1]}-{found[2]}.coreos.noarch.rpm"


@dataclass(frozen=True)
class ChartPin:
    version: str
    # sha256 of the chart archive as the repository index publishes it; None until recorded.
    digest: str | None


@dataclass(frozen=True)
class ChartPins:
    cert_manager: ChartPin
    external_dns: ChartPin
    hcloud_ccm: ChartPin  # Hetzner's cloud controller manager: load balancers, node init
    hcloud_csi: ChartPin  # Hetzner's CSI driver: volumes
    # Kubernetes' cluster autoscaler, for the autoscaled pools (raya.nodes.autoscaler)
    cluster_autoscaler: ChartPin

    def by_name(self) -> dict[str, ChartPin]:
        return {
            "cert-manager": self.cert_manager,
            "external-dns": self.external_dns,
            "hcloud-cloud-controller-manager": self.hcloud_ccm,
            "hcloud-csi": self.hcloud_csi,
            "cluster-autoscaler": self.cluster_autoscaler,
        }

    @classmethod
    def from_names(cls, pins: dict[str, ChartPin]) -> ChartPins:
        """The pins from `by_name`'s mapping."""
        return cls(
            cert_manager=pins["cert-manager"],
            external_dns=pins["external-dns"],
            hcloud_ccm=pins["hcloud-cloud-controller-manager"],
            hcloud_csi=pins["hcloud-csi"],
            cluster_autoscaler=pins["cluster-autoscaler"],
        )


@dataclass(frozen=True)
class Pins:
    fcos: FcosPin
    k3s: K3sPin
    k3s_selinux: K3sSelinuxPin


def fcos_pin_path(root: Path) -> Path:
    return root / "image" / "fcos.pin"


def k3s_pin_path(root: Path) -> Path:
    return root / "image" / "k3s.pin"


def k3s_selinux_pin_path(root: Path) -> Path:
    return root / "image" / "k3s-selinux.pin"


def chart_pins_path(root: Path) -> Path:
    return root / "image" / "charts.pin"


def _read_object(path: Path, fields: tuple[str, ...]) -> dict[str, str]:
    return _fields(path, read_json(path, "pin", ConfigError), fields, optional=(ARM_SHA256,))


def _fields(
    path: Path,
    data: object,
    fields: tuple[str, ...],
    where: str = "",
    optional: tuple[str, ...] = (),
) -> dict[str, str]:
    """`data` as an object of exactly `fields` and maybe `optional`, all strings; `where`
    names it inside `path`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: {where}expected a JSON object with {', '.join(fields)}")
    accepted = (*fields, *optional)
    unknown = sorted(set(data) - set(accepted))
    if unknown:
        raise ConfigError(
            f"{path}: {where}unknown field(s) {', '.join(unknown)}; "
            f"accepted: {', '.join(accepted)}"
        )
    for field in (*fields, *(field for field in optional if field in data)):
        if not isinstance(data.get(field), str):
            raise ConfigError(f"{path}: {where}field '{field}' is required and must be a string")
    return data


def _check(path: Path, field: str, value: str, pattern: re.Pattern[str], accepted: str) -> None:
    if not pattern.fullmatch(value):
        raise ConfigError(f"{path}: field '{field}' is {value!r}; accepted: {accepted}")


def parse_fcos_pin(path: Path) -> FcosPin:
    data = _read_object(path, ("stream", "version", "sha256"))
    if data["stream"] not in FCOS_STREAMS:
        raise ConfigError(
            f"{path}: field 'stream' is {data['stream']!r}; accepted: {', '.join(FCOS_STREAMS)}"
        )
    _check(
        path, "version", data["version"], _FCOS_VERSION, "an FCOS version such as 44.20260720.3.1"
    )
    _check(path, "sha256", data["sha256"], _SHA256, "64 lowercase hex digits")
    return FcosPin(
        stream=data["stream"],
        version=data["version"],
        sha256=data["sha256"],
        aarch64_sha256=_arm_sha256(path, data),
    )


def parse_k3s_pin(path: Path) -> K3sPin:
    data = _read_object(path, ("version", "sha256"))
    _check(path, "version", data["version"], _K3S_VERSION, "a k3s release such as v1.36.5+k3s1")
    _check(path, "sha256", data["sha256"], _SHA256, "64 lowercase hex digits")
    return K3sPin(
        version=data["version"], sha256=data["sha256"], aarch64_sha256=_arm_sha256(path, data)
    )


def parse_k3s_selinux_pin(path: Path) -> K3sSelinuxPin:
    """`k3s-selinux.pin`: `{"version": <tag>, "sha256": ...}`; `sha256` may be null until
    `raya image pins --complete` records it."""
    data = read_json(path, "pin", ConfigError)
    unrecorded = isinstance(data, dict) and "sha256" in data and data["sha256"] is None
    if unrecorded and isinstance(data, dict):  # checked as text, kept as None
        data = {**data, "sha256": ""}
    fields = _fields(path, data, ("version", "sha256"))
    _check(
        path,
        "version",
        fields["version"],
        K3S_SELINUX_VERSION,
        "a k3s-selinux stable or latest release tag such as v1.6.stable.1",
    )
    if unrecorded:
        return K3sSelinuxPin(version=fields["version"], sha256=None)
    _check(path, "sha256", fields["sha256"], _SHA256, "64 lowercase hex digits or null")
    return K3sSelinuxPin(version=fields["version"], sha256=fields["sha256"])


def _arm_sha256(path: Path, data: dict[str, str]) -> str | None:
    if ARM_SHA256 not in data:
        return None
    _check(path, ARM_SHA256, data[ARM_SHA256], _SHA256, "64 lowercase hex digits")
    return data[ARM_SHA256]


def parse_chart_pins(path: Path) -> ChartPins:
    """`charts.pin`: `{"<chart>": {"version": ..., "digest": ...}, ...}` for each chart raya
    installs; `digest` may be null until `raya image pins --update` records it."""
    data = read_json(path, "pin", ConfigError)
    if not isinstance(data, dict) or sorted(data) != sorted(CHART_NAMES):
        found = ", ".join(sorted(data)) if isinstance(data, dict) else type(data).__name__
        raise ConfigError(
            f"{path}: expected a JSON object with exactly the charts {', '.join(CHART_NAMES)}; "
            f"found {found or 'none'}"
        )
    return ChartPins.from_names({name: _chart_pin(path, name, data[name]) for name in CHART_NAMES})


def _chart_pin(path: Path, name: str, entry: object) -> ChartPin:
    unrecorded = isinstance(entry, dict) and "digest" in entry and entry["digest"] is None
    if unrecorded and isinstance(entry, dict):  # checked as text, kept as None
        entry = {**entry, "digest": ""}
    fields = _fields(path, entry, ("version", "digest"), f"{name}: ")
    _check(
        path,
        f"{name}.version",
        fields["version"],
        CHART_VERSION,
        "a released chart version such as 1.19.0 or v1.19.1",
    )
    if unrecorded:
        return ChartPin(version=fields["version"], digest=None)
    _check(path, f"{name}.digest", fields["digest"], _SHA256, "64 lowercase hex digits")
    return ChartPin(version=fields["version"], digest=fields["digest"])


def load_chart_pins(root: Path) -> ChartPins:
    return parse_chart_pins(chart_pins_path(root))


def dump_chart_pins(pins: ChartPins) -> str:
    """The chart pin file's text: the same pins always give the same bytes."""
    document = {name: pin.__dict__ for name, pin in sorted(pins.by_name().items())}
    return json.dumps(document, indent=2) + "\n"


def load_pins(root: Path) -> Pins:
    return Pins(
        fcos=parse_fcos_pin(fcos_pin_path(root)),
        k3s=parse_k3s_pin(k3s_pin_path(root)),
        k3s_selinux=parse_k3s_selinux_pin(k3s_selinux_pin_path(root)),
    )


def dump_pin(pin: FcosPin | K3sPin | K3sSelinuxPin) -> str:
    """The pin file's text: the same pin always gives the same bytes (no aarch64 field when
    none is pinned, so a pin file without one keeps its bytes; k3s-selinux's unrecorded
    sha256 stays, as null)."""
    fields = {
        key: value
        for key, value in pin.__dict__.items()
        if value is not None or isinstance(pin, K3sSelinuxPin)
    }
    return json.dumps(fields, indent=2) + "\n"


def label_value(value: str) -> str:
    """A Hetzner label value for `value`; `+` (in k3s versions) is not accepted there."""
    converted = value.replace("+", "-")
    if not _LABEL_VALUE.fullmatch(converted):
        raise ConfigError(f"{value!r} cannot be a Hetzner label value (alphanumerics and -_. only)")
    return converted


def snapshot_labels(pins: Pins, cluster_name: str) -> dict[str, str]:
    """The labels the image build stamps on the snapshot and the deployment selects it by."""
    return {
        "managed_by": label_value(cluster_name),
        "os": "fcos",
        "fcos_stream": label_value(pins.fcos.stream),
        "fcos_version": label_value(pins.fcos.version),
        "k3s_version": label_value(pins.k3s.version),
        "k3s_selinux_version": label_value(pins.k3s_selinux.version),
    }


def label_selector(labels: dict[str, str]) -> str:
    """Hetzner's `label_selector` syntax for exactly these labels."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
