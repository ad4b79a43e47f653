"""Test helpers. In CI a missing real tool fails the test; elsewhere it skips it.
Remote APIs are played by `http_server` on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The example users' public keys by handle, as their GitHub keys pages serve them.
EXAMPLE_KEYS: dict[str, str] = json.loads(
    (REPO / "src" / "raya" / "model" / "example" / "keys.json").read_text()
)


def require_tool(name: str, path: str | None = None) -> str:
    """The path of tool `name` (or the file `path`); CI fails without it, a laptop skips."""
    found = path if path and os.access(path, os.X_OK) else shutil.which(name)
    if found:
        return found
    message = f"{name} is not installed (scripts/install-tools installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)



def require_root(reason: str) -> None:
    """Tests that need root (loop devices, network namespaces): CI fails without it."""
    if os.geteuid() != 0:
        message = f"{reason} need root"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


# A request's answer: (status, body), (status, body, Content-Type) or (status, body,
# Content-Type, other headers); None sends nothing, for a server that holds the request past
# the client's timeout.
Reply = (
    tuple[int, bytes] | tuple[int, bytes, str] | tuple[int, bytes, str, dict[str, str]] | None
)
Respond = Callable[[BaseHTTPRequestHandler], Reply]


def reply_parts(reply: Reply) -> tuple[int, bytes, str | None, dict[str, str]]:
    """A reply's status, body, Content-Type (None: not given) and other headers."""
    assert reply is not None
    items: tuple[object, ...] = reply
    kind = items[2] if len(items) > 2 else None
    headers = items[3] if len(items) > 3 else {}
    assert (kind is None or isinstance(kind, str)) and isinstance(headers, dict)
    return reply[0], reply[1], kind, headers


@contextlib.contextmanager
def http_server(
    respond: Respond, tls: ssl.SSLContext | None = None, address: tuple[str, int] = ("127.0.0.1", 0)
) -> Iterator[str]:
    """A server on `address` (127.0.0.1, a free port, unless a boot test's namespace gives
    another) answering every GET, POST, PATCH and DELETE with `respond`, over `tls` if given;
    its base URL (http:// or https://<host>:<port>)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reply = respond(self)
            if reply is None:
                return
            status, body, kind, headers = reply_parts(reply)
            self.send_response(status)
            if kind is not None:
                self.send_header("Content-Type", kind)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        # A POST, PATCH or DELETE is answered by `respond` too (it reads `command`); a body is
        # left unread.
        do_POST = do_PATCH = do_DELETE = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(ThreadingHTTPServer(address, Handler), tls) as url:
        yield url


@contextlib.contextmanager
def serving(server: ThreadingHTTPServer, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """`server` answering from a thread of its own, over `tls` if given, until the block
    ends; its base URL (http:// or https://<host>:<port>)."""
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"{'http' if tls is None else 'https'}://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def routes(mapping: Mapping[str, bytes | Respond]) -> Respond:
    """Answers by path: a body (200) or a responder; 404 for any other path. `mapping` is
    read at each request, so a test may change it while the server runs."""

    def respond(request: BaseHTTPRequestHandler) -> Reply:
        route = mapping.get(request.path)
        if route is None:
            return 404, b""
        return (200, route) if isinstance(route, bytes) else route(request)

    return respond
