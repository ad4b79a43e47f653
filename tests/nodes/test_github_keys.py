"""GitHub keys: parsing, fingerprints, the keys file, and fetching from a local HTTP server."""

from __future__ import annotations

import base64
import json
import random
import socket
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from raya.errors import KeysError
from raya.model.config import load_stack_config, stack_file
from raya.model.project import EXAMPLE_ROOT, EXAMPLE_STACK
from raya.nodes.github_keys import (
    KEY_FIELDS,
    UserKeys,
    authorized_keys,
    dump_keys_file,
    fetch_keys,
    fingerprint,
    key_info,
    load_keys_file,
    parse_key,
    parse_user_keys,
    select_users,
)
from tests.support import REPO, http_server, require_tool


def openssh(
    private: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey,
) -> str:
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode()


def ssh_string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def line_of(*fields: bytes, key_type: str | None = None) -> str:
    """A key line whose blob is exactly `fields`, labelled `key_type` (default: first field)."""
    blob = b"".join(ssh_string(field) for field in fields)
    return f"{key_type or fields[0].decode()} {base64.b64encode(blob).decode()}"


ED25519 = [openssh(ed25519.Ed25519PrivateKey.generate()) for _ in range(4)]
RSA = openssh(rsa.generate_private_key(65537, 2048))
ECDSA = {
    curve.name: openssh(ec.generate_private_key(curve))
    for curve in (ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1())
}
# Security keys: what OpenSSH writes for a FIDO key (cryptography cannot make them).
SK_ED25519 = line_of(b"sk-ssh-ed25519@openssh.com", bytes(range(32)), b"ssh:")
SK_ECDSA = line_of(
    b"sk-ecdsa-sha2-nistp256@openssh.com",
    b"nistp256",
    base64.b64decode(ECDSA["secp256r1"].split()[1])[-65:],  # the public point
    b"ssh:",
)
ALL_TYPES = [ED25519[0], RSA, *ECDSA.values(), SK_ED25519, SK_ECDSA]


# --- one key line ---------------------------------------------------------------------------


def test_every_accepted_type_parses() -> None:
    assert sorted(line.split()[0] for line in ALL_TYPES) == sorted(KEY_FIELDS)
    for line in ALL_TYPES:
        key_type, blob, comment = parse_key(line)
        assert key_type == line.split()[0]
        assert base64.b64encode(blob).decode() == line.split()[1]
        assert comment == ""


def test_comment_is_kept_with_its_spaces_collapsed() -> None:
    assert parse_key(f"{ED25519[0]}   laptop  of\talice ")[2] == "laptop of alice"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("ssh-ed25519", "expected '<type> <base64 key>[ <comment>]'"),
        ("", "expected '<type> <base64 key>[ <comment>]'"),
        ("ssh-dss AAAAB3NzaC1kc3M=", "unknown key type 'ssh-dss'; accepted: ssh-ed25519, ssh-rsa"),
        (f'command="ls" {ED25519[0]}', "unknown key type 'command=\"ls\"'"),
        ("ssh-ed25519 not*base64", "the ssh-ed25519 key is not valid base64 of an SSH key blob"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA", "not valid base64"),  # bad padding
        (ED25519[0][:-8], "not valid base64 of an SSH key blob"),  # truncated blob
        (f"ssh-rsa {ED25519[0].split()[1]}", "the key blob is not of type ssh-rsa"),
        (line_of(b"ssh-ed25519"), "the ssh-ed25519 key blob has 1 fields, not 2"),
        (line_of(b"ssh-rsa", b"\x01\x00\x01", b"n", b"extra"), "has 4 fields, not 3"),
        (
            line_of(b"ecdsa-sha2-nistp384", b"nistp256", b"\x04"),
            "the ecdsa-sha2-nistp384 key blob names curve b'nistp256'",
        ),
        ("ssh-ed25519 " + base64.b64encode(b"\x00\x00\x00").decode(), "not valid base64"),
    ],
)
def test_bad_key_line(line: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_key(line)
    assert problem in str(caught.value)


def test_fingerprints_match_ssh_keygen(tmp_path: Path) -> None:
    ssh_keygen = require_tool("ssh-keygen")
    for line in [ED25519[0], RSA, *ECDSA.values()]:
        path = tmp_path / "key.pub"
        path.write_text(line + " someone\n")
        listed = subprocess.run(
            [ssh_keygen, "-l", "-E", "sha256", "-f", str(path)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        info = key_info(line + " someone")
        assert info.fingerprint == listed[1]
        assert info.comment == "someone"
        assert info.type == line.split()[0]


def test_fingerprint_has_no_padding() -> None:
    assert fingerprint(b"") == "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU"


# --- one user's keys page ---------------------------------------------------------------------


def test_page_is_normalised_sorted_and_deduplicated() -> None:
    b64 = ED25519[0].split()[1]
    raw = f"{RSA}\r\n\n  {ED25519[0]}  \n{ED25519[0]}\nssh-ed25519\t{b64}  my  key\n"
    user = parse_user_keys("octo-alice", raw, "source")
    assert user.raw == raw
    assert user.keys == tuple(sorted([RSA, ED25519[0], f"{ED25519[0]} my key"]))


def test_bad_line_names_source_handle_and_line_number() -> None:
    raw = f"{ED25519[0]}\n\nssh-ed25519 AAAA!!\n"
    with pytest.raises(KeysError) as caught:
        parse_user_keys("octo-alice", raw, "https://example.test/octo-alice.keys")
    assert str(caught.value) == (
        "https://example.test/octo-alice.keys: octo-alice: line 3 is not an SSH public key: "
        "the ssh-ed25519 key is not valid base64 of an SSH key blob"
    )


@pytest.mark.parametrize("raw", ["", "\n", "  \n\t\n"])
def test_page_without_keys_is_an_error(raw: str) -> None:
    with pytest.raises(
        KeysError,
        match=r"^src: octo-bob has no SSH keys; listing them in "
        r"raya:authorizedUsers would lock them out",
    ):
        parse_user_keys("octo-bob", raw, "src")


# No deadline: speed is measured in bench/, never asserted in a test.
@settings(deadline=None)
@given(st.lists(st.sampled_from(ALL_TYPES), min_size=1, max_size=12), st.randoms())
def test_order_and_repetition_do_not_change_the_keys(lines: list[str], rng: random.Random) -> None:
    shuffled = lines * 2
    rng.shuffle(shuffled)
    first = parse_user_keys("a", "\n".join(lines), "s")
    second = parse_user_keys("a", "\n".join(shuffled) + "\n", "s")
    assert first.keys == second.keys == tuple(sorted(set(lines)))


def test_authorized_keys_merges_users_sorted_once() -> None:
    alice = UserKeys("octo-alice", "", (ED25519[1], ED25519[0]))
    bob = UserKeys("octo-bob", "", (ED25519[0], RSA))
    assert authorized_keys([bob, alice]) == tuple(sorted({ED25519[0], ED25519[1], RSA}))
    assert authorized_keys([]) == ()


# --- the keys file ----------------------------------------------------------------------------


def write_json(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(data))
    return path


def test_keys_file_round_trip_is_byte_stable(tmp_path: Path) -> None:
    raws = {"octo-bob": f"{RSA}\n", "Octo-Alice": f"{ED25519[0]}\n{ED25519[1]}\n"}
    users = load_keys_file(write_json(tmp_path, raws))
    assert [user.handle for user in users] == ["Octo-Alice", "octo-bob"]
    assert users[0].raw == raws["Octo-Alice"]
    text = dump_keys_file(users)
    assert json.loads(text) == raws
    assert dump_keys_file(tuple(reversed(users))) == text
    again = tmp_path / "again.json"
    again.write_text(text)
    assert load_keys_file(again) == users


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "{path}: keys file not found (write one with `raya keys --save`)"),
        ("{", "{path}: not JSON: Expecting property name"),
        ("[]", '{path}: expected a JSON object {{"<GitHub handle>": "<keys>", ...}}'),
        ("{}", '{path}: expected a JSON object {{"<GitHub handle>": "<keys>", ...}}'),
        ('{"octo-alice": ["k"]}', "{path}: octo-alice: expected the keys as one string"),
        ('{"-bad": "k"}', "{path}: '-bad' is not a GitHub login; accepted: 1-39 letters"),
        ('{"a": "x", "A": "y"}', "{path}: 'A' is listed twice (also as 'a')"),
        ('{"octo-alice": ""}', "{path}: octo-alice has no SSH keys"),
        ('{"octo-alice": "ssh-rsa x"}', "{path}: octo-alice: line 1 is not an SSH public key"),
    ],
)
def test_bad_keys_file(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "keys.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(KeysError) as caught:
        load_keys_file(path)
    assert str(caught.value).startswith(message.format(path=path))


def test_select_users_wants_exactly_the_configured_handles() -> None:
    alice = UserKeys("Octo-Alice", "", (ED25519[0],))
    bob = UserKeys("octo-bob", "", (RSA,))
    assert select_users([bob, alice], ["octo-bob", "octo-alice"], "f") == (alice, bob)
    with pytest.raises(KeysError) as missing:
        select_users([alice], ["octo-alice", "octo-bob", "carol"], "f.json")
    assert str(missing.value) == (
        "f.json: has no keys for octo-bob, carol, listed in raya:authorizedUsers "
        "(fetch them with `raya keys --save`)"
    )
    with pytest.raises(KeysError) as extra:
        select_users([alice, bob], ["octo-alice"], "f.json")
    assert str(extra.value) == "f.json: has keys for octo-bob, not listed in raya:authorizedUsers"


def test_example_keys_cover_the_example_stack() -> None:
    config = load_stack_config(stack_file(EXAMPLE_ROOT, EXAMPLE_STACK))
    users = select_users(
        load_keys_file(EXAMPLE_ROOT / "keys.json"), config.authorized_users, "example"
    )
    assert [user.handle for user in users] == ["octo-alice", "octo-bob"]
    types = {key.split()[0] for key in authorized_keys(users)}
    assert types == {"ssh-ed25519", "ssh-rsa"}


# --- fetching from a local server ------------------------------------------------------------


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    hold: bool = False  # wait for the test to end before answering (beyond any client timeout)
    drop: bool = False  # close the connection without answering


class KeyServer:
    """A stand-in for github.com: each path answers its scripted answers in turn, the
    last one again and again; every request is counted."""

    def __init__(self) -> None:
        self.url = ""
        self.script: dict[str, list[Answer]] = {}
        self.hits: Counter[str] = Counter()
        self.barrier: threading.Barrier | None = None
        self.release = threading.Event()
        self.lock = threading.Lock()

    def respond(self, request: BaseHTTPRequestHandler) -> tuple[int, bytes] | None:
        with self.lock:
            self.hits[request.path] += 1
            answers = self.script.get(request.path, [Answer(404, b"Not Found")])
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if self.barrier is not None:
            self.barrier.wait()
        if answer.hold:
            self.release.wait(30)
            return None
        if answer.drop:
            return None
        return answer.status, answer.body

    def serve(self, handle: str, *answers: Answer) -> None:
        self.script[f"/{handle}.keys"] = list(answers)

    def keys(self, handle: str, lines: list[str]) -> None:
        self.serve(handle, Answer(body="".join(f"{line}\n" for line in lines).encode()))


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # Requests to the local server must never be sent to a proxy from the environment.
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")


@pytest.fixture
def server() -> Iterator[KeyServer]:
    keys = KeyServer()
    with http_server(keys.respond) as url:
        keys.url = url
        yield keys
        keys.release.set()


class Sleeps(list[float]):
    """Records the backoff waits instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_fetch_success_sorted_by_handle(server: KeyServer) -> None:
    server.keys("octo-bob", [RSA, ED25519[1]])
    server.keys("Octo-Alice", [ED25519[0]])
    users = fetch_keys(["octo-bob", "Octo-Alice"], server.url)
    assert [user.handle for user in users] == ["Octo-Alice", "octo-bob"]
    assert users[0] == UserKeys("Octo-Alice", f"{ED25519[0]}\n", (ED25519[0],))
    assert users[1].raw == f"{RSA}\n{ED25519[1]}\n"
    assert users[1].keys == tuple(sorted([RSA, ED25519[1]]))
    assert server.hits == {"/octo-bob.keys": 1, "/Octo-Alice.keys": 1}


def test_fetch_accepts_a_trailing_slash_and_no_handles(server: KeyServer) -> None:
    server.keys("octo-alice", [ED25519[0]])
    assert fetch_keys(["octo-alice"], server.url + "/")[0].keys == (ED25519[0],)
    assert fetch_keys([], server.url) == ()


def test_fetches_run_in_parallel(server: KeyServer) -> None:
    # Every request waits for all the others to arrive: one at a time would break the barrier.
    handles = [f"user{i}" for i in range(4)]
    for handle, key in zip(handles, ED25519, strict=True):
        server.keys(handle, [key])
    server.barrier = threading.Barrier(len(handles), timeout=10)
    users = fetch_keys(handles, server.url, attempts=1)
    assert authorized_keys(users) == tuple(sorted(ED25519))


def test_404_names_the_handle_and_is_not_retried(server: KeyServer) -> None:
    server.keys("octo-alice", [ED25519[0]])
    sleeps = Sleeps()
    with pytest.raises(KeysError) as caught:
        fetch_keys(["octo-alice", "no-such-user"], server.url, sleep=sleeps)
    assert str(caught.value) == (
        f"raya:authorizedUsers: no-such-user: {server.url}/no-such-user.keys answered 404; "
        "no such GitHub user"
    )
    assert server.hits["/no-such-user.keys"] == 1
    assert sleeps == []


def test_other_client_errors_are_not_retried(server: KeyServer) -> None:
    server.serve("octo-alice", Answer(403, b"Forbidden"))
    with pytest.raises(KeysError, match=r"octo-alice\.keys answered HTTP 403 Forbidden$"):
        fetch_keys(["octo-alice"], server.url, sleep=Sleeps())
    assert server.hits["/octo-alice.keys"] == 1


def test_empty_page_is_an_error(server: KeyServer) -> None:
    server.keys("octo-alice", [])
    with pytest.raises(KeysError) as caught:
        fetch_keys(["octo-alice"], server.url)
    assert str(caught.value).startswith(
        f"{server.url}/octo-alice.keys: octo-alice has no SSH keys; listing them in "
        "raya:authorizedUsers would lock them out"
    )


def test_malformed_line_names_handle_and_line(server: KeyServer) -> None:
    server.keys("octo-alice", [ED25519[0], "ssh-foo AAAA"])
    with pytest.raises(KeysError) as caught:
        fetch_keys(["octo-alice"], server.url)
    assert str(caught.value).startswith(
        f"{server.url}/octo-alice.keys: octo-alice: line 2 is not an SSH public key: "
        "unknown key type 'ssh-foo'"
    )


class Timeouts(list[float]):
    """Records the timeout raya gives each request. The first request keeps it (the held
    answer must time out); later ones get a minute, so a slow machine cannot turn a local
    answer into a timeout: nothing here depends on how fast the server answers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        real = urllib.request.urlopen

        def urlopen(url: str, timeout: float) -> Any:
            self.append(timeout)
            return real(url, timeout=timeout if len(self) == 1 else 60)

        monkeypatch.setattr(urllib.request, "urlopen", urlopen)


def test_timeout_then_success(server: KeyServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.serve("octo-alice", Answer(hold=True), Answer(body=f"{ED25519[0]}\n".encode()))
    sleeps, timeouts = Sleeps(), Timeouts(monkeypatch)
    users = fetch_keys(["octo-alice"], server.url, timeout=0.2, backoff=0.5, sleep=sleeps)
    assert users[0].keys == (ED25519[0],)
    assert server.hits["/octo-alice.keys"] == 2
    assert sleeps == [0.5]
    assert timeouts == [0.2, 0.2]


def test_a_dropped_connection_is_retried(server: KeyServer) -> None:
    server.serve("octo-alice", Answer(drop=True), Answer(body=f"{ED25519[0]}\n".encode()))
    sleeps = Sleeps()
    assert fetch_keys(["octo-alice"], server.url, sleep=sleeps)[0].keys == (ED25519[0],)
    assert server.hits["/octo-alice.keys"] == 2
    assert sleeps == [1.0]


def test_defaults_10_s_timeout_and_4_attempts_1_2_4_s_apart(
    server: KeyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.serve("octo-alice", Answer(503))
    sleeps, timeouts = Sleeps(), Timeouts(monkeypatch)
    with pytest.raises(KeysError, match="failed 4 times; last: HTTP 503"):
        fetch_keys(["octo-alice"], server.url, sleep=sleeps)
    assert timeouts == [10, 10, 10, 10]
    assert sleeps == [1, 2, 4]


def test_5xx_and_429_are_retried(server: KeyServer) -> None:
    body = f"{ED25519[0]}\n".encode()
    server.serve("octo-alice", Answer(502), Answer(429), Answer(503), Answer(body=body))
    sleeps = Sleeps()
    assert fetch_keys(["octo-alice"], server.url, backoff=1, sleep=sleeps)[0].keys == (ED25519[0],)
    assert sleeps == [1, 2, 4]


def test_persistent_500_gives_up_after_the_attempts(server: KeyServer) -> None:
    server.serve("octo-alice", Answer(500, b"oops"))
    sleeps = Sleeps()
    with pytest.raises(KeysError) as caught:
        fetch_keys(["octo-alice"], server.url, attempts=3, backoff=0.25, sleep=sleeps)
    assert str(caught.value) == (
        f"raya:authorizedUsers: octo-alice: {server.url}/octo-alice.keys failed 3 times; "
        "last: HTTP 500 Internal Server Error"
    )
    assert server.hits["/octo-alice.keys"] == 3
    assert sleeps == [0.25, 0.5]


def test_persistent_timeout_gives_up(server: KeyServer) -> None:
    server.serve("octo-alice", Answer(hold=True))
    with pytest.raises(KeysError, match=r"failed 2 times; last: .*timed out"):
        fetch_keys(["octo-alice"], server.url, timeout=0.1, attempts=2, sleep=Sleeps())
    assert server.hits["/octo-alice.keys"] == 2


def test_refused_connection_is_retried_then_reported() -> None:
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{closed.server_address[1]}"
    closed.server_close()  # nothing listens there any more
    sleeps = Sleeps()
    with pytest.raises(KeysError, match=r"octo-alice\.keys failed 2 times; last: .*refused"):
        fetch_keys(["octo-alice"], url, attempts=2, sleep=sleeps)
    assert len(sleeps) == 1


def test_every_failing_handle_is_reported_at_once(server: KeyServer) -> None:
    server.keys("ok", [ED25519[0]])
    server.keys("empty", [])
    with pytest.raises(KeysError) as caught:
        fetch_keys(["zed", "ok", "empty"], server.url)
    problems = str(caught.value).split("; ")
    assert problems[0].startswith(f"{server.url}/empty.keys: empty has no SSH keys")
    assert any(problem.startswith("raya:authorizedUsers: zed: ") for problem in problems)


def test_bad_bodies(server: KeyServer) -> None:
    server.serve("latin", Answer(body=b"ssh-ed25519 \xe9\n"))
    with pytest.raises(KeysError, match=r"latin\.keys answered text that is not UTF-8$"):
        fetch_keys(["latin"], server.url)
    server.serve("huge", Answer(body=b"#" * ((1 << 20) + 1)))
    with pytest.raises(KeysError, match=r"huge\.keys answered more than 1048576 bytes$"):
        fetch_keys(["huge"], server.url)


@pytest.mark.parametrize(
    ("handles", "message"),
    [
        (["../etc/passwd"], "'../etc/passwd' is not a GitHub login"),
        (["a--b"], "'a--b' is not a GitHub login"),
        (["x" * 40], "is not a GitHub login; accepted: 1-39 letters, digits or single inner '-'"),
        (["octo", "OCTO"], "'OCTO' is listed twice (also as 'octo')"),
    ],
)
def test_bad_handles_are_refused_before_any_request(
    server: KeyServer, handles: list[str], message: str
) -> None:
    with pytest.raises(KeysError) as caught:
        fetch_keys(handles, server.url)
    assert str(caught.value).startswith("raya:authorizedUsers: ")
    assert message in str(caught.value)
    assert not server.hits


def test_attempts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="attempts must be at least 1"):
        fetch_keys(["octo"], "http://127.0.0.1:9", attempts=0)


def test_shuffled_answers_give_identical_keys(server: KeyServer) -> None:
    lines = {"octo-alice": [ED25519[0], RSA, ECDSA["secp256r1"]], "octo-bob": [ED25519[1], RSA]}
    rng = random.Random(7)
    results = []
    raws = set()
    for _ in range(4):
        for handle, keys in lines.items():
            served = keys[:]
            rng.shuffle(served)
            server.keys(handle, served)
        users = fetch_keys(["octo-bob", "octo-alice"], server.url)
        raws.add(users[0].raw)
        results.append(([user.keys for user in users], authorized_keys(users)))
    assert len(raws) > 1  # the server did answer in different orders
    assert all(result == results[0] for result in results)
    assert results[0][1] == tuple(sorted({*lines["octo-alice"], *lines["octo-bob"]}))


# --- `raya keys` -----------------------------------------------------------------------------


def raya(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raya", *args], cwd=cwd, capture_output=True, text=True
    )


def project(tmp_path: Path, users: list[str]) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: raya\n")
    handles = "".join(f"    - {user}\n" for user in users)
    (tmp_path / "Pulumi.dev.yaml").write_text(
        "config:\n  raya:authorizedUsers:\n"
        f"{handles}  raya:managedSubdomain: raya\n  raya:parentZone: example.com\n"
        "  raya:acmeEmail: ops@example.org\n"
    )
    (tmp_path / "sub").mkdir()
    return tmp_path


def test_keys_command_fetches_prints_and_saves(server: KeyServer, tmp_path: Path) -> None:
    root = project(tmp_path, ["octo-bob", "octo-alice"])
    server.keys("octo-alice", [ED25519[0] + " alice@laptop"])
    server.keys("octo-bob", [RSA])
    saved = tmp_path / "keys.json"
    result = raya(
        "keys", "--stack", "dev", "--github-url", server.url, "--save", str(saved), cwd=root / "sub"
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows == [
        ["octo-alice", "ssh-ed25519", key_info(ED25519[0]).fingerprint, "alice@laptop"],
        ["octo-bob", "ssh-rsa", key_info(RSA).fingerprint],
    ]
    assert f"wrote 2 keys of 2 users to {saved}" in result.stderr
    assert saved.read_text() == dump_keys_file(fetch_keys(["octo-alice", "octo-bob"], server.url))

    offline = raya("keys", "--root", str(root), "-s", "dev", "--keys-file", str(saved))
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout == result.stdout


def test_keys_command_failure_is_one_line(server: KeyServer, tmp_path: Path) -> None:
    root = project(tmp_path, ["ghost"])
    result = raya("keys", "--root", str(root), "--stack", "dev", "--github-url", server.url)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: raya:authorizedUsers: ghost: {server.url}/ghost.keys answered 404; "
        "no such GitHub user"
    )
    assert "Traceback" not in result.stderr


def test_keys_command_example_is_offline() -> None:
    result = raya("keys", "--example", "--github-url", "http://127.0.0.1:9")
    assert result.returncode == 0, result.stderr
    handles = [line.split()[0] for line in result.stdout.splitlines()]
    assert handles == ["octo-alice", "octo-bob", "octo-bob"]


def test_keys_command_outside_a_project(tmp_path: Path) -> None:
    result = raya("keys", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: {tmp_path}: not inside a raya project (no Pulumi.yaml here or above)"
    )


def test_keys_command_example_takes_no_stack() -> None:
    result = raya("keys", "--example", "--stack", "prod")
    assert result.returncode == 2
    assert "--example is its own project; it takes no --root or --stack" in result.stderr


@pytest.mark.parametrize(
    ("code", "retried"),
    [(socket.EAI_NONAME, False), (socket.EAI_AGAIN, True)],
    ids=["unknown-name", "resolver-busy"],
)
def test_a_name_that_does_not_resolve_is_not_retried(
    monkeypatch: pytest.MonkeyPatch, code: int, retried: bool
) -> None:
    # What getaddrinfo raises for github.com on a machine without DNS (-2, "Name or service
    # not known"), against a resolver that could not answer this time (-3): asked of no
    # resolver, so that the test talks to no other address.
    asked: list[str] = []

    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(host)
        raise socket.gaierror(code, "no such name")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    sleeps = Sleeps()
    with pytest.raises(KeysError) as caught:
        fetch_keys(["octo-alice"], "https://github.invalid", sleep=sleeps)
    if retried:
        assert len(asked) == 4
        assert sleeps == [1, 2, 4]
        assert "failed 4 times" in str(caught.value)
    else:
        assert asked == ["github.invalid"]
        assert sleeps == []
        assert str(caught.value) == (
            "raya:authorizedUsers: octo-alice: https://github.invalid/octo-alice.keys: cannot "
            "resolve its host ([Errno -2] no such name), not retried: check this machine's "
            "network and DNS"
        )
