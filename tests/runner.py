"""`invoke`: run `raya ARGS` in this process as the console script runs it (`raya.cli.main`),
with `input` on stdin and `env` set, capturing stdout, stderr and the exit status."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from raya.cli import main


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str
    output: str  # stdout and stderr as they were interleaved, as a terminal shows them
    exception: BaseException | None  # what made raya exit non-zero: its error, or the exit


class _Stream(io.StringIO):
    """One of the two streams: what it gets goes to `both` too."""

    def __init__(self, both: io.StringIO) -> None:
        super().__init__()
        self.both = both

    def write(self, text: str) -> int:
        self.both.write(text)
        return super().write(text)


def invoke(
    args: Sequence[str], input: str | None = None, env: Mapping[str, str] | None = None
) -> Result:
    """`raya ARGS`: its exit status (0 when it returned) and what it wrote. An exception
    raya does not handle goes on to the test."""
    both = io.StringIO()
    out, err = _Stream(both), _Stream(both)
    saved = {name: os.environ.get(name) for name in env or {}}
    os.environ.update(env or {})
    streams = (sys.stdin, sys.stdout, sys.stderr)
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(input or ""), out, err
    exception: BaseException | None = None
    try:
        main(list(args))
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
        # raya exits while handling its error (a RayaError, a usage error): that error
        exception = (exit.__context__ or exit) if code else None
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        for name, value in saved.items():
            with contextlib.suppress(KeyError):
                del os.environ[name]
            if value is not None:
                os.environ[name] = value
    return Result(code, out.getvalue(), err.getvalue(), both.getvalue(), exception)
