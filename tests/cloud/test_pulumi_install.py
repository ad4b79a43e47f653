"""A failed download of the Pulumi CLI is remembered for a while (issue 36): the SDK's own
installer (pulumi `sdk/python/lib/pulumi/automation/_cmd.py`, `PulumiCommand.install`, which
fetches https://get.pulumi.com/install.sh and runs it with `--install-root`) runs against a
server on 127.0.0.1 standing in for get.pulumi.com."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto
from pulumi._version import version as sdk_version

from raya.cloud import deploy
from raya.errors import DeployError
from tests.support import http_server

# install.sh as get.pulumi.com's does it, reduced to what the SDK asks of it: a `pulumi`
# under `<install-root>/bin` that answers `pulumi version` with the SDK's version.
INSTALL_SH = f"""#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --install-root ] && root=$2; shift; done
mkdir -p "$root/bin"
printf '#!/bin/sh\\necho v{sdk_version}\\n' > "$root/bin/pulumi"
chmod 755 "$root/bin/pulumi"
""".encode()


class GetPulumi:
    """get.pulumi.com: answers each request with the next of `answers` (a status code)."""

    def __init__(self) -> None:
        self.answers: list[int] = []
        self.requests: list[str] = []

    def respond(self, request: BaseHTTPRequestHandler) -> tuple[int, bytes]:
        self.requests.append(request.path)
        status = self.answers.pop(0)
        return status, INSTALL_SH if status == 200 else b"Service Unavailable"


@pytest.fixture
def get_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GetPulumi]:
    site = GetPulumi()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # ~/.pulumi/versions: empty
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}:/usr/bin:/bin")  # no pulumi
    real = urllib.request.urlopen
    with http_server(site.respond) as url:

        def urlopen(address: Any, *args: Any, **kwargs: Any) -> Any:
            assert str(address).startswith("https://get.pulumi.com/")
            return real(str(address).replace("https://get.pulumi.com", url), *args, **kwargs)

        monkeypatch.setattr(urllib.request, "urlopen", urlopen)
        yield site


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_failed_download_is_remembered_for_ten_minutes(
    get_pulumi: GetPulumi, tmp_path: Path
) -> None:
    clock = Clock()
    get_pulumi.answers = [503]
    with pytest.raises(DeployError, match=r"HTTP Error 503.*curl -fsSL https://get\.pulumi\.com"):
        deploy.pulumi_command(clock)
    assert get_pulumi.requests == ["/install.sh"]
    stamp = tmp_path / "cache" / "raya" / "pulumi-install-failed.json"
    assert stamp.exists()
    # 9 min 59 s later: said at once, with the install command, nothing asked of the site.
    clock.now += 599
    with pytest.raises(DeployError) as remembered:
        deploy.pulumi_command(clock)
    assert get_pulumi.requests == ["/install.sh"]
    assert str(remembered.value) == (
        "the Pulumi CLI is missing, and downloading it failed 599 s ago (HTTP Error 503: "
        f"Service Unavailable); raya tries again 1 s from now (or at once if {stamp} is "
        "deleted): install it with `curl -fsSL https://get.pulumi.com | sh` (see "
        "https://www.pulumi.com/docs/install/) and retry"
    )
    # 10 min later it is tried again, and a success forgets the failure.
    clock.now += 1
    get_pulumi.answers = [200]
    command = deploy.pulumi_command(clock)
    assert get_pulumi.requests == ["/install.sh", "/install.sh"]
    assert command.command == str(
        tmp_path / "home" / ".pulumi" / "versions" / str(sdk_version) / "bin" / "pulumi"
    )
    assert not stamp.exists()


def test_a_cli_on_path_is_used_whatever_the_stamp_says(
    get_pulumi: GetPulumi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    get_pulumi.answers = [503]
    with pytest.raises(DeployError):
        deploy.pulumi_command(clock)
    # Installed by hand right after, as the error says to.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(f"#!/bin/sh\necho v{sdk_version}\n")
    (bin_dir / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert isinstance(deploy.pulumi_command(clock), auto.PulumiCommand)
    assert get_pulumi.requests == ["/install.sh"]
