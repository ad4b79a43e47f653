"""Local stand-ins for the image pipeline's remotes: one HTTP server on 127.0.0.1 plays the FCOS
build server, k3s' channel server and release downloads, GitHub's API for k3s-selinux's
releases, and Hetzner's API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from raya.cloud.image import fcos_image_name
from raya.model.pins import (
    ChartPin,
    ChartPins,
    FcosPin,
    K3sPin,
    K3sSelinuxPin,
    Pins,
    dump_chart_pins,
    dump_pin,
)
from tests.cloud import hetzner_api
from tests.support import http_server

REPO = Path(__file__).resolve().parents[3]
IMAGE_DIR = REPO / "image"

FCOS = FcosPin(
    stream="stable", version="44.20260720.3.1", sha256="a" * 64, aarch64_sha256="8" * 64
)
K3S = K3sPin(version="v1.36.5+k3s1", sha256="b" * 64, aarch64_sha256="9" * 64)
K3S_SELINUX = K3sSelinuxPin(version="v1.6.stable.1", sha256="c" * 64)
PINS = Pins(fcos=FCOS, k3s=K3S, k3s_selinux=K3S_SELINUX)
CHARTS = ChartPins(
    cert_manager=ChartPin(version="v1.18.2", digest="1" * 64),
    external_dns=ChartPin(version="1.14.3", digest="2" * 64),
    hcloud_ccm=ChartPin(version="1.35.0", digest="6" * 64),
    hcloud_csi=ChartPin(version="2.22.1", digest="8" * 64),
    cluster_autoscaler=ChartPin(version="9.59.1", digest="d" * 64),
)
# The appVersion of the pinned autoscaler chart 9.59.1 (its Chart.yaml): the autoscaler it was
# made for, 1.35.0; raya runs 1.36.1 with it (raya.nodes.autoscaler.VERSION).
AUTOSCALER_APP = "1.35.0"


@dataclass
class Snapshot:
    id: int
    labels: dict[str, str]
    architecture: str = "x86"
    type: str = "snapshot"


@dataclass
class FakeWeb:
    """Serves `files` (path -> body), a fake `GET /v1/images` over `snapshots` and Hetzner's
    server types (tests/cloud/hetzner_api.py's catalogue)."""

    url: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    snapshots: list[Snapshot] = field(default_factory=list)
    requests: list[tuple[str, dict[str, list[str]], dict[str, str]]] = field(default_factory=list)

    @property
    def hcloud(self) -> str:
        return f"{self.url}/v1"

    @property
    def fcos(self) -> str:
        return f"{self.url}/fcos"

    @property
    def k3s_channels(self) -> str:
        return f"{self.url}/k3s/v1-release/channels"

    @property
    def k3s_releases(self) -> str:
        return f"{self.url}/k3s/releases/download"

    @property
    def k3s_selinux_api(self) -> str:
        return f"{self.url}/github/repos/k3s-io/k3s-selinux"

    @property
    def k3s_selinux_releases(self) -> str:
        return f"{self.url}/github/k3s-io/k3s-selinux/releases/download"

    @property
    def cert_manager_charts(self) -> str:
        return f"{self.url}/charts/jetstack"

    @property
    def external_dns_charts(self) -> str:
        return f"{self.url}/charts/external-dns/"  # a trailing slash, as the real one has

    @property
    def hetzner_charts(self) -> str:
        return f"{self.url}/charts/hetzner"

    @property
    def autoscaler_charts(self) -> str:
        return f"{self.url}/charts/autoscaler"

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.requests]

    def serve_json(self, path: str, data: Any) -> None:
        self.files[path] = json.dumps(data).encode()

    def publish_fcos(self, pin: FcosPin, *, latest: bool = True, meta_sha256: str = "") -> None:
        """The stream metadata (if `latest`) and build metadata of FCOS release `pin`, for
        x86_64 (`meta_sha256` replaces its published sha256) and aarch64 (as the real
        stream publishes both: `streams/stable.json`, `architectures.<arch>`).

        Each release keeps its own build metadata, whatever the stream moves on to:
        coreos-assembler's `meta.json` of each architecture, at
        `<builds>/prod/streams/<stream>/builds/<version>/<arch>/meta.json`
        (coreos/coreos-assembler `src/cmd-generate-release-meta`, `url_builder`: every
        artefact of a release is under `{stream_baseurl}/{stream}/builds/{version}/{arch}/`,
        `stream_baseurl` being https://builds.coreos.fedoraproject.org/prod/streams; its
        `append_build` takes the release from `buildid` and the architecture from
        `coreos-assembler.basearch`). Its fields follow coreos-assembler `src/v1.json`:
        `buildid`, `name`, `ostree-commit`, `ostree-timestamp` and `ostree-version`
        required; `images.<platform>` an artifact with `path` and `sha256` required, `size`
        and `uncompressed-sha256` optional; `sha256` is of the file at `path` (the
        compressed `.raw.xz`, as the stream's `disk.sha256` is)."""
        architectures = {}
        for architecture, fcos_arch, sha256 in (
            ("x86", "x86_64", meta_sha256 or pin.sha256),
            ("arm", "aarch64", pin.aarch64_sha256 or "0" * 64),
        ):
            build = f"/fcos/prod/streams/{pin.stream}/builds/{pin.version}/{fcos_arch}"
            name = fcos_image_name(pin.version, architecture)
            self.serve_json(
                f"{build}/meta.json",
                {
                    "buildid": pin.version,
                    "name": "fedora-coreos",
                    "ostree-commit": "e" * 64,
                    "ostree-timestamp": "2026-07-20T12:00:00Z",
                    "ostree-version": pin.version,
                    "coreos-assembler.basearch": fcos_arch,
                    "images": {
                        "hetzner": {
                            "path": name,
                            "sha256": sha256,
                            "size": 1,
                            "uncompressed-sha256": "d" * 64,
                        },
                        "metal": {"path": name.replace("hetzner", "metal"), "sha256": "c" * 64},
                    },
                },
            )
            disk = {
                "location": f"{self.url}{build}/{name}",
                "signature": f"{self.url}{build}/{name}.sig",
                "sha256": pin.sha256_for(architecture) or "0" * 64,
                "uncompressed-sha256": "d" * 64,
            }
            architectures[fcos_arch] = {
                "artifacts": {
                    "hetzner": {"release": pin.version, "formats": {"raw.xz": {"disk": disk}}},
                    "metal": {"release": pin.version, "formats": {}},
                }
            }
        if latest:
            self.serve_json(
                f"/fcos/streams/{pin.stream}.json",
                {
                    "stream": pin.stream,
                    "metadata": {"last-modified": "2026-07-21T00:00:00Z"},
                    "architectures": architectures,
                },
            )

    def publish_k3s(self, pin: K3sPin, *, stable: bool = True, listed_sha256: str = "") -> None:
        """k3s release `pin`'s checksum files, and the channels (stable -> pin if `stable`).

        A release publishes one checksum file per architecture beside its binaries, and keeps
        them once published: `releases/download/<tag>/sha256sum-<arch>.txt` with the binary
        `k3s` (amd64) or `k3s-<arch>` (k3s-io/k3s `install.sh`, `download_hash`: HASH_URL
        `${GITHUB_URL}/download/${VERSION_K3S}/sha256sum-${ARCH}.txt`, the hash on the line
        ending ` k3s${SUFFIX}`; `setup_verify_arch`: SUFFIX `-arm64` for arm64, none for
        amd64; `scripts/package-cli`: BIN_SUFFIX; `scripts/validate-artifacts`: a release's
        assets are k3s, k3s-arm64, k3s-armhf, the airgap image archives, k3s-images.txt and
        sha256sum-amd64.txt, sha256sum-arm.txt, sha256sum-arm64.txt). The files name no
        version: only their place under the tag says which release they are of."""
        self.files[f"/k3s/releases/download/{pin.version}/sha256sum-amd64.txt"] = (
            f"{'e' * 64}  k3s-airgap-images-amd64.tar.gz\n"
            f"{listed_sha256 or pin.sha256}  k3s\n"
            f"{'f' * 64}  k3s-images.txt\n"
        ).encode()
        # As k3s releases publish it: the arm64 binary is the asset `k3s-arm64`.
        self.files[f"/k3s/releases/download/{pin.version}/sha256sum-arm64.txt"] = (
            f"{'e' * 64}  k3s-airgap-images-arm64.tar.gz\n"
            f"{pin.aarch64_sha256 or '0' * 64}  k3s-arm64\n"
        ).encode()
        if stable:
            channel = "/k3s/v1-release/channels"
            self.serve_json(
                channel,
                {
                    "type": "collection",
                    "resourceType": "channels",
                    "data": [
                        {
                            "id": "latest",
                            "type": "channel",
                            "name": "latest",
                            "latest": "v9.9.9+k3s1",
                        },
                        {
                            "id": "stable",
                            "type": "channel",
                            "name": "stable",
                            "latest": pin.version,
                        },
                    ],
                },
            )

    def publish_k3s_selinux(
        self, pin: K3sSelinuxPin, *, latest: bool = True, digest: bool = True, tag: str = ""
    ) -> None:
        """k3s-selinux release `pin` as GitHub's REST API shows it: `GET /repos/{owner}/{repo}/
        releases/tags/{tag}`, and `.../releases/latest` (the newest release that is neither a
        draft nor a pre-release) if `latest`, under tag `tag` if given. Its assets are those
        the release pipeline uploads (every OS's noarch and source RPMs); each asset carries
        `digest`, `sha256:<hex>` (GitHub's, since 2025) if `digest`, else null, as on assets
        uploaded before, and then the release has the checksum file drone's github-release
        plugin wrote (`<hex>  <name>` lines; .drone.yml `checksum_file`)."""
        tag = tag or pin.version
        base = f"{self.url}/github/k3s-io/k3s-selinux/releases/download/{tag}"
        rpm = pin.rpm if tag == pin.version else "k3s-selinux-0.0-0.coreos.noarch.rpm"
        names = {
            rpm: pin.sha256 or "0" * 64,
            rpm.replace("noarch", "src"): "1" * 64,
            rpm.replace("coreos", "el9"): "2" * 64,
            rpm.replace("coreos", "sle"): "3" * 64,
        }
        assets = [
            {
                "name": name,
                "browser_download_url": f"{base}/{name}",
                "digest": f"sha256:{sha256}" if digest else None,
                "content_type": "application/x-rpm",
            }
            for name, sha256 in names.items()
        ]
        if not digest:
            checksums = "sha256sum-coreos-noarch.txt"
            listing = [f"{sha256}  {name}" for name, sha256 in names.items() if "coreos" in name]
            self.files[f"/github/k3s-io/k3s-selinux/releases/download/{tag}/{checksums}"] = (
                "\n".join(listing) + "\n"
            ).encode()
            assets.append(
                {"name": checksums, "browser_download_url": f"{base}/{checksums}", "digest": None}
            )
        release = {"tag_name": tag, "draft": False, "prerelease": False, "assets": assets}
        api = "/github/repos/k3s-io/k3s-selinux/releases"
        self.serve_json(f"{api}/tags/{tag}", release)
        if latest:
            self.serve_json(f"{api}/latest", release)

    def publish(self, pins: Pins, charts: ChartPins = CHARTS) -> None:
        self.publish_fcos(pins.fcos)
        self.publish_k3s(pins.k3s)
        self.publish_k3s_selinux(pins.k3s_selinux)
        self.publish_charts(charts)

    def publish_charts(self, charts: ChartPins) -> None:
        """Four Helm repository indexes, as `helm repo index` writes them: the newest release
        of each chart is `charts`' version; older releases (the project's pins among them)
        and a newer pre-release are listed too, the jetstack index holds another chart, and
        Hetzner's holds both of its charts, as https://charts.hetzner.cloud does. The
        autoscaler's releases carry the autoscaler they were made for as `appVersion` (its
        `Chart.yaml`: 9.59.1 is appVersion 1.35.0), and a newer release made for an
        autoscaler newer than raya's (10.0.0, appVersion 1.37.0) is listed too."""
        self.files.pop("/charts/hetzner/index.yaml", None)
        self.files.pop("/charts/autoscaler/index.yaml", None)
        self.publish_index(
            "/charts/autoscaler", "cluster-autoscaler", charts.cluster_autoscaler,
            CHARTS.cluster_autoscaler, app_version=AUTOSCALER_APP,
        )  # fmt: skip
        self.publish_index(
            "/charts/autoscaler", "cluster-autoscaler", ChartPin("10.0.0", "e" * 64),
            app_version="1.37.0",
        )  # fmt: skip
        for path, chart, newest, older in (
            ("/charts/jetstack", "cert-manager", charts.cert_manager, CHARTS.cert_manager),
            ("/charts/external-dns", "external-dns", charts.external_dns, CHARTS.external_dns),
            (
                "/charts/hetzner",
                "hcloud-cloud-controller-manager",
                charts.hcloud_ccm,
                CHARTS.hcloud_ccm,
            ),
            ("/charts/hetzner", "hcloud-csi", charts.hcloud_csi, CHARTS.hcloud_csi),
        ):
            self.publish_index(path, chart, newest, older)

    def publish_index(
        self,
        path: str,
        chart: str,
        newest: ChartPin,
        older: ChartPin | None = None,
        app_version: str | None = None,
    ) -> None:
        """`chart`'s releases in the index at `path` (another chart's kept, and this chart's
        earlier ones of another `app_version`); each release's `appVersion` is
        `app_version`, by default its own version."""

        def entry(name: str, version: str, digest: str | None) -> dict[str, Any]:
            return {
                "apiVersion": "v2",
                "appVersion": app_version or version,
                "created": "2026-07-01T00:00:00Z",
                **({"digest": digest} if digest is not None else {}),
                "name": name,
                "urls": [f"charts/{name}-{version}.tgz"],
                "version": version,
            }

        prefix = "v" if newest.version.startswith("v") else ""
        listed = [newest] + ([older] if older and older.version != newest.version else [])
        entries = {
            chart: [
                entry(chart, f"{prefix}99.0.0-alpha.1", "3" * 64),
                *(entry(chart, pin.version, pin.digest) for pin in listed),
                entry(chart, f"{prefix}0.9.0", "4" * 64),
            ]
        }
        if chart == "cert-manager":
            entries["trust-manager"] = [entry("trust-manager", "v999.0.0", "5" * 64)]
        published = self.files.get(f"{path}/index.yaml")  # another chart of that repository
        if published is not None:
            before = yaml.safe_load(published)["entries"]
            kept = [e for e in before.get(chart, []) if e["appVersion"] != (app_version or "")]
            if app_version and kept:  # this chart's releases of another appVersion
                entries[chart] = [*kept, *entries[chart]]
            entries = {**before, **entries}
        index = {"apiVersion": "v1", "entries": entries, "generated": "2026-07-01T00:00:00Z"}
        self.files[f"{path}/index.yaml"] = yaml.safe_dump(index).encode()

    def images(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """Hetzner's answer: the snapshots matching every `k=v` of the label selector."""
        wanted = dict(
            term.split("=", 1) for term in query.get("label_selector", [""])[0].split(",") if term
        )
        found = [
            snapshot
            for snapshot in self.snapshots
            if snapshot.labels.items() >= wanted.items()
            and snapshot.type in query.get("type", [snapshot.type])
            and snapshot.architecture in query.get("architecture", [snapshot.architecture])
        ]
        return {
            "images": [_image(snapshot) for snapshot in found],
            "meta": {
                "pagination": {
                    "page": 1,
                    "per_page": 50,
                    "previous_page": None,
                    "next_page": None,
                    "last_page": 1,
                    "total_entries": len(found),
                }
            },
        }

    def respond(self, request: BaseHTTPRequestHandler) -> tuple[int, bytes, str]:
        """The answer to `request`: Hetzner's API, or one of `files`."""
        parts = urlsplit(request.path)
        query = parse_qs(parts.query)
        self.requests.append((parts.path, query, dict(request.headers.items())))
        if parts.path == "/v1/images":
            if request.headers.get("Authorization") != "Bearer test-token":
                body = {"error": {"code": "unauthorized", "message": "unable to authenticate"}}
                return 401, json.dumps(body).encode(), "application/json"
            return 200, json.dumps(self.images(query)).encode(), "application/json"
        if parts.path == "/v1/server_types":  # Hetzner's catalogue, as raya preview reads it
            if request.headers.get("Authorization") != "Bearer test-token":
                body = {"error": {"code": "unauthorized", "message": "unable to authenticate"}}
                return 401, json.dumps(body).encode(), "application/json"
            return hetzner_api.server_types(request, [])
        if parts.path in self.files:
            return 200, self.files[parts.path], "application/octet-stream"
        return 404, b"not found\n", "text/plain"


def _image(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "id": snapshot.id,
        "type": snapshot.type,
        "status": "available",
        "name": None,
        "description": f"raya-fcos-{snapshot.id}",
        "image_size": 1.2,
        "disk_size": 40,
        "created": "2026-07-22T10:00:00+00:00",
        "created_from": {"id": 1, "name": "packer-1"},
        "bound_to": None,
        "os_flavor": "unknown",
        "os_version": None,
        "rapid_deploy": False,
        "protection": {"delete": False},
        "deprecated": None,
        "deleted": None,
        "labels": snapshot.labels,
        "architecture": snapshot.architecture,
    }


@pytest.fixture
def web() -> Iterator[FakeWeb]:
    fake = FakeWeb()
    with http_server(fake.respond) as url:
        fake.url = url
        yield fake


STACK = """\
config:
  raya:clusterName: {cluster}
  raya:location: {location}
  raya:authorizedUsers: [octo-alice]
  raya:managedSubdomain: raya
  raya:parentZone: example.com
  raya:acmeEmail: ops@example.org
"""


def make_project(
    root: Path,
    pins: Pins = PINS,
    cluster: str = "raya-test",
    charts: ChartPins = CHARTS,
    fleet: object = None,
    location: str = "hel1",
) -> Path:
    """A raya project: Pulumi.yaml, stack `test`, the real template, `pins` and the fleet
    (`fleet`, two x86 agents by default)."""
    (root / "image").mkdir(parents=True)
    (root / "deploy" / "fleet").mkdir(parents=True)
    (root / "deploy" / "fleet" / "agents.json").write_text(
        json.dumps({"agents": ["cx23", "cx23"]} if fleet is None else fleet)
    )
    (root / "Pulumi.yaml").write_text("name: raya\nruntime: python\n")
    (root / "Pulumi.test.yaml").write_text(STACK.format(cluster=cluster, location=location))
    for name in ("fcos.pkr.hcl", "install.sh"):
        (root / "image" / name).write_bytes((IMAGE_DIR / name).read_bytes())
    (root / "image" / "fcos.pin").write_text(dump_pin(pins.fcos))
    (root / "image" / "k3s.pin").write_text(dump_pin(pins.k3s))
    (root / "image" / "k3s-selinux.pin").write_text(dump_pin(pins.k3s_selinux))
    (root / "image" / "charts.pin").write_text(dump_chart_pins(charts))
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")
