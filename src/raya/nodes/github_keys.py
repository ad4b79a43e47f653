"""The users' SSH public keys, as GitHub publishes them at `https://github.com/<handle>.keys`.

The spec's `github_keys.tf`: each handle in `raya:authorizedUsers` gives the keys its owner
may log in with. Every line is checked to be an SSH public key, and a handle with no key
is an error: deploying it would lock that person out without a word. The result does not
depend on the order GitHub answers in (keys sorted and de-duplicated). The nodes fetch the
keys themselves, at boot and every 15 minutes (`templates/snippets/raya-ssh-keys.sh.j2`,
which checks each line the same way: a known type and a blob of that type); this module is
what `raya keys` and `raya up` check them with before anything is touched.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from raya.defaults import GITHUB_URL
from raya.errors import KeysError
from raya.model.config import GITHUB_LOGIN
from raya.model.jsonfile import read_json

# Key types GitHub accepts, with the number of SSH strings in their wire-format blob.
KEY_FIELDS = {
    "ssh-ed25519": 2,
    "ssh-rsa": 3,
    "ecdsa-sha2-nistp256": 3,
    "ecdsa-sha2-nistp384": 3,
    "ecdsa-sha2-nistp521": 3,
    "sk-ssh-ed25519@openssh.com": 3,
    "sk-ecdsa-sha2-nistp256@openssh.com": 4,
}
# A keys page is a few hundred bytes per key; more than this is not a keys page.
MAX_BODY = 1 << 20
SETTING = "raya:authorizedUsers"


@dataclass(frozen=True)
class UserKeys:
    handle: str  # as configured
    raw: str  # GitHub's response body exactly as served
    keys: tuple[str, ...]  # validated, normalised to "<type> <base64>[ <comment>]", sorted


@dataclass(frozen=True)
class KeyInfo:
    type: str
    fingerprint: str  # "SHA256:<base64 without padding>", as `ssh-keygen -l` prints it
    comment: str


def _ssh_strings(blob: bytes) -> list[bytes]:
    """The length-prefixed strings that make up an SSH public key blob (RFC 4251)."""
    fields = []
    offset = 0
    while offset < len(blob):
        if offset + 4 > len(blob):
            raise ValueError("truncated length")
        length = int.from_bytes(blob[offset : offset + 4], "big")
        offset += 4
        if offset + length > len(blob):
            raise ValueError("truncated field")
        fields.append(blob[offset : offset + length])
        offset += length
    return fields


def parse_key(line: str) -> tuple[str, bytes, str]:
    """The type, blob and comment of one public key line; ValueError says what is wrong."""
    parts = line.split(None, 2)
    if len(parts) < 2:
        raise ValueError("expected '<type> <base64 key>[ <comment>]'")
    key_type, encoded = parts[0], parts[1]
    if key_type not in KEY_FIELDS:
        raise ValueError(f"unknown key type {key_type[:40]!r}; accepted: {', '.join(KEY_FIELDS)}")
    try:
        blob = base64.b64decode(encoded, validate=True)
        fields = _ssh_strings(blob)
    except (binascii.Error, ValueError):
        raise ValueError(f"the {key_type} key is not valid base64 of an SSH key blob") from None
    if not fields or fields[0] != key_type.encode():
        raise ValueError(f"the key blob is not of type {key_type}")
    if len(fields) != KEY_FIELDS[key_type]:
        raise ValueError(
            f"the {key_type} key blob has {len(fields)} fields, not {KEY_FIELDS[key_type]}"
        )
    if key_type.startswith(("ecdsa-", "sk-ecdsa-")):
        curve = key_type.split("@")[0].rsplit("-", 1)[1]
        if fields[1] != curve.encode():
            raise ValueError(f"the {key_type} key blob names curve {fields[1][:20]!r}")
    return key_type, blob, " ".join(parts[2].split()) if len(parts) == 3 else ""


def fingerprint(blob: bytes) -> str:
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def key_info(key: str) -> KeyInfo:
    """Type, fingerprint and comment of a normalised key line (from `UserKeys.keys`)."""
    key_type, blob, comment = parse_key(key)
    return KeyInfo(type=key_type, fingerprint=fingerprint(blob), comment=comment)


def parse_user_keys(handle: str, raw: str, source: str) -> UserKeys:
    """Validate `raw` (a keys page) of `handle`; `source` names where it came from in errors."""
    keys = set()
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            key_type, blob, comment = parse_key(line)
        except ValueError as error:
            raise KeysError(
                f"{source}: {handle}: line {number} is not an SSH public key: {error}"
            ) from None
        encoded = base64.b64encode(blob).decode()
        keys.add(f"{key_type} {encoded} {comment}".rstrip())
    if not keys:
        raise KeysError(
            f"{source}: {handle} has no SSH keys; listing them in {SETTING} would lock them "
            "out (add a key on GitHub or remove the handle)"
        )
    return UserKeys(handle=handle, raw=raw, keys=tuple(sorted(keys)))


def _check_handles(handles: Sequence[str], source: str) -> None:
    seen: dict[str, str] = {}
    for handle in handles:
        if not GITHUB_LOGIN.fullmatch(handle):
            raise KeysError(
                f"{source}: {handle!r} is not a GitHub login; accepted: 1-39 letters, digits "
                "or single inner '-'"
            )
        if handle.lower() in seen:  # GitHub logins are case-insensitive
            raise KeysError(
                f"{source}: {handle!r} is listed twice (also as {seen[handle.lower()]!r})"
            )
        seen[handle.lower()] = handle


def _sorted(users: Sequence[UserKeys]) -> tuple[UserKeys, ...]:
    return tuple(sorted(users, key=lambda user: user.handle.lower()))


def _fetch_one(
    handle: str,
    base_url: str,
    timeout: float,
    attempts: int,
    backoff: float,
    sleep: Callable[[float], None],
) -> UserKeys:
    # Here, not at the top: the node templates read this module's constants, and a render
    # has no use for HTTP (about a third of a render's imports).
    import http.client
    import socket
    import urllib.error
    import urllib.request

    url = f"{base_url.rstrip('/')}/{handle}.keys"
    problem = ""
    for attempt in range(attempts):
        if attempt:
            sleep(backoff * 2 ** (attempt - 1))
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                body: bytes = response.read(MAX_BODY + 1)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                raise KeysError(
                    f"{SETTING}: {handle}: {url} answered 404; no such GitHub user"
                ) from None
            problem = f"HTTP {error.code} {error.reason}"
            if error.code == 429 or error.code >= 500:
                continue
            raise KeysError(f"{SETTING}: {handle}: {url} answered {problem}") from None
        except (OSError, http.client.HTTPException) as error:
            reason = error.reason if isinstance(error, urllib.error.URLError) else error
            problem = str(reason) or type(reason).__name__
            # A name that does not resolve will not on the next try either; a resolver that
            # could not answer (EAI_AGAIN) may, as timeouts, refused or reset connections and
            # truncated answers may.
            if isinstance(reason, socket.gaierror) and reason.errno != socket.EAI_AGAIN:
                raise KeysError(
                    f"{SETTING}: {handle}: {url}: cannot resolve its host ({problem}), "
                    "not retried: check this machine's network and DNS"
                ) from None
            continue
        if len(body) > MAX_BODY:
            raise KeysError(f"{SETTING}: {handle}: {url} answered more than {MAX_BODY} bytes")
        try:
            raw = body.decode("utf-8")
        except UnicodeDecodeError:
            raise KeysError(f"{SETTING}: {handle}: {url} answered text that is not UTF-8") from None
        return parse_user_keys(handle, raw, url)
    raise KeysError(f"{SETTING}: {handle}: {url} failed {attempts} times; last: {problem}")


def fetch_keys(
    handles: Sequence[str],
    base_url: str = GITHUB_URL,
    *,
    timeout: float = 10,
    attempts: int = 4,
    backoff: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[UserKeys, ...]:
    """Every handle's keys, fetched in parallel, sorted by handle.

    A timeout, a dropped connection, a 429 or a 5xx is retried up to `attempts` tries in
    all, waiting `backoff` seconds, then twice that, and so on; anything else (a 404, a host
    name that does not resolve) fails at once.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    _check_handles(handles, SETTING)
    if not handles:
        return ()
    from concurrent.futures import ThreadPoolExecutor  # see _fetch_one

    with ThreadPoolExecutor(max_workers=min(16, len(handles))) as pool:
        futures = [
            pool.submit(_fetch_one, handle, base_url, timeout, attempts, backoff, sleep)
            for handle in handles
        ]
    users, problems = [], []
    for future in futures:
        error = future.exception()
        if error is None:
            users.append(future.result())
        elif isinstance(error, KeysError):
            problems.append(str(error))
        else:
            raise error
    if problems:
        # Every failing handle at once, in a stable order.
        raise KeysError("; ".join(sorted(problems, key=str.lower)))
    return _sorted(users)


def authorized_keys(users: Sequence[UserKeys]) -> tuple[str, ...]:
    """All the users' keys, each once, sorted: the `core` user's authorized keys."""
    return tuple(sorted({key for user in users for key in user.keys}))


def load_keys_file(path: Path) -> tuple[UserKeys, ...]:
    """A keys file written by `raya keys --save`: `{"<handle>": "<keys page>", ...}`."""
    data = read_json(path, "keys", KeysError, " (write one with `raya keys --save`)")
    if not isinstance(data, dict) or not data:
        raise KeysError(f'{path}: expected a JSON object {{"<GitHub handle>": "<keys>", ...}}')
    _check_handles(list(data), str(path))
    users = []
    for handle, raw in data.items():
        if not isinstance(raw, str):
            raise KeysError(f"{path}: {handle}: expected the keys as one string, one key per line")
        users.append(parse_user_keys(handle, raw, str(path)))
    return _sorted(users)


def dump_keys_file(users: Sequence[UserKeys]) -> str:
    """The keys file's text for `users`: the same users always give the same bytes."""
    return json.dumps({user.handle: user.raw for user in users}, indent=2, sort_keys=True) + "\n"


def select_users(
    users: Sequence[UserKeys], handles: Sequence[str], source: str
) -> tuple[UserKeys, ...]:
    """The users of `handles`, exactly; a configured handle missing from `users` (read from
    the keys file `source`) is an error, and so is one that is not configured."""
    by_handle = {user.handle.lower(): user for user in users}
    wanted = {handle.lower() for handle in handles}
    missing = [handle for handle in handles if handle.lower() not in by_handle]
    if missing:
        raise KeysError(
            f"{source}: has no keys for {', '.join(missing)}, listed in {SETTING} "
            "(fetch them with `raya keys --save`)"
        )
    extra = sorted(user.handle for user in users if user.handle.lower() not in wanted)
    if extra:
        raise KeysError(f"{source}: has keys for {', '.join(extra)}, not listed in {SETTING}")
    return _sorted(users)
