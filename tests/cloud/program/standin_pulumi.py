"""A stand-in `pulumi` CLI that answers for raya's own program, from the engine model's plan.

raya drives the CLI through the Automation API SDK (`raya.cloud.deploy`): the SDK runs
`pulumi preview | up | destroy --event-log FILE --color never ...` in the project folder, tails
the event log for the engine events (the SDK's file event log, used for CLI versions up to
3.205: pulumi `sdk/python/lib/pulumi/automation/_stack.py`, `_setup_event_log`, `_watch_logs`),
passes the CLI's stdout to raya line by line, then reads the update's result from
`stack history --json` and the outputs from `stack output --json [--show-secrets]`; raya
itself edits the state through `stack export` / `stack import`. This script plays that CLI
with the engine model of `engine.py`: each stack operation runs raya's real program
(`raya.cloud.program.main`, on the folder and the stack file it is run in) under Pulumi's mocks
through `EngineStack`, so the steps, their order, what a replacement or a protected resource
does, and what is left in the Hetzner model are the engine model's plan of raya's resources,
never a recording of another project. What it writes is the CLI's own protocol:

- the event log: one JSON engine event per line, as pulumi/pulumi
  `sdk/go/common/apitype/events.go` defines them (`EngineEvent`: `sequence`, `timestamp`, and
  one of `preludeEvent` {config}, `diagnosticEvent` {message, color, severity},
  `resourcePreEvent` / `resOutputsEvent` {metadata: `StepEventMetadata` {op, urn, type, old,
  new, provider}}, `summaryEvent` {maybeCorrupt, durationSeconds, resourceChanges,
  PolicyPacks}, and `cancelEvent`, which "is emitted when ... the update successfully
  completes"). A replacement is its engine steps: `create-replacement`, the logical
  `replace` and `delete-replaced` (pkg/resource/deploy/step_generator.go,
  `continueStepsFromDiff`: `NewCreateReplacementStep`, `NewReplaceStep`; the delete of the old
  half at the end, or first for delete-before-replace). The program's warnings (raya's drift
  reports, `pulumi.log.warn`) are diagnostic events of severity `warning`.
- the display on stdout, as the non-interactive display prints each step (pkg/backend/display
  `rows.go`, `ColorizedColumns`: the op's prefix, `deploy.RawPrefix`; the type's
  `tokens.Type.DisplayName`, `hcloud:index/server:Server` shown `hcloud:index:Server`; the
  name; the step's status), then `Resources:` and a count per operation. Simplified: a
  preview's rows say what an update's do ("creating", "created"), with no timings, and
  unchanged resources get no row; raya only passes the lines on.
- a failed update: the engine error on stderr as `error: ...`, exit status 255; the steps done
  stay done (the state keeps them).
- a destroy deletes every resource of the state, dependents first; a protected one is refused
  with the engine's own words (pkg/resource/deploy/step.go, `deleteProtectedError`), one
  retained on delete calls no provider (`DeleteStep.Apply`).
- `stack output --json`: secrets as `[secret]` unless `--show-secrets`.
- `config get KEY --json --stack S`: the value in the stack file `Pulumi.S.yaml` of the folder
  it runs in, `{"value": ..., "secret": ...}` (a `secure:` one decrypted, as the engine model
  reads it); a key the file does not set fails, exit 255 (pulumi/pulumi
  `pkg/cmd/pulumi/config/config.go`, `getConfig`: "configuration key '%s' not found for stack
  '%s'").
- the stack's secrets provider is a passphrase: a command that decrypts (`preview`, `up`,
  `destroy`, which load the stack's config and its state; `stack export --show-secrets`)
  fails, exit 255, without `PULUMI_CONFIG_PASSPHRASE` or `PULUMI_CONFIG_PASSPHRASE_FILE`, with
  the CLI's words (pulumi/pulumi `pkg/secrets/passphrase/manager.go`, `readPassphrase`: not
  interactive and neither variable set). The state is decrypted whole before anything runs
  (`pkg/resource/stack/deployment.go`, `DeserializeDeploymentV3`: every resource's secrets
  through `BatchDecrypt`), so no preview runs on a state it cannot decrypt.
- `stack export` without `--show-secrets` decrypts nothing (`pkg/cmd/pulumi/stack/
  stack_export.go`: only `--show-secrets` deserializes the deployment with the secrets
  provider; `pkg/backend/diy/backend.go`, `ExportDeployment`, marshals the checkpoint as
  stored): each resource's `outputs`, its secrets as their ciphertext
  (`{"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext":
  "v1:<nonce>:<sealed>"}`, `apitype.SecretV1`; AES-256-GCM, as `symmetricCrypter` seals).
  Which outputs are secret is the engine's rule: those whose input of the same name was
  secret (`pkg/resource/plugin/provider_plugin.go`, `annotateSecrets`), those named in
  `additionalSecretOutputs`, and those the providers' schemas mark secret
  (`PROVIDER_SECRETS`). Sealed at `up`, with a key from the passphrase it was given.

Run as `python -m tests.cloud.program.standin_pulumi ARGS` by a wrapper script named `pulumi`.
The backend is the folder $STANDIN_STATE (one file per stack: the engine model's state and
the Hetzner model's servers and volumes, `Backend`); $STANDIN_STACKS names the stacks that
exist. Each invocation appends its arguments (JSON, one line) to $STANDIN_LOG; a stack
operation also logs `["env", {RAYA_REPLACE: ...}]` (the program's environment as the CLI
received it) and `["printed", lines]` (its display); what `stack import` is given is logged
as `["imported", state]`.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import logging
import os
import pickle
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION = "v3.200.0"  # file event logs (the SDK switches to gRPC above 3.205)
# The display's prefix of each operation (pkg/resource/deploy/step.go, `RawPrefix`), and its
# status while it runs and once done (pkg/backend/display/progress.go).
PREFIX = {"create": "+ ", "update": "~ ", "delete": "- ", "replace": "+-",
          "create-replacement": "++", "delete-replaced": "--"}  # fmt: skip
RUNNING = {"create": "creating", "update": "updating", "delete": "deleting",
           "replace": "replacing", "create-replacement": "creating replacement",
           "delete-replaced": "deleting original"}  # fmt: skip
DONE = {"create": "created", "update": "updated", "delete": "deleted",
        "replace": "replaced", "create-replacement": "created replacement",
        "delete-replaced": "deleted original"}  # fmt: skip
# How an update's summary counts steps (pkg/engine: a replacement counts once, as `replace`).
COUNTED = {"create": "create", "same": "same", "update": "update", "replace": "replace",
           "delete": "delete"}  # fmt: skip

# The outputs each provider's schema marks secret (pulumi-random `RandomPassword.result`,
# pulumi-tls `PrivateKey.privateKey*`, pulumi-gcp `serviceaccount.Key.privateKey` and
# `storage.HmacKey.secret`): the provider returns them as secrets.
PROVIDER_SECRETS = {
    "random:index/randomPassword:RandomPassword": {"result", "bcryptHash"},
    "tls:index/privateKey:PrivateKey": {"privateKeyPem", "privateKeyOpenssh", "privateKeyPemPkcs8"},
    "gcp:serviceaccount/key:Key": {"privateKey"},
    "gcp:storage/hmacKey:HmacKey": {"secret"},
}
SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")
PASSPHRASE_MISSING = (
    "error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE or "
    "PULUMI_CONFIG_PASSPHRASE_FILE environment variables"
)


@dataclass
class Backend:
    """What the CLI's backend keeps of one stack: the engine model's state and ids, the Hetzner
    model's servers, firewalls and volumes, the last outputs and the history of updates."""

    snapshot: dict[str, Any] = field(default_factory=dict)  # engine.Resource by URN
    serial: int = 1000
    hetzner: dict[str, Any] = field(default_factory=dict)  # Hetzner's servers, firewalls, volumes
    outputs: dict[str, tuple[Any, bool]] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    # URN -> secret output -> its ciphertext, as the state stores it.
    sealed: dict[str, dict[str, str]] = field(default_factory=dict)


def backend_file(stack: str) -> Path:
    return Path(os.environ["STANDIN_STATE"]) / f"{stack}.pickle"


def load(stack: str) -> Backend:
    path = backend_file(stack)
    if not path.exists():
        return Backend()
    loaded: Backend = pickle.loads(path.read_bytes())
    return loaded


def save(stack: str, backend: Backend) -> None:
    path = backend_file(stack)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(backend))


def hetzner_of(backend: Backend) -> Any:
    """The Hetzner model holding the backend's servers and volumes."""
    from tests.cloud.program.hetzner import Hetzner

    hetzner = Hetzner()
    for name, value in backend.hetzner.items():
        setattr(hetzner, name, value)
    return hetzner


def keep_hetzner(backend: Backend, hetzner: Any) -> None:
    kept = ("servers", "firewalls", "volumes", "log", "_serial")
    backend.hetzner = {name: getattr(hetzner, name) for name in kept}


def option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def options(args: list[str], name: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == name]


def log(entry: Any) -> None:
    with open(os.environ["STANDIN_LOG"], "a") as out:
        out.write(json.dumps(entry) + "\n")


def display_type(typ: str) -> str:
    """`tokens.Type.DisplayName` (pulumi/pulumi sdk/go/common/tokens/tokens.go): the module's
    last path element dropped when it is the type's name in camel case."""
    parts = typ.split(":")
    if len(parts) != 3 or "/" not in parts[1]:
        return typ
    module, _, file = parts[1].rpartition("/")
    name = parts[2]
    return f"{parts[0]}:{module}:{name}" if file == name[:1].lower() + name[1:] else typ


class Events:
    """The event log and the display of one operation."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []

    def add(self, **event: Any) -> None:
        self.events.append({"sequence": len(self.events) + 1,
                            "timestamp": int(time.time()), **event})  # fmt: skip

    def step(self, op: str, urn: str, typ: str, old: Any, new: Any) -> None:
        def state(resource: Any) -> dict[str, Any] | None:
            if resource is None:
                return None
            return {"type": resource.typ, "urn": resource.urn, "custom": True,
                    "id": resource.id, "parent": "", "protect": resource.protect,
                    "retainOnDelete": resource.retain_on_delete,
                    "inputs": {}, "outputs": {}, "provider": ""}  # fmt: skip

        metadata = {"op": op, "urn": urn, "type": typ, "old": state(old), "new": state(new),
                    "provider": ""}  # fmt: skip
        self.add(resourcePreEvent={"metadata": metadata})
        self.add(resOutputsEvent={"metadata": metadata})
        if op in PREFIX:
            name = urn.rsplit("::", 1)[-1]
            for status in (RUNNING[op], DONE[op]):
                self.lines.append(f" {PREFIX[op]} {display_type(typ)} {name} {status} ")

    def finish(self, counts: dict[str, int], preview: bool) -> None:
        self.add(summaryEvent={"maybeCorrupt": False, "durationSeconds": 0,
                               "resourceChanges": counts, "PolicyPacks": {}})  # fmt: skip
        self.add(cancelEvent={})
        self.lines.append("Resources:")
        for op, count in sorted(counts.items()):
            if op == "same":
                self.lines.append(f"    {count} unchanged")
            else:
                verb = f"to {op}" if preview else DONE[op]
                self.lines.append(f"    {PREFIX[op]}{count} {verb}")

    def write(self, args: list[str]) -> None:
        if path := option(args, "--event-log"):
            Path(path).write_text("".join(json.dumps(e) + "\n" for e in self.events))
        sys.stdout.write("".join(line + "\n" for line in self.lines))
        log(["printed", self.lines])


@contextmanager
def warnings_logged(events: Events) -> Iterator[None]:
    """The program's `pulumi.log.warn`s (under mocks, the root logger's warnings) as the
    engine's diagnostic events."""

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            events.add(diagnosticEvent={"message": record.getMessage() + "\n",
                                        "color": "never", "severity": "warning"})  # fmt: skip

    handler = Handler(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def passphrase() -> str | None:
    """The passphrase the CLI was given, as `readPassphrase` looks for it (an empty variable
    counts: `os.LookupEnv`)."""
    if "PULUMI_CONFIG_PASSPHRASE" in os.environ:
        return os.environ["PULUMI_CONFIG_PASSPHRASE"]
    if path := os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE"):
        return Path(path).read_text()
    return None


def seal(engine: Any, phrase: str) -> dict[str, dict[str, str]]:
    """Each resource's secret outputs as the state stores them: sealed with AES-256-GCM under
    a key from the passphrase, a fresh nonce each, `v1:<nonce>:<sealed>` in base64."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from tests.cloud.program.mocks import is_secret

    key = AESGCM(hashlib.sha256(phrase.encode()).digest())
    sealed: dict[str, dict[str, str]] = {}
    for resource in engine.snapshot.values():
        registered = engine.resources.get(resource.name)
        secret = set(PROVIDER_SECRETS.get(resource.typ, ()))
        if registered is not None:
            secret |= {name for name, value in registered.inputs.items() if is_secret(value)}
            secret |= set(registered.secret_outputs)
        for name in sorted(secret & set(resource.outputs)):
            nonce = os.urandom(12)
            text = json.dumps(resource.outputs[name]).encode()
            parts = (base64.b64encode(nonce).decode(),
                     base64.b64encode(key.encrypt(nonce, text, None)).decode())  # fmt: skip
            sealed.setdefault(resource.urn, {})[name] = "v1:{}:{}".format(*parts)
    return sealed


def export(stack: str, show_secrets: bool) -> dict[str, Any]:
    """`stack export`: each resource with its outputs, secrets sealed unless `show_secrets`
    (then in clear, `plaintext`, as `SerializeDeployment` with `ShowSecrets` writes them)."""
    backend = load(stack)
    resources = []
    for r in backend.snapshot.values():
        sealed = backend.sealed.get(r.urn, {})
        outputs = {
            name: {SECRET_SIG[0]: SECRET_SIG[1], "plaintext": json.dumps(value)}
            if show_secrets and name in sealed
            else {SECRET_SIG[0]: SECRET_SIG[1], "ciphertext": sealed[name]}
            if name in sealed
            else value
            for name, value in r.outputs.items()
        }
        resources.append({"urn": r.urn, "type": r.typ, "id": r.id, "outputs": outputs,
                          "protect": r.protect, "retainOnDelete": r.retain_on_delete})  # fmt: skip
    return {"version": 3, "deployment": {"resources": resources}}


def update(args: list[str], stack: str, preview: bool) -> int:
    """`pulumi preview | up`: raya's program through the engine model, on the stored state (a
    copy of it, left as it was, for a preview)."""
    from pulumi import automation as auto

    from tests.cloud.program.engine import EngineStack

    backend = load(stack)
    work = copy.deepcopy(backend) if preview else backend
    hetzner = hetzner_of(work)
    excluded = set(options(args, "--exclude")) if "--exclude-dependents" in args else set()
    engine = excluding_engine(hetzner, stack, excluded)
    engine.snapshot, engine._serial = work.snapshot, work.serial
    before = dict(work.snapshot)
    events = Events()
    events.add(preludeEvent={"config": {}})
    failure = None
    with warnings_logged(events):
        try:
            # In the folder the SDK runs the CLI in: the project's.
            EngineStack(engine, Path.cwd()).up(
                replace=options(args, "--replace"),
                target=options(args, "--target") or None,
                target_dependents="--target-dependents" in args,
            )
        except auto.CommandError as error:  # EngineStack's: the engine's `error:` line
            (failure,) = [line[line.index("error:") :] for line in str(error).splitlines()
                          if "error:" in line]  # fmt: skip
    counts = emit_steps(events, engine.steps, before, engine.snapshot, engine.goals)
    events.finish(counts, preview)
    events.write(args)
    if not preview:
        backend.serial = engine._serial
        backend.sealed = seal(engine, passphrase() or "")
        record(stack, backend, hetzner, "update", counts, failure, dict(engine.exported))
    return ended(failure)


def record(
    stack: str, backend: Backend, hetzner: Any, kind: str, counts: dict[str, int],
    failure: str | None, outputs: dict[str, Any],
) -> None:  # fmt: skip
    """What an update or destroy leaves in the backend: Hetzner's servers, the outputs (only
    when it succeeded), a line of history."""
    keep_hetzner(backend, hetzner)
    if failure is None:
        backend.outputs = outputs
    backend.history.append({"kind": kind, "changes": counts,
                            "result": "failed" if failure else "succeeded"})  # fmt: skip
    save(stack, backend)


def ended(failure: str | None) -> int:
    """The CLI's exit: the engine's error on stderr and 255, or 0."""
    if failure is not None:
        print(failure, file=sys.stderr)
        return 255
    return 0


def emit_steps(
    events: Events,
    steps: list[tuple[str, str]],
    before: dict[str, Any],
    after: dict[str, Any],
    goals: dict[str, Any],
) -> dict[str, int]:
    """Each step of the engine model as its engine events; the summary's counts."""
    by_name = {r.name: r for r in before.values()}
    counts: dict[str, int] = {}
    for op, name in steps:
        goal = goals.get(name)
        urn = goal.urn if goal is not None else by_name[name].urn
        old, new = before.get(urn), after.get(urn)
        held = new if new is not None else old  # a delete's is the old, others' the new
        assert held is not None, urn
        typ: str = held.typ
        events.step(op, urn, typ, old if op != "create" else None, new)
        if op == "create-replacement":
            events.step("replace", urn, typ, old, new)
            op = "replace"
        if op in COUNTED:
            counts[COUNTED[op]] = counts.get(COUNTED[op], 0) + 1
    return counts


def excluding_engine(hetzner: Any, stack: str, excluded: set[str]) -> Any:
    """The engine model, run with `--exclude URN --exclude-dependents`: the excluded
    resources and every resource depending on them are left as they are, neither updated
    nor deleted (pulumi `pkg/resource/deploy/step_generator.go` and
    `deployment_executor.go`, `ExcludeDependents`)."""
    from tests.cloud.program.engine import Engine
    from tests.cloud.program.test_program import provider_mocks

    class Excluding(Engine):
        def finish(self) -> None:
            kept = set(excluded)
            for resource in self.snapshot.values():  # dependency order: dependents later
                if resource.dependencies & kept:
                    kept.add(resource.urn)
            self._registered |= kept
            super().finish()

    example = provider_mocks()
    return Excluding(hetzner, example.zones, example.snapshots, stack=stack)


def destroy(args: list[str], stack: str) -> int:
    """`pulumi destroy`: every resource of the state deleted, dependents first; a protected
    one refused, as `DeleteStep.Apply` refuses it."""
    from tests.cloud.program.engine import Engine
    from tests.cloud.program.test_program import provider_mocks

    backend = load(stack)
    hetzner = hetzner_of(backend)
    example = provider_mocks()
    engine = Engine(hetzner, example.zones, example.snapshots, stack=stack)
    events = Events()
    events.add(preludeEvent={"config": {}})
    counts: dict[str, int] = {}
    failure = None
    for resource in reversed(list(backend.snapshot.values())):
        if resource.protect:
            failure = (
                f'error: resource "{resource.urn}" cannot be deleted\nbecause it is protected. '
                "To unprotect the resource, either remove the `protect` flag from the resource "
                "in your Pulumi program and run `pulumi up`, or use the command:\n"
                f"`pulumi state unprotect '{resource.urn}'`"
            )
            break
        engine._delete_step(resource, "delete")
        events.step("delete", resource.urn, resource.typ, resource, None)
        del backend.snapshot[resource.urn]
        counts["delete"] = counts.get("delete", 0) + 1
    events.finish(counts, preview=False)
    events.write(args)
    record(stack, backend, hetzner, "destroy", counts, failure, {})
    return ended(failure)


def config_get(key: str, stack: str) -> int:
    import yaml

    from tests.cloud.program.engine import _config_text

    document = yaml.safe_load(Path(f"Pulumi.{stack}.yaml").read_text())
    value = (document.get("config") or {}).get(key)
    if value is None:
        print(f"error: configuration key '{key}' not found for stack '{stack}'", file=sys.stderr)
        return 255
    secret = isinstance(value, dict) and "secure" in value
    print(json.dumps({"value": _config_text(value), "secret": secret}))
    return 0


def main(args: list[str]) -> int:
    # The SDK puts this first on every command line; the rest is what was asked.
    if args[:1] == ["--non-interactive"]:
        args = args[1:]
    log(args)
    stack = option(args, "--stack") or ""
    decrypts = args[:1] in (["preview"], ["up"], ["destroy"]) or (
        args[:2] == ["stack", "export"] and "--show-secrets" in args
    )
    if decrypts and passphrase() is None:
        print(PASSPHRASE_MISSING, file=sys.stderr)
        return 255
    if args[:1] == ["version"]:
        print(VERSION)
    elif args[:2] == ["stack", "select"] and stack not in os.environ["STANDIN_STACKS"].split():
        print(f"error: no stack named '{stack}' found", file=sys.stderr)
        return 255
    elif args[:1] in (["preview"], ["up"]):
        log(["env", {"RAYA_REPLACE": os.environ.get("RAYA_REPLACE")}])
        return update(args, stack, preview=args[0] == "preview")
    elif args[:1] == ["destroy"]:
        log(["env", {"RAYA_REPLACE": os.environ.get("RAYA_REPLACE")}])
        return destroy(args, stack)
    elif args[:2] == ["stack", "output"]:
        shown = "--show-secrets" in args
        print(json.dumps({name: value if shown or not secret else "[secret]"
                          for name, (value, secret) in load(stack).outputs.items()}))  # fmt: skip
    elif args[:2] == ["config", "get"]:
        return config_get(args[2], stack)
    elif args[:2] == ["stack", "export"]:
        print(json.dumps(export(stack, "--show-secrets" in args)))
    elif args[:2] == ["stack", "import"]:
        state = json.loads(Path(str(option(args, "--file"))).read_text())
        log(["imported", state])
        backend = load(stack)
        for exported in state["deployment"]["resources"]:
            resource = backend.snapshot[exported["urn"]]
            resource.protect = bool(exported.get("protect"))
            resource.retain_on_delete = bool(exported.get("retainOnDelete"))
        save(stack, backend)
    elif args[:2] == ["stack", "history"]:
        print(json.dumps([
            {"kind": entry["kind"], "startTime": "2026-12-01T07:30:53.000000Z", "message": "",
             "environment": {}, "config": {}, "result": entry["result"],
             "endTime": "2026-12-01T07:31:15.000000Z", "version": version,
             "resourceChanges": entry["changes"]}
            for version, entry in reversed(list(enumerate(load(stack).history, 1)))
        ][:1]))  # fmt: skip
    return 0


if __name__ == "__main__":
    # By its module name, not as `__main__`: the backend's pickles name their classes.
    from tests.cloud.program import standin_pulumi

    sys.exit(standin_pulumi.main(sys.argv[1:]))
