"""Fixtures shared by the program, day-two and command tests."""

from __future__ import annotations

import base64
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from raya.cloud.program import GITHUB_URL_ENV
from raya.model.project import EXAMPLE_ROOT
from tests.cloud import hetzner_api as hetzner_standin
from tests.support import EXAMPLE_KEYS, REPO, http_server

TYPE_CHECKING = False
if TYPE_CHECKING:  # loaded by the fixtures that use them: boto3 and moto are slow to import
    from raya.operate.backups import Target
    from tests.operate.s3 import ObjectStorage


@dataclass
class HetznerApi:
    """Hetzner's server types on 127.0.0.1 (tests/cloud/hetzner_api.py): its API URL, and the
    names asked for."""

    url: str
    asked: list[str] = field(default_factory=list)


@pytest.fixture(scope="session")
def hetzner_api_server() -> Iterator[HetznerApi]:
    api = HetznerApi("")
    with http_server(lambda request: hetzner_standin.respond(request, api.asked)) as url:
        api.url = f"{url}/v1"
        yield api


@pytest.fixture
def hetzner_api(hetzner_api_server: HetznerApi, monkeypatch: pytest.MonkeyPatch) -> HetznerApi:
    """The Hetzner API `raya preview | up` ask where server types are sold, with its token."""
    monkeypatch.setenv("HCLOUD_ENDPOINT", hetzner_api_server.url)
    monkeypatch.setenv("HCLOUD_TOKEN", hetzner_standin.TOKEN)
    monkeypatch.setattr(hetzner_standin, "BUDGET", hetzner_standin.Budget())  # the test's own
    hetzner_api_server.asked.clear()
    return hetzner_api_server


@pytest.fixture
def project(tmp_path: Path, hetzner_api: HetznerApi) -> Path:
    """A raya project in its own folder: the example stack as `prod`, its fleet, the pins;
    Hetzner's API (`hetzner_api`) in the environment, as `raya up` reads it."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    # ...with the cluster's Hetzner token as `pulumi config set --secret` writes it (`secure:`;
    # here base64, what the engine model's secrets provider reads: tests/cloud/program/engine.py).
    token = base64.b64encode(b"hcloudTestToken0" * 4).decode()
    (root / "Pulumi.prod.yaml").write_text(
        (EXAMPLE_ROOT / "Pulumi.example.yaml").read_text()
        + f"  raya:clusterHcloudToken:\n    secure: {token}\n"
    )
    shutil.copytree(EXAMPLE_ROOT / "deploy", root / "deploy")
    shutil.copytree(
        REPO / "image", root / "image", ignore=shutil.ignore_patterns("*.hcl", "*.sh")
    )
    return root


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A GitHub serving the example users' keys pages (`EXAMPLE_KEYS`) to the program;
    yields the paths asked for."""
    asked: list[str] = []

    def keys_page(request: BaseHTTPRequestHandler) -> tuple[int, bytes]:
        asked.append(request.path)
        body = EXAMPLE_KEYS.get(request.path.removeprefix("/").removesuffix(".keys"))
        return (200, body.encode()) if body else (404, b"Not Found")

    with http_server(keys_page) as url:
        monkeypatch.setenv(GITHUB_URL_ENV, url)
        yield asked


@pytest.fixture(scope="session")
def s3() -> Iterator[ObjectStorage]:
    """GCS' S3 interop as production speaks to it (HTTPS, HMAC keys checked, IAM per call) on
    127.0.0.1, objects kept by moto's server behind it (tests/operate/s3.py)."""
    from tests.operate.s3 import s3_server

    with s3_server() as storage:
        yield storage


@pytest.fixture(autouse=True)
def backups_on_the_stand_in(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`raya up` ends by checking the writer's key against the stack's bucket
    (`raya.commands.deploy.check_backups`): in every test that bucket is one of the object
    storage stand-in's (started on first use), its key holding the writer's roles, in force;
    never storage.googleapis.com. A test of the check itself points it elsewhere."""

    def stand_in_bucket(root: Path, stack: str) -> Target:
        from raya.cloud.program.backups import BUCKET_ROLES
        from raya.operate.backups import Target
        from tests.operate.s3 import REGION

        storage: ObjectStorage = request.getfixturevalue("s3")
        bucket = f"up-{secrets.token_hex(6)}"
        storage.client().create_bucket(Bucket=bucket)
        access_key, secret_key = storage.writer(bucket, BUCKET_ROLES.values())
        return Target(endpoint=storage.endpoint, bucket=bucket, folder="raya", region=REGION,
                      access_key=access_key, secret_key=secret_key, token_hash="")  # fmt: skip

    monkeypatch.setattr("raya.commands.deploy.backup_target", stand_in_bucket)


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's cache, where raya remembers a failed download of the Pulumi CLI
    (`raya.cloud.deploy.install_stamp`), is each test's own: no test reads another's failure
    nor leaves one to the person running them."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
