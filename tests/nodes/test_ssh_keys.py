"""The boot-time SSH key fetcher, for real: the script the configs carry, run by bash against
a GitHub played on 127.0.0.1, and its units under systemd-analyze. A failed, empty or
malformed answer keeps the previous file whole; a good one replaces it atomically, 0600,
owned by the owner of its folder (core on a node)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from raya.model.project import EXAMPLE_ROOT
from raya.nodes.github_keys import parse_key
from raya.nodes.render import SSH_HANDLES_FILE, RenderedNode
from tests.nodes.tools import (
    apply_ignition,
    ignition_files,
    prepare_for_systemd,
    scratch_root,
    systemd_verify,
)
from tests.support import Reply, http_server, require_tool

pytestmark = pytest.mark.tools

SCRIPT = "/usr/local/bin/raya-ssh-keys"
KEYS = json.loads((EXAMPLE_ROOT / "keys.json").read_text())
ALICE, BOB = KEYS["octo-alice"], KEYS["octo-bob"]
NOBODY = 65534  # the folder's owner in these tests: the file must follow it, not root


def _blob(*fields: bytes) -> str:
    return base64.b64encode(b"".join(len(f).to_bytes(4, "big") + f for f in fields)).decode()


BAD_LINES = {
    "unknown type": "ssh-dss " + _blob(b"ssh-dss", b"p", b"q", b"g", b"y"),
    "not base64": "ssh-ed25519 AAAA!!notbase64",
    "blob of another type": "ssh-rsa " + _blob(b"ssh-ed25519", b"k" * 32),
    "options before the key": 'command="sh" ' + ALICE.strip(),
    "html": "<html><body>rate limited</body></html>",
    "type alone": "ssh-ed25519",
}


class GitHub:
    """Keys pages by handle; a page may be (status, body) or None to hang past the timeout."""

    def __init__(self) -> None:
        self.pages: dict[str, Reply] = {"octo-alice": (200, ALICE.encode())}
        self.asked: list[str] = []
        self.unavailable = 0  # how many next requests get a 503, whatever the page

    def respond(self, request: BaseHTTPRequestHandler) -> Reply:
        handle = request.path.removeprefix("/").removesuffix(".keys")
        self.asked.append(handle)
        if self.unavailable > 0:
            self.unavailable -= 1
            return 503, b"Service Unavailable"
        page = self.pages.get(handle, (404, b"Not Found"))
        if page is None:
            time.sleep(3)  # longer than the script's max time in these tests, then nothing
        return page


@pytest.fixture(scope="module")
def script(rendered: dict[str, RenderedNode]) -> Iterator[Path]:
    """The fetcher exactly as an agent's config carries it, written by the real Ignition."""
    with scratch_root() as root:
        apply_ignition(rendered["agent-0"].ignition, root)
        path = root / "var/usrlocal/bin/raya-ssh-keys"
        assert path.stat().st_mode & 0o777 == 0o755
        copy = root.parent / "raya-ssh-keys"
        shutil.copy(path, copy)
        yield copy


@pytest.fixture
def github() -> Iterator[tuple[GitHub, str]]:
    fake = GitHub()
    with http_server(fake.respond) as url:
        yield fake, url


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A folder like ~core/.ssh/authorized_keys.d (0700, owned by its user) and the handles."""
    folder = tmp_path / "authorized_keys.d"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    (tmp_path / "handles").write_text("octo-alice\n")
    return folder


def fetch(
    script: Path, url: str, node: Path, *options: str, path: str = os.environ["PATH"]
) -> subprocess.CompletedProcess[str]:
    require_tool("curl")
    return subprocess.run(
        ["bash", str(script), *options, url, str(node.parent / "handles"), str(node / "raya")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": path, "RAYA_SSH_KEYS_MAX_TIME": "1"},
    )


def recording_sleep(folder: Path) -> tuple[str, Path]:
    """A PATH whose `sleep` records its argument and returns at once, and its record."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    record = folder / "slept"
    sleep = bin_dir / "sleep"
    sleep.write_text(f'#!/bin/sh\necho "$1" >>{record}\n')
    sleep.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}", record


def check_file(node: Path, expected: str) -> None:
    target = node / "raya"
    assert target.read_text() == expected
    status = target.stat()
    assert status.st_mode & 0o777 == 0o600
    assert (status.st_uid, status.st_gid) == (NOBODY, NOBODY)
    assert sorted(p.name for p in node.iterdir()) == ["raya"]  # no temporary file left


def test_a_good_page_is_written(script: Path, github: tuple[GitHub, str], node: Path) -> None:
    fake, url = github
    (node.parent / "handles").write_text("octo-alice\nocto-bob\n")
    fake.pages["octo-bob"] = (200, BOB.encode())
    result = fetch(script, url, node)
    assert result.returncode == 0, result.stderr
    assert fake.asked == ["octo-alice", "octo-bob"]
    assert result.stdout == f"raya-ssh-keys: wrote 3 keys to {node / 'raya'}\n"
    check_file(node, ALICE + BOB)


@pytest.mark.parametrize(
    ("page", "why"),
    [
        ((404, b"Not Found"), "The requested URL returned error: 404"),
        ((500, b"oops"), "The requested URL returned error: 500"),
        ((200, b""), "octo-alice.keys: no SSH keys"),
        ((200, b"\n\n"), "octo-alice.keys: no SSH keys"),
        (None, "Operation timed out"),
        *(
            ((200, (ALICE + line + "\n").encode()), "line 2")
            for line in BAD_LINES.values()
        ),
    ],
    ids=["404", "500", "empty", "blank lines", "timeout", *BAD_LINES],
)
def test_a_failed_answer_keeps_the_previous_file(
    script: Path, github: tuple[GitHub, str], node: Path, page: Reply, why: str
) -> None:
    fake, url = github
    assert fetch(script, url, node).returncode == 0
    check_file(node, ALICE)
    fake.pages["octo-alice"] = page
    result = fetch(script, url, node)
    assert result.returncode == 1
    assert why in result.stderr, result.stderr
    assert f"keeping {node / 'raya'} as it is" in result.stderr
    check_file(node, ALICE)


def test_one_users_failure_keeps_everyones_previous_keys(
    script: Path, github: tuple[GitHub, str], node: Path
) -> None:
    fake, url = github
    (node.parent / "handles").write_text("octo-alice\nocto-bob\n")
    fake.pages["octo-bob"] = (200, BOB.encode())
    assert fetch(script, url, node).returncode == 0
    fake.pages["octo-alice"] = (200, b"ssh-ed25519 " + _blob(b"ssh-ed25519", b"n" * 32).encode())
    fake.pages["octo-bob"] = (503, b"unicorn")
    assert fetch(script, url, node).returncode == 1
    check_file(node, ALICE + BOB)


def test_without_a_previous_file_a_failure_writes_none(
    script: Path, github: tuple[GitHub, str], node: Path
) -> None:
    fake, url = github
    fake.pages["octo-alice"] = (500, b"")
    assert fetch(script, url, node).returncode == 1
    assert list(node.iterdir()) == []


def test_a_first_boot_retries_within_seconds_backing_off_until_github_answers(
    script: Path, github: tuple[GitHub, str], node: Path, tmp_path: Path
) -> None:
    """The unit's way (--retry), no keys yet: 2 s after the first failure, twice as long after
    each next one, never more than 60 s apart, until GitHub answers; then exit 0."""
    fake, url = github
    fake.unavailable = 8
    path, slept = recording_sleep(tmp_path)
    result = fetch(script, url, node, "--retry", path=path)
    assert result.returncode == 0, result.stderr
    assert slept.read_text().split() == ["2", "4", "8", "16", "32", "60", "60", "60"]
    assert "no keys yet: trying again in 2 s" in result.stderr
    assert len(fake.asked) == 9
    check_file(node, ALICE)


def test_with_keys_in_place_a_failure_is_left_to_the_timer_and_is_no_failure(
    script: Path, github: tuple[GitHub, str], node: Path, tmp_path: Path
) -> None:
    """After the first success: one try, the keys kept, exit 75 (the unit's
    SuccessExitStatus: a transient outage leaves no failed unit), no retry loop."""
    fake, url = github
    assert fetch(script, url, node).returncode == 0
    fake.unavailable = 1
    path, slept = recording_sleep(tmp_path)
    result = fetch(script, url, node, "--retry", path=path)
    assert result.returncode == 75
    assert f"keeping {node / 'raya'} as it is" in result.stderr
    assert not slept.exists()
    check_file(node, ALICE)


def test_the_script_and_raya_keys_agree_on_every_line() -> None:
    """What the fetcher refuses, `raya keys` / `raya up` refuse too (they check first)."""
    why = {
        "unknown type": "unknown key type 'ssh-dss'",
        "not base64": "the ssh-ed25519 key is not valid base64",
        "blob of another type": "the key blob is not of type ssh-rsa",
        "options before the key": "unknown key type 'command=\"sh\"'",
        "html": "unknown key type '<html><body>rate'",
        "type alone": "expected '<type> <base64 key>",
    }
    assert set(why) == set(BAD_LINES)
    for reason, line in BAD_LINES.items():
        with pytest.raises(ValueError) as refused:
            parse_key(line)
        assert str(refused.value).startswith(why[reason]), reason
    for line in (ALICE + BOB).splitlines():
        parse_key(line)


def test_the_units_fetch_at_boot_then_every_15_minutes(
    rendered: dict[str, RenderedNode], tmp_path: Path
) -> None:
    units = {
        unit["name"]: unit["contents"]
        for unit in json.loads(rendered["agent-1"].ignition)["systemd"]["units"]
    }
    service = units["raya-ssh-keys.service"].splitlines()
    assert "Wants=network-online.target" in service and "After=network-online.target" in service
    # Retries until the first success (no deadline), and a kept-keys failure is no failure.
    assert {"TimeoutStartSec=infinity", "SuccessExitStatus=75"} <= set(service)
    (command,) = [line for line in service if line.startswith("ExecStart=")]
    assert command.split()[:2] == [f"ExecStart={SCRIPT}", "--retry"]
    timer = units["raya-ssh-keys.timer"].splitlines()
    assert {"OnBootSec=0", "OnUnitActiveSec=15min", "WantedBy=timers.target"} <= set(timer)
    root = tmp_path / "root"
    system = root / "etc/systemd/system"
    system.mkdir(parents=True)
    for name in ("raya-ssh-keys.service", "raya-ssh-keys.timer"):
        (system / name).write_text(units[name])
    prepare_for_systemd(root, [SCRIPT])
    result = systemd_verify(root, ["raya-ssh-keys.timer", "raya-ssh-keys.service"])
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    # ...and it can fail: a misspelled directive is reported.
    misspelled = units["raya-ssh-keys.timer"].replace("OnBoot", "OnBot")
    (system / "raya-ssh-keys.timer").write_text(misspelled)
    result = systemd_verify(root, ["raya-ssh-keys.timer"])
    assert "Unknown key" in result.stdout + result.stderr


def test_the_handles_file_is_what_the_service_reads(rendered: dict[str, RenderedNode]) -> None:
    for node in rendered.values():
        files = ignition_files(node.ignition)
        assert files[SSH_HANDLES_FILE] == b"octo-alice\nocto-bob\n"
        assert files[SCRIPT].startswith(b"#!/bin/bash\n")


def test_shellcheck_is_clean(script: Path) -> None:
    shellcheck = require_tool("shellcheck")
    result = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
