"""A model of the Pulumi engine's update, planning each resource's steps as the engine does, and
applying them step by step through provider models to the Hetzner model (`hetzner.py`).

The program is the real one, run under Pulumi's mocks: every registration reaches `new_resource`
with the goal the SDK sent the monitor (options included); the engine model decides that
resource's steps, applies them, and answers with the id and outputs the step produced. Written
from pulumi/pulumi `pkg/resource/deploy/step_generator.go` and `step.go`, not from what raya
expects:

- `generateSteps`: a resource with no old state is created. One deleted earlier in this update
  as a dependent of a delete-first replacement ("recreating") is created again. One with an old
  state takes the old values of its `ignoreChanges` paths (`processIgnoreChanges`), then is
  diffed.
- `diff`: a resource named in the replace targets (`pulumi up --replace`, the Automation API's
  `replace=`) gets "replace, blaming the id" without the provider being asked; otherwise the
  provider's Diff decides (none, update in place, or replace, with its own delete-first wish).
- `continueStepsFromDiff`: a replacement of a resource protected in the goal *and* the old
  state is refused ("unable to replace resource ... as it is currently marked for protection");
  `deleteBeforeReplace` set in the goal overrides the provider's wish, and without either the
  replacement is create-first: the new resource is created, and the old one deleted at the end
  of the update (its delete step is generated after all creates and updates). Delete-first
  deletes, in reverse dependency order, the dependents that the deletion would replace
  (`calculateDependentReplacements`: each resource whose property depends on one in the
  replace set, and whose provider Diff with those properties unknown says replace), refusing
  if one is protected; then deletes the old resource, then creates the new one.
- `GenerateDeletes` / `ScheduleDeletes`: at the end, resources of the old state not registered
  again, and the old halves of create-first replacements, are deleted, dependents first.
- `step.go`, `DeleteStep.Apply`: deleting a protected resource is refused, unless as part of a
  replacement (checked above); deleting one with `retainOnDelete` calls no provider.
- Targets (`pulumi up --target URN [--target-dependents]`, the Automation API's `target=` and
  `target_dependents=`): `isTargetedForUpdate` makes a resource targeted when its URN is
  a target or, with dependents, when one of its dependencies (`GetAllDependencies`: here its
  dependencies and property dependencies) is targeted already (`targetsActual`, filled in
  registration order, so a dependent of a dependent is targeted too).
  `continueStepsFromImport`: an untargeted resource with an old state gets a SameStep of
  its old state, no Check nor Diff asked of its provider, so the program reads its old
  outputs; one without an old state is a skipped create, kept out of the state, and a
  targeted step depending on it fails the update (`validateSteps`, "untargeted create").
  `GenerateDeletes`: only targeted resources are deleted
  (`determineAllowedResourcesToDeleteFromTargets`). The root stack is always targeted
  (`isImplicitlyTargetedResource`): the outputs are the program's.
- A failed step ends the update (`pulumi up` exits non-zero); the steps done stay done.
- Import (`generateSteps`: a goal with an ID, `import_`, and no old state, or an old state of
  another import ID): an import step reads the resource through the provider (`step.go`,
  `ImportStep.Apply`: nothing read is "resource '<id>' does not exist"), stores what was read
  with the goal's import ID, then the normal steps run against it as the old state: its
  `ignoreChanges` paths keep what was read, a difference is an update, a replacement is
  refused ("previously-imported resources that still specify an ID may not be replaced"),
  and no difference adds no step. An old state of the same import ID is no import.
- Destroy (`pulumi destroy`, `deployment_executor.go` with `DestroyProgram`): no program
  runs, every resource of the state is deleted by `GenerateDeletes`, dependents first, with
  `DeleteStep.Apply`'s rules: a protected one refused ("cannot be deleted because it is
  protected"), one with `retainOnDelete` dropped from the state and left in the cloud.

The provider models answer Diff with the properties each provider's schema marks ForceNew
(hcloud: `terraform-provider-hcloud` server and volume attachment schemas; gcp: the record
set's name, type and zone) and, like pulumi-terraform-bridge `pkg/tfbridge/provider.go` `Diff`
for a resource whose `name` is set explicitly, ask for delete-first on a replacement they
compute. Creates and deletes of hcloud servers, volumes, attachments and firewalls go to the
Hetzner model; a firewall's delete is the provider's (terraform-provider-hcloud
`internal/firewall/resource.go`, `resourceFirewallDelete`): taken off every resource it is
applied to, label selectors included (`Hetzner.remove_from_resources`), then deleted;
buckets to the Cloud Storage model (`gcs.py`: create, read for an import, delete); other
resources get the outputs `ProviderMocks` computes.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pulumi
import pytest
import yaml
from pulumi import automation as auto

from raya.cloud import deploy
from raya.cloud.program import main
from tests.cloud import hetzner_api
from tests.cloud.program.gcs import Storage, StorageError
from tests.cloud.program.hetzner import Hetzner, HetznerError
from tests.cloud.program.mocks import (
    SERVER_FORCE_NEW,
    SERVER_TYPE,
    Options,
    ProtectedError,
    ProviderMocks,
    RecordingMonitor,
    Registered,
    Run,
    Snapshot,
    Zone,
    keep_ignored,
    reveal,
    run_program,
)

VOLUME_TYPE = "hcloud:index/volume:Volume"
ATTACHMENT_TYPE = "hcloud:index/volumeAttachment:VolumeAttachment"
RECORD_TYPE = "gcp:dns/recordSet:RecordSet"
FIREWALL_TYPE = "hcloud:index/firewall:Firewall"
BUCKET_TYPE = "gcp:storage/bucket:Bucket"
# The properties whose change re-creates the resource, per provider schema (ForceNew); any
# change of a type not listed re-creates it.
FORCE_NEW: dict[str, tuple[str, ...]] = {
    SERVER_TYPE: SERVER_FORCE_NEW,
    VOLUME_TYPE: ("location", "format"),
    ATTACHMENT_TYPE: ("serverId", "volumeId", "automount"),
    RECORD_TYPE: ("name", "type", "managedZone", "project"),
    # terraform-provider-google `services/storage/resource_storage_bucket.go`, the schema.
    BUCKET_TYPE: ("name", "location", "project"),
}
# Optional and Computed in the provider's schema: left out of the inputs, the provider keeps
# the value it has (the bridge's Diff is Terraform's plan, which takes a computed attribute's
# prior value when the configuration omits it: pulumi-terraform-bridge `pkg/tfbridge/
# provider.go`, `Diff`). terraform-provider-google `resource_storage_bucket.go`: `project`.
COMPUTED: dict[str, tuple[str, ...]] = {BUCKET_TYPE: ("project",)}
UNKNOWN = object()  # a property whose value the engine does not know yet


class EngineError(Exception):
    """The update failed: what the CLI prints as its last `error:` line."""


@dataclass
class Resource:
    """One resource of the state (the engine's `resource.State`)."""

    urn: str
    typ: str
    name: str
    id: str
    inputs: dict[str, Any]  # revealed
    outputs: dict[str, Any]
    protect: bool
    retain_on_delete: bool
    dependencies: frozenset[str]  # URNs
    property_dependencies: dict[str, frozenset[str]]  # property -> URNs
    import_id: str = ""  # the ID it was imported by (the state's `importID`)


@dataclass(frozen=True)
class Goal:
    """What the monitor receives with a registration besides the inputs."""

    urn: str
    options: Options
    dependencies: frozenset[str]
    property_dependencies: dict[str, frozenset[str]]


@dataclass(frozen=True)
class Diff:
    changes: bool
    replace: bool = False
    delete_before_replace: bool = False  # the provider's wish


class GoalMonitor(RecordingMonitor):
    """The mock monitor, also keeping what the engine plans with: the URN, the options
    and the property dependencies of each registration."""

    def __init__(self, mocks: Engine) -> None:
        super().__init__(mocks)
        self.engine = mocks

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """As the engine makes it (pulumi/pulumi `sdk/go/common/resource/urn.go`, `NewURN`):
        a child of the root stack carries no parent type, unlike the mock monitor's."""
        root = parent.split("::")[2] == "pulumi:pulumi:Stack" if parent else False
        return str(super().make_urn("" if root else parent, type_, name))

    def RegisterResource(self, request: Any) -> Any:
        urn = self.make_urn(request.parent, request.type, request.name)
        with self.engine._lock:
            self.engine.goals[request.name] = Goal(
                urn,
                Options.of(request),
                frozenset(request.dependencies),
                {
                    key: frozenset(deps.urns)
                    for key, deps in request.propertyDependencies.items()
                },
            )
        return super().RegisterResource(request)


class Engine(ProviderMocks):
    """The engine model: `state` (by URN, in dependency order) persists across updates;
    `steps` lists the last update's steps in the order they ran (operation, resource name)."""

    def __init__(
        self,
        hetzner: Hetzner,
        zones: list[Zone],
        snapshots: list[Snapshot],
        *,
        project: str = "raya",
        stack: str = "prod",
    ) -> None:
        super().__init__(zones, snapshots)
        self.hetzner, self.project, self.stack = hetzner, project, stack
        self.storage = Storage()
        self.snapshot: dict[str, Resource] = {}  # by URN, in dependency order
        self.goals: dict[str, Goal] = {}
        self.steps: list[tuple[str, str]] = []
        self.exported: dict[str, tuple[Any, bool]] = {}  # stack outputs: (value, secret)
        self._targets: frozenset[str] = frozenset()
        # `--target`: None for an update of every resource.
        self._update_targets: frozenset[str] | None = None
        self._target_dependents = False
        self._targets_actual: set[str] = set()
        self._skipped_creates: set[str] = set()
        self._registered: set[str] = set()
        self._recreate: set[str] = set()  # URNs deleted as dependents of a delete-first replace
        self._condemned: list[Resource] = []  # old halves of create-first replacements

    # The update

    def update(
        self,
        program: Callable[[], Any],
        *,
        replace: Collection[str] = (),
        target: Collection[str] | None = None,
        target_dependents: bool = False,
    ) -> Run:
        """`pulumi up` of `program` with the replace targets `replace` (URNs), only the
        resources `target` (URNs; None: all) and, with `target_dependents`, what depends on
        them; raises EngineError when a step fails, with the steps done kept."""
        self.steps, self.exported = [], {}
        self._targets, self._registered = frozenset(replace), set()
        self._update_targets = None if target is None else frozenset(target)
        self._target_dependents = target_dependents
        self._targets_actual, self._skipped_creates = set(), set()
        self._recreate, self._condemned = set(), []
        self.goals = {}
        return run_program(self, program, stack=self.stack, monitor=GoalMonitor(self))

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        with self._lock:
            goal = self.goals[args.name]
            self._registered.add(goal.urn)
            try:
                new = self._step(args, goal)
            except (EngineError, HetznerError, StorageError) as error:
                self.failure = EngineError(f"{args.name}: {error}")
                raise self.failure from None
            self.resources[args.name] = Registered(
                args.typ,
                args.name,
                args.inputs,
                new.id,
                new.outputs,
                self.secret_outputs[args.name],
                goal.options,
            )
            return new.id, new.outputs

    def _step(self, args: pulumi.runtime.MockResourceArgs, goal: Goal) -> Resource:
        old = self.snapshot.get(goal.urn)
        inputs = reveal(dict(args.inputs))
        recreating = goal.urn in self._recreate
        if old is not None and not recreating:
            inputs = keep_ignored(inputs, old.inputs, goal.options.ignore_changes)
        new = Resource(
            goal.urn,
            args.typ,
            args.name,
            "",
            inputs,
            {},
            goal.options.protect,
            goal.options.retain_on_delete,
            goal.dependencies,
            goal.property_dependencies,
        )
        if recreating:
            self._recreate.discard(goal.urn)
            return self._create_step(new, "create-replacement")
        import_id = goal.options.import_id
        imported = bool(import_id) and (old is None or (old.import_id or old.id) != import_id)
        if imported:
            if old is not None:
                raise AssertionError(f"{goal.urn}: an import replacing a resource: not modelled")
            old = self._import_step(new, import_id)
            inputs = keep_ignored(inputs, old.inputs, goal.options.ignore_changes)
        if not self._targeted(goal):
            if old is None:  # a skipped create: nothing made, nothing in the state
                self._skipped_creates.add(goal.urn)
                return new
            return self._keep(old)  # a SameStep of the old state: its old outputs
        skipped = sorted(self._depends_on(goal) & self._skipped_creates)
        if skipped:
            raise EngineError(
                f"Resource '{goal.urn}' depends on '{skipped[0]}' which was was not specified "
                "in --target list."
            )
        if old is None:
            return self._create_step(new, "create")
        if goal.urn in self._targets:
            diff = Diff(changes=True, replace=True)  # "replace, blaming the id": no provider
        else:
            diff = provider_diff(old, inputs)
        if not diff.changes and imported:
            return old  # the import step was its step
        if not diff.changes:
            return self._keep(
                replace(
                    old,
                    protect=new.protect,
                    retain_on_delete=new.retain_on_delete,
                    dependencies=new.dependencies,
                    property_dependencies=new.property_dependencies,
                )
            )
        if not diff.replace:
            self.steps.append(("update", new.name))
            updated = replace(
                old,
                inputs=inputs,
                outputs={**old.outputs, **inputs},
                protect=new.protect,
                retain_on_delete=new.retain_on_delete,
                dependencies=new.dependencies,
                property_dependencies=new.property_dependencies,
            )
            return self._keep(updated)
        if new.protect and old.protect:
            raise EngineError(
                f"unable to replace resource {goal.urn} as it is currently marked for protection"
            )
        if import_id:
            raise EngineError(
                "previously-imported resources that still specify an ID may not be replaced; "
                "please remove the `import` declaration from your program"
            )
        delete_first = (
            goal.options.delete_before_replace
            if goal.options.delete_before_replace is not None
            else diff.delete_before_replace
        )
        if delete_first:
            for dependent in reversed(self._dependent_replacements(old)):
                if dependent.protect:
                    raise EngineError(
                        f"unable to replace resource {dependent.urn} as part of replacing "
                        f"{goal.urn} as it is currently marked for protection"
                    )
                self._delete_step(dependent, "delete-replaced")
                self._recreate.add(dependent.urn)
            self._delete_step(old, "delete-replaced")
            return self._create_step(new, "create-replacement")
        created = self._create_step(new, "create-replacement")
        self._condemned.append(old)
        return created

    @staticmethod
    def _depends_on(goal: Goal) -> set[str]:
        """`GetAllDependencies`: its dependencies and property dependencies (raya's program
        sets no parents, providers nor deletedWith)."""
        found = set(goal.dependencies)
        for urns in goal.property_dependencies.values():
            found |= urns
        return found

    def _targeted(self, goal: Goal) -> bool:
        """`isTargetedForUpdate`, recording a targeted resource in `targetsActual`."""
        if self._update_targets is None:
            return True
        hit = goal.urn in self._update_targets or (
            self._target_dependents and bool(self._depends_on(goal) & self._targets_actual)
        )
        if hit:
            self._targets_actual.add(goal.urn)
        return hit

    def _dependent_replacements(self, root: Resource) -> list[Resource]:
        """`calculateDependentReplacements`: the old state's dependents of `root` (in dependency
        order) that a change of the properties depending on the replace set would replace."""
        replacing = {root.urn}
        found: list[Resource] = []
        after = list(self.snapshot.values())
        for resource in after[after.index(root) + 1 :]:
            if resource.urn in self._registered:
                continue  # registered again already: it no longer depends on the root
            unknown = {
                key
                for key, deps in resource.property_dependencies.items()
                if deps & replacing and key in resource.inputs
            }
            if not unknown:
                continue
            changed = {**resource.inputs, **dict.fromkeys(unknown, UNKNOWN)}
            if provider_diff(resource, changed).replace:
                found.append(resource)
                replacing.add(resource.urn)
        return found

    def _import_step(self, resource: Resource, import_id: str) -> Resource:
        """`ImportStep.Apply`: the provider's Read of `import_id`, stored as the state."""
        read = self._read(resource.typ, import_id)
        if read is None:
            raise EngineError(f"resource '{import_id}' does not exist")
        id_, inputs = read
        self.steps.append(("import", resource.name))
        imported = replace(resource, id=id_, inputs=inputs, outputs=dict(inputs),
                           import_id=import_id)  # fmt: skip
        self.snapshot[resource.urn] = imported
        return imported

    def _read(self, typ: str, import_id: str) -> tuple[str, dict[str, Any]] | None:
        if typ != BUCKET_TYPE:
            raise AssertionError(f"{typ}: import not modelled")
        inputs = self.storage.read_bucket(import_id)
        return None if inputs is None else (str(inputs["name"]), inputs)

    def destroy(self) -> None:
        """`pulumi destroy`: every resource of the state deleted, dependents first."""
        self.steps, self.exported = [], {}
        self._registered, self._condemned, self.resources = set(), [], {}
        self.finish()

    def finish(self) -> None:
        """The deletions after every create and update: the old halves of create-first
        replacements and what the program no longer declares, dependents first."""
        gone = [r for r in self.snapshot.values() if r.urn not in self._registered]
        if self._update_targets is not None:  # `determineAllowedResourcesToDeleteFromTargets`
            allowed = self._update_targets | (
                self._targets_actual if self._target_dependents else set()
            )
            gone = [r for r in gone if r.urn in allowed]
        doomed = self._condemned + gone
        for resource in reversed(self._dependency_order(doomed)):
            replacing = resource in self._condemned
            if resource.protect and not replacing:
                raise EngineError(f"refusing to delete protected resource '{resource.urn}'")
            self._delete_step(resource, "delete-replaced" if replacing else "delete")
            if resource in gone:
                del self.snapshot[resource.urn]

    def _dependency_order(self, resources: list[Resource]) -> list[Resource]:
        order = {urn: i for i, urn in enumerate(self.snapshot)}
        return sorted(resources, key=lambda r: order.get(r.urn, -1))

    def _keep(self, resource: Resource) -> Resource:
        if ("update", resource.name) not in self.steps:
            self.steps.append(("same", resource.name))
        self.snapshot[resource.urn] = resource
        return resource

    # The provider models

    def _create_step(self, resource: Resource, op: str) -> Resource:
        self._serial += 1
        inputs = resource.inputs
        if resource.typ == SERVER_TYPE:
            ips = tuple(str(net["ip"]) for net in inputs.get("networks") or [])
            server = self.hetzner.create_server(inputs["name"], ips, inputs.get("labels"))
            outputs = {
                **inputs,
                "ipv4Address": self.hetzner.public_ipv4(server.id),
                "ipv6Address": f"2001:db8:{server.id:x}::1",
                "status": server.status,
            }
            created = replace(resource, id=str(server.id), outputs=outputs)
        elif resource.typ == VOLUME_TYPE:
            volume = self.hetzner.create_volume(inputs["name"])
            outputs = {**inputs, "linuxDevice": f"/dev/disk/by-id/scsi-0HC_Volume_{volume.id}"}
            created = replace(resource, id=str(volume.id), outputs=outputs)
        elif resource.typ == ATTACHMENT_TYPE:
            # Its id is the volume's (terraform-provider-hcloud, volume attachment resource).
            volume_id = int(inputs["volumeId"])
            self.hetzner.attach(volume_id, int(inputs["serverId"]))
            created = replace(resource, id=str(volume_id), outputs=dict(inputs))
        elif resource.typ == FIREWALL_TYPE:
            selectors = tuple(str(a["labelSelector"]) for a in inputs.get("applyTos") or [])
            self.hetzner.create_firewall(str(inputs["name"]), selectors)
            id_, outputs = self._create(resource.typ, resource.name, inputs)
            created = replace(resource, id=id_, outputs=outputs)
        elif resource.typ == BUCKET_TYPE:
            stored = self.storage.create_bucket(inputs)
            id_, outputs = self._create(resource.typ, resource.name, inputs)
            created = replace(resource, id=id_, outputs={**outputs, **stored})
        else:
            id_, outputs = self._create(resource.typ, resource.name, inputs)
            created = replace(resource, id=id_, outputs=outputs)
        self.steps.append((op, resource.name))
        self.snapshot.pop(resource.urn, None)
        self.snapshot[resource.urn] = created
        return created

    def _delete_step(self, resource: Resource, op: str) -> None:
        self.steps.append((op, resource.name))
        if resource.retain_on_delete:
            return
        if resource.typ == SERVER_TYPE:
            if resource.inputs.get("shutdownBeforeDeletion"):
                self.hetzner.shutdown_server(int(resource.id))
            self.hetzner.delete_server(int(resource.id))
        elif resource.typ == VOLUME_TYPE:
            self.hetzner.delete_volume(int(resource.id))
        elif resource.typ == ATTACHMENT_TYPE:
            self.hetzner.detach(int(resource.id))
        elif resource.typ == FIREWALL_TYPE:
            self.hetzner.remove_from_resources(str(resource.inputs["name"]))
            self.hetzner.delete_firewall(str(resource.inputs["name"]))
        elif resource.typ == BUCKET_TYPE:
            self.storage.delete_bucket(resource.id)

    # The Automation API's view of the state

    def export(self) -> auto.Deployment:
        return auto.Deployment(
            version=3,
            deployment={
                "resources": [
                    {
                        "urn": r.urn,
                        "type": r.typ,
                        "id": r.id,
                        "protect": r.protect,
                        "retainOnDelete": r.retain_on_delete,
                    }
                    for r in self.snapshot.values()
                ]
            },
        )

    def import_(self, state: auto.Deployment) -> None:
        """Takes back the `protect` and `retainOnDelete` flags of an exported state (the only
        fields raya edits)."""
        for exported in (state.deployment or {}).get("resources", []):
            resource = self.snapshot[exported["urn"]]
            resource.protect = bool(exported.get("protect"))
            resource.retain_on_delete = bool(exported.get("retainOnDelete"))


def provider_diff(old: Resource, inputs: Mapping[str, Any]) -> Diff:
    """The provider's Diff: replace when a ForceNew property changes (or may: unknown), with
    delete-first asked for a resource whose `name` is set (pulumi-terraform-bridge); a
    COMPUTED property the inputs leave out is no change."""
    kept = {key for key in COMPUTED.get(old.typ, ()) if key not in inputs}
    changed = {
        key
        for key in (set(old.inputs) | set(inputs)) - kept
        if inputs.get(key, None) is UNKNOWN or old.inputs.get(key) != inputs.get(key)
    }
    if not changed:
        return Diff(changes=False)
    force_new = FORCE_NEW.get(old.typ)
    replaces = bool(changed & set(force_new)) if force_new is not None else True
    named = "name" in old.inputs
    return Diff(changes=True, replace=replaces, delete_before_replace=replaces and named)




def _config_text(value: Any) -> str:
    """A stack setting as the program receives it: text, lists and booleans as JSON text, a
    `secure:` value decrypted. The model's secrets provider: `secure` holds the value in
    base64 (Pulumi's passphrase provider encrypts; the program only ever sees the value)."""
    if isinstance(value, dict) and set(value) == {"secure"}:
        return base64.b64decode(value["secure"]).decode()
    return value if isinstance(value, str) else json.dumps(value)


class EngineStack:
    """What `raya.cloud.deploy` asks of an `auto.Stack`, answered by the engine model running
    the real program (`raya.cloud.program.main`) on the project folder as `pulumi up` runs it:
    the stack file's `config` (lists and booleans as JSON text, as Pulumi stores them), the
    workspace's environment variables, `replace=` as the update's replace targets. A failed
    update raises `auto.CommandError` with the CLI's `error:` line, as the SDK does."""

    def __init__(self, engine: Engine, root: Path) -> None:
        self.engine, self.root = engine, root
        self.workspace = SimpleNamespace(env_vars={})
        self.calls: list[tuple[str, tuple[str, ...]]] = []  # (operation, replace targets)
        self.targets: list[tuple[str, ...] | None] = []  # each update's `target=`

    def open(self) -> EngineStack:
        """The stack as `deploy.open_stack` gives it: in a new workspace (no environment
        variables left from an earlier command), on the same backend state."""
        self.workspace = SimpleNamespace(env_vars={})
        return self

    def up(
        self,
        *,
        replace: Collection[str] = (),
        target: Collection[str] | None = None,
        target_dependents: bool = False,
        on_output: Callable[[str], None] | None = None,
        **display: Any,
    ) -> auto.UpResult:
        self.calls.append(("up", tuple(replace)))
        self.targets.append(None if target is None else tuple(target))
        document = yaml.safe_load((self.root / f"Pulumi.{self.engine.stack}.yaml").read_text())
        config = {key: _config_text(value) for key, value in document["config"].items()}
        saved = {name: os.environ.get(name) for name in self.workspace.env_vars}
        os.environ.update(self.workspace.env_vars)
        pulumi.runtime.set_all_config(config)
        try:
            run = self.engine.update(
                self._program, replace=replace, target=target,
                target_dependents=target_dependents,
            )  # fmt: skip
        except (EngineError, ProtectedError) as error:
            raise auto.CommandError(
                auto.CommandResult(stdout="", stderr=f"error: {error}", code=255)
            ) from None
        finally:
            pulumi.runtime.set_all_config({})
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        self.engine.exported = {name: (pair[0], pair[1]) for name, pair in run.outputs.items()}
        for op, name in self.engine.steps:
            if on_output is not None:
                on_output(f"{op} {name}")
        return auto.UpResult("", "", _summary(self.engine.steps), self.outputs())

    def _program(self) -> dict[str, Any]:
        """`main`, then its exports (the root stack's outputs), each with its secrecy."""
        main(self.root)
        stack = pulumi.runtime.get_root_resource()
        assert isinstance(stack, pulumi.runtime.stack.Stack)
        exported = {}
        for name, value in stack.outputs.items():
            output = pulumi.Output.from_input(value)
            secret: Any = output.is_secret()  # an awaitable, which from_input takes
            exported[name] = pulumi.Output.all(
                pulumi.Output.unsecret(output), pulumi.Output.from_input(secret)
            )
        return exported

    def destroy(
        self, *, on_output: Callable[[str], None] | None = None, **display: Any
    ) -> auto.DestroyResult:
        """`pulumi destroy`: runs no program; a failed step raises as the SDK does."""
        self.calls.append(("destroy", ()))
        try:
            self.engine.destroy()
        except (EngineError, HetznerError, StorageError) as error:
            raise auto.CommandError(
                auto.CommandResult(stdout="", stderr=f"error: {error}", code=255)
            ) from None
        for op, name in self.engine.steps:
            if on_output is not None:
                on_output(f"{op} {name}")
        return auto.DestroyResult("", "", _summary(self.engine.steps))

    def get_config(self, key: str) -> auto.ConfigValue:
        """`pulumi config get`: the stack file's value; a key it does not set fails, as the
        CLI does (standin_pulumi.py, `config_get`)."""
        document = yaml.safe_load((self.root / f"Pulumi.{self.engine.stack}.yaml").read_text())
        value = (document.get("config") or {}).get(key)
        if value is None:
            message = f"error: configuration key '{key}' not found for stack '{self.engine.stack}'"
            raise auto.CommandError(auto.CommandResult(stdout="", stderr=message, code=255))
        return auto.ConfigValue(value=_config_text(value), secret=isinstance(value, dict))

    def export_stack(self) -> auto.Deployment:
        self.calls.append(("export", ()))
        return self.engine.export()

    def import_stack(self, state: auto.Deployment) -> None:
        self.calls.append(("import", ()))
        self.engine.import_(state)

    def outputs(self) -> dict[str, auto.OutputValue]:
        return {
            name: auto.OutputValue(value=value, secret=secret)
            for name, (value, secret) in self.engine.exported.items()
        }


# The engine's operation names for the steps, as an update's summary counts them.
_SUMMARY_OPS = {
    "import": "import",
    "create": "create",
    "same": "same",
    "update": "update",
    "create-replacement": "replace",
    "delete": "delete",
}


def _summary(steps: list[tuple[str, str]]) -> auto.UpdateSummary:
    counts: dict[str, int] = {}
    for op, _ in steps:
        if op in _SUMMARY_OPS:
            counts[_SUMMARY_OPS[op]] = counts.get(_SUMMARY_OPS[op], 0) + 1
    return update_summary("update", counts)


def update_summary(kind: str, changes: Mapping[Any, int]) -> auto.UpdateSummary:
    """A finished update's summary as the SDK gives it, with `changes` per operation."""
    return auto.UpdateSummary(
        kind=kind,
        start_time=None,  # type: ignore[arg-type]
        message="",
        environment={},
        config={},
        result="succeeded",
        end_time=None,
        version=1,
        deployment=None,
        resource_changes=dict(changes),
    )


@dataclass
class Cloud:
    """A project deployed through the engine model: `raya.cloud.deploy` opens `stack`."""

    hetzner: Hetzner
    engine: Engine
    stack: EngineStack
    root: Path

    def up(self, *replace: str) -> None:
        deploy.run("up", self.root, self.engine.stack, lambda line: None, replace=replace)

    def since(self, mark: int) -> list[str]:
        """Hetzner's log from entry `mark` on."""
        return self.hetzner.log[mark:]


def deployed_cloud(
    root: Path, monkeypatch: pytest.MonkeyPatch, zones: list[Zone], snapshots: list[Snapshot]
) -> Cloud:
    """Stack `prod` of the project at `root`, deployed once by `raya.cloud.deploy.run`."""
    hetzner = Hetzner()
    engine = Engine(hetzner, zones, snapshots)
    stack = EngineStack(engine, root)
    monkeypatch.setattr(deploy, "open_stack", lambda root, name, create: stack.open())
    # The engine is the CLI too: raya looks for one before naming refused input.
    monkeypatch.setattr(deploy, "pulumi_command", lambda: None)
    # Hetzner's API on 127.0.0.1 (the `hetzner_api` fixture) answers for this model's servers.
    monkeypatch.setattr(hetzner_api, "MODEL", hetzner)
    cloud = Cloud(hetzner, engine, stack, root)
    cloud.up()
    return cloud
