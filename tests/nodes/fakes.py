"""Inputs for the node tests and the benchmark: the example project, and many users."""

from __future__ import annotations

import base64
import dataclasses
import random
import struct

from raya.model.fleet import Cluster
from raya.nodes.github_keys import UserKeys, parse_user_keys


def rsa4096_key(rng: random.Random) -> str:
    """A well-formed `ssh-rsa` public key line with a random 4096-bit modulus.

    Not a usable key, but the exact size and entropy of a real one, which is what the
    size budget is about; generating 150 real RSA-4096 keys would take minutes.
    """

    def string(data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + data

    modulus = (rng.getrandbits(4096) | (1 << 4095) | 1).to_bytes(512, "big")
    blob = string(b"ssh-rsa") + string(b"\x01\x00\x01") + string(b"\x00" + modulus)
    return "ssh-rsa " + base64.b64encode(blob).decode()


def many_users(
    count: int, keys_each: int = 3, seed: int = 0, *, long_handles: bool = False
) -> tuple[UserKeys, ...]:
    """`count` users (user-00, user-01, ...; or, with `long_handles`, 39 random letters and
    digits, GitHub's longest logins and the worst case for size: nothing for gzip to share)
    each holding `keys_each` RSA-4096 keys."""
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return tuple(
        parse_user_keys(
            "".join(rng.choice(alphabet) for _ in range(39)) if long_handles else f"user-{i:02d}",
            "".join(rsa4096_key(rng) + "\n" for _ in range(keys_each)),
            "fakes",
        )
        for i in range(count)
    )


def with_users(cluster: Cluster, users: tuple[UserKeys, ...]) -> Cluster:
    """`cluster` with raya:authorizedUsers set to exactly `users`' handles."""
    handles = tuple(user.handle for user in users)
    return dataclasses.replace(
        cluster, config=dataclasses.replace(cluster.config, authorized_users=handles)
    )
