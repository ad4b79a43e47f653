"""Outputs combined by chained applies: what `pulumi.Output.all` gives, for less work.

`Output.all` first makes a new output of each input (`Output.from_input`, pulumi/pulumi
`sdk/python/lib/pulumi/output.py`): an apply per output input, whose result is one more
output, and for a value that is a dict or a list an output per key and per item, each an
asyncio task the event loop runs. Per node (its secrets, host key, drift report) that made
tens of outputs; for 200 agents, most of the program's time. `gather` chains one apply per
input instead: the same values, secrecy (any input's), dependencies (every input's) and
known-ness (an unknown input leaves the result unknown and runs no later apply).
"""

from __future__ import annotations

from typing import Any

import pulumi


def gather(first: pulumi.Output[Any], *rest: pulumi.Output[Any]) -> pulumi.Output[tuple[Any, ...]]:
    """The values of the outputs, as a tuple in their order."""

    def step(done: tuple[Any, ...], left: tuple[pulumi.Output[Any], ...]) -> pulumi.Input[Any]:
        if not left:
            return done
        return left[0].apply(lambda value: step((*done, value), left[1:]))

    return first.apply(lambda value: step((value,), rest))
