"""Pulumi mocks that behave like the providers: real keys and certificates, random secrets,
name servers, addresses, service account key files; and a state that persists between runs.

`run_program` runs the program once, isolated: a fresh mock monitor per run, the state
(what `pulumi up` would have stored) carried by the `Mocks` instance across runs.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import ipaddress
import json
import secrets
import string
import threading
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import pulumi
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.sync_await import _ensure_event_loop

from raya.nodes.identity import example_service_account_key

PROJECT = "raya-tests"
SECRET_SIG = (rpc._special_sig_key, rpc._special_secret_sig)


def is_secret(value: Any) -> bool:
    """Whether a resource input reached the mock as a Pulumi secret."""
    return isinstance(value, dict) and value.get(SECRET_SIG[0]) == SECRET_SIG[1]


def reveal(value: Any) -> Any:
    """A resource input with its secret wrappers removed."""
    if is_secret(value):
        return reveal(value["value"])
    if isinstance(value, dict):
        return {key: reveal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [reveal(item) for item in value]
    return value


class ProtectedError(Exception):
    """What the engine answers a replacement or deletion of a protected resource."""


@dataclass(frozen=True)
class Registered:
    typ: str
    name: str
    inputs: dict[str, Any]  # as the mock saw them: secrets still wrapped
    id: str
    outputs: dict[str, Any]
    secret_outputs: frozenset[str]  # additional_secret_outputs, as the engine receives them
    options: Options = field(default_factory=lambda: Options())


@dataclass(frozen=True)
class Options:
    """The resource options the engine (not the mocks) applies, as the monitor receives them."""

    ignore_changes: tuple[str, ...] = ()
    protect: bool = False
    retain_on_delete: bool = False
    delete_before_replace: bool | None = None  # None: not set in the program
    import_id: str = ""  # the `import_` option: the existing resource to adopt

    @classmethod
    def of(cls, request: Any) -> Options:
        """The options of a `RegisterResourceRequest`; `deleteBeforeReplaceDefined` tells an
        explicit False from an unset option (pulumi/pulumi `proto/pulumi/resource.proto`)."""
        defined = bool(request.deleteBeforeReplaceDefined or request.deleteBeforeReplace)
        return cls(
            tuple(request.ignoreChanges),
            bool(request.protect),
            bool(request.retainOnDelete),
            bool(request.deleteBeforeReplace) if defined else None,
            str(request.importId),
        )


@dataclass
class Stored:
    """One resource in the state: the inputs the engine stored (ignored ones kept), id, outputs."""

    inputs: str  # JSON
    id: str
    outputs: dict[str, Any]
    protect: bool = False


# The hcloud server's properties whose change re-creates it (the provider's ForceNew).
SERVER_FORCE_NEW = ("image", "location", "userData", "sshKeys", "datacenter")
SERVER_TYPE = "hcloud:index/server:Server"


@dataclass
class Zone:
    name: str
    dns_name: str


@dataclass
class Snapshot:
    id: int
    labels: dict[str, str]
    architecture: str = "x86"
    created: str = "2026-11-01T00:00:00+00:00"
    status: str = "available"


class RecordingMonitor(MockMonitor):
    """The mock monitor, also keeping each registration's `additionalSecretOutputs`: the
    option the engine applies to state and previews, which the mocks alone never see."""

    def __init__(self, mocks: ProviderMocks) -> None:
        super().__init__(mocks)
        self.provider_mocks = mocks

    def RegisterResource(self, request: Any) -> Any:
        with self.provider_mocks._lock:
            self.provider_mocks.secret_outputs[request.name] = frozenset(
                request.additionalSecretOutputs
            )
            self.provider_mocks.dependencies[request.name] = frozenset(request.dependencies)
            self.provider_mocks.options[request.name] = Options.of(request)
        return super().RegisterResource(request)  # type: ignore[no-untyped-call]


class ProviderMocks(pulumi.runtime.Mocks):
    """The providers raya uses, faked realistically; `state` is what `pulumi up` keeps.

    What the engine does with the state is played too: an input named in `ignore_changes`
    keeps its stored value; unchanged inputs keep the id and outputs; a server whose
    ForceNew input changed, or named in `force_replace` (`pulumi up --replace`, which keeps
    ignored inputs too), is re-created (listed in `replaced`); another changed server is
    updated in place; any other changed resource is re-created. `protect` is enforced as the
    engine does (pulumi/pulumi `pkg/resource/deploy/step_generator.go`,
    `continueStepsFromDiff`: no replacement of a resource protected in the state and in the
    program; `step.go`, `DeleteStep.Apply`: no deletion of a protected resource, so one the
    program no longer declares fails the run at its end). The order of a replacement's
    steps is not played here: `tests/cloud/program/engine.py` does.
    """

    def __init__(self, zones: list[Zone], snapshots: list[Snapshot]) -> None:
        self.zones = zones
        self.snapshots = snapshots
        self.state: dict[tuple[str, str], Stored] = {}  # by (type, name)
        self.resources: dict[str, Registered] = {}  # this run's resources by name
        self.secret_outputs: dict[str, frozenset[str]] = {}  # by resource name
        self.dependencies: dict[str, frozenset[str]] = {}  # URNs each waits for, by name
        self.options: dict[str, Options] = {}  # by resource name
        self.force_replace: frozenset[str] = frozenset()  # resource names, for the next run
        self.replaced: list[str] = []  # this run's re-created resources
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.primary_ips: dict[str, tuple[str, str]] = {}  # id -> (address, location)
        self.failure: Exception | None = None  # what failed this run, as the engine says it
        self._lock = threading.Lock()
        self._serial = 1000

    def call(self, args: pulumi.runtime.MockCallArgs) -> Any:
        with self._lock:
            self.calls.append((args.token, dict(args.args)))
        if args.token == "hcloud:index/getImages:getImages":
            return {"id": "images", "images": self._images(args.args)}
        if args.token == "gcp:dns/getManagedZones:getManagedZones":
            return {
                "id": f"projects/{PROJECT}/managedZones",
                "managedZones": [
                    {
                        "name": zone.name,
                        "dnsName": zone.dns_name,
                        "description": "",
                        "id": f"projects/{PROJECT}/managedZones/{zone.name}",
                        "managedZoneId": str(
                            int(hashlib.sha256(zone.name.encode()).hexdigest()[:12], 16)
                        ),
                        "nameServers": _name_servers(zone.name),
                        "visibility": "public",
                        "project": PROJECT,
                    }
                    for zone in self.zones
                ],
            }
        raise AssertionError(f"unexpected invoke {args.token}")

    def _images(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        """Hetzner's filtering; the order is unspecified, whatever `mostRecent` says."""
        wanted = dict(pair.split("=", 1) for pair in query["withSelector"].split(","))
        found = [
            snapshot
            for snapshot in self.snapshots
            if wanted.items() <= snapshot.labels.items()
            and snapshot.architecture in query.get("withArchitectures", [snapshot.architecture])
            and snapshot.status in query.get("withStatuses", [snapshot.status])
        ]
        return [
            {
                "id": snapshot.id,
                "name": "",
                "type": "snapshot",
                "architecture": snapshot.architecture,
                "labels": snapshot.labels,
                "created": snapshot.created,
                "description": "fcos",
                "osFlavor": "unknown",
                "osVersion": "",
                "rapidDeploy": False,
                "deprecated": "",
                "deprecationAnnounced": "",
                "isDeprecated": False,
                "unavailableAfter": "",
            }
            for snapshot in found
        ]

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        with self._lock:
            options = self.options[args.name]
            stored = self.state.get((args.typ, args.name))
            inputs = dict(args.inputs)
            if stored is not None:
                inputs = keep_ignored(inputs, json.loads(stored.inputs), options.ignore_changes)
            text = json.dumps(inputs, sort_keys=True, default=str)
            if stored is not None and args.name in self.force_replace:
                stored = None
            elif stored is not None and stored.inputs != text:
                old = json.loads(stored.inputs)
                if args.typ == SERVER_TYPE and all(
                    old.get(key) == inputs.get(key) for key in SERVER_FORCE_NEW
                ):
                    stored = Stored(text, stored.id, {**stored.outputs, **reveal(inputs)})
                else:
                    stored = None
            previous = self.state.get((args.typ, args.name))
            if stored is None:
                if previous is not None:
                    if previous.protect and options.protect:
                        self.failure = ProtectedError(
                            f"unable to replace resource {args.name} ({args.typ}) as it is "
                            "currently marked for protection"
                        )
                        raise self.failure
                    self.replaced.append(args.name)
                self._serial += 1
                id_, outputs = self._create(args.typ, args.name, reveal(inputs))
                stored = Stored(text, id_, outputs)
            stored = Stored(stored.inputs, stored.id, stored.outputs, options.protect)
            self.state[(args.typ, args.name)] = stored
            self.resources[args.name] = Registered(
                args.typ,
                args.name,
                args.inputs,
                stored.id,
                stored.outputs,
                self.secret_outputs[args.name],
                options,
            )
        return stored.id, stored.outputs

    def finish(self) -> None:
        """The end of an update: what the program no longer declares is deleted from the
        state; a protected one is refused, as the engine refuses it."""
        registered = {(r.typ, name) for name, r in self.resources.items()}
        gone = [key for key in self.state if key not in registered]
        refused = [f"{name} ({typ})" for typ, name in gone if self.state[(typ, name)].protect]
        if refused:
            raise ProtectedError(f"refusing to delete protected resource {', '.join(refused)}")
        for key in gone:
            del self.state[key]

    def _create(self, typ: str, name: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        serial = self._serial
        outputs = dict(inputs)
        if typ == "random:index/randomPassword:RandomPassword":
            alphabet = string.ascii_letters + string.digits
            outputs["result"] = "".join(
                secrets.choice(alphabet) for _ in range(int(inputs["length"]))
            )
        elif typ == "tls:index/privateKey:PrivateKey":
            outputs.update(_private_key(inputs))
        elif typ == "tls:index/selfSignedCert:SelfSignedCert":
            outputs["certPem"] = _self_signed(inputs)
        elif typ == "tls:index/certRequest:CertRequest":
            outputs["certRequestPem"] = _cert_request(inputs)
        elif typ == "tls:index/locallySignedCert:LocallySignedCert":
            outputs["certPem"] = _locally_signed(inputs)
        elif typ in ("hcloud:index/network:Network", "hcloud:index/placementGroup:PlacementGroup"):
            return str(serial), outputs
        elif typ == "hcloud:index/networkSubnet:NetworkSubnet":
            network = ipaddress.IPv4Network(inputs["ipRange"])
            outputs["gateway"] = "10.0.0.1"
            return f"{int(inputs['networkId'])}-{network}", outputs
        elif typ == "hcloud:index/primaryIp:PrimaryIp":
            # Hetzner picks the address from its pool when the primary IP is made (its API,
            # POST /primary_ips); here from the benchmarking range, one per primary IP.
            assert inputs["type"] == "ipv4" and inputs["assigneeType"] == "server", inputs
            outputs["ipAddress"] = str(ipaddress.IPv4Address("198.18.0.0") + serial)
            self.primary_ips[str(serial)] = (outputs["ipAddress"], inputs["location"])
            return str(serial), outputs
        elif typ == "hcloud:index/server:Server":
            outputs["ipv4Address"] = str(ipaddress.IPv4Address("203.0.113.0") + serial % 250 + 1)
            primary = (inputs.get("publicNets") or [{}])[0].get("ipv4")
            if primary is not None:
                # A server made with a primary IP has it as its public IPv4, and must be in
                # the primary IP's location (Hetzner's API, POST /servers `public_net.ipv4`;
                # primary IPs are bound to a location).
                address, location = self.primary_ips[str(int(primary))]
                assert location == inputs["location"], (name, location, inputs["location"])
                outputs["ipv4Address"] = address
            outputs["ipv6Address"] = f"2001:db8:{serial:x}::1"
            outputs["status"] = "running"
            return str(serial), outputs
        elif typ == "hcloud:index/placementGroup:PlacementGroup":
            return str(serial), outputs  # Hetzner numbers them, as it does servers
        elif typ == "hcloud:index/loadBalancer:LoadBalancer":
            # Hetzner gives a balancer its public IPv4 when it creates it (its API, POST
            # /load_balancers: `public_net.ipv4.ip`); here from the documentation range.
            outputs["ipv4"] = str(ipaddress.IPv4Address("192.0.2.0") + serial % 250 + 1)
            return str(serial), outputs
        elif typ == "hcloud:index/volume:Volume":
            outputs["linuxDevice"] = f"/dev/disk/by-id/scsi-0HC_Volume_{serial}"
            return str(serial), outputs
        elif typ == "gcp:dns/managedZone:ManagedZone":
            outputs["nameServers"] = _name_servers(inputs["name"])
            outputs["project"] = PROJECT
            return f"projects/{PROJECT}/managedZones/{inputs['name']}", outputs
        elif typ == "gcp:serviceaccount/account:Account":
            email = f"{inputs['accountId']}@{PROJECT}.iam.gserviceaccount.com"
            outputs.update(
                email=email,
                member=f"serviceAccount:{email}",
                name=f"projects/{PROJECT}/serviceAccounts/{email}",
                project=PROJECT,
                uniqueId=str(10**20 + serial),
            )
            return outputs["name"], outputs
        elif typ == "random:index/randomId:RandomId":
            outputs["hex"] = secrets.token_bytes(int(inputs["byteLength"])).hex()
        elif typ == "gcp:projects/iAMCustomRole:IAMCustomRole":
            # terraform-provider-google resource_google_project_iam_custom_role.go: the id and
            # `name` are `projects/<project>/roles/<role_id>`.
            project = inputs.get("project") or PROJECT
            outputs.update(name=f"projects/{project}/roles/{inputs['roleId']}", deleted=False)
            return outputs["name"], outputs
        elif typ == "gcp:serviceaccount/key:Key":
            outputs["privateKey"] = _service_account_key(inputs["serviceAccountId"])
        elif typ == "gcp:storage/bucket:Bucket":
            outputs.update(url=f"gs://{inputs['name']}", project=PROJECT)
            return inputs["name"], outputs
        elif typ == "gcp:storage/hmacKey:HmacKey":
            # Google's HMAC keys docs: a 61-character access ID ("GOOG1E" + 55 upper-case
            # letters and digits, for service accounts) and a 40-character base64 secret.
            alphabet = string.ascii_uppercase + string.digits
            outputs.update(
                accessId="GOOG1E" + "".join(secrets.choice(alphabet) for _ in range(55)),
                secret=base64.b64encode(secrets.token_bytes(30)).decode(),
                state="ACTIVE",
            )
        return f"{name}-{serial}", outputs


def keep_ignored(
    inputs: dict[str, Any], stored: dict[str, Any], paths: tuple[str, ...]
) -> dict[str, Any]:
    """`inputs` with the values of `paths` (`name` or `name["key"]`) taken from `stored`."""
    result = dict(inputs)
    for path in paths:
        name, _, rest = path.partition('["')
        if not rest:
            if name in stored:
                result[name] = stored[name]
            continue
        key = rest.removesuffix('"]')
        old = stored.get(name, {})
        inner = dict(reveal(result.get(name)) or {})
        if key in old:
            inner[key] = old[key]
        result[name] = inner
    return result


def _name_servers(zone: str) -> list[str]:
    shard = hashlib.sha256(zone.encode()).digest()[0] % 4 + 1
    return [f"ns-cloud-{letter}{shard}.googledomains.com." for letter in "abcd"]


def _private_key(inputs: dict[str, Any]) -> dict[str, str]:
    """The tls provider's PrivateKey outputs for the two algorithms raya asks for."""
    key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
    if inputs["algorithm"] == "ED25519":
        key = ed25519.Ed25519PrivateKey.generate()
        pem_format = serialization.PrivateFormat.PKCS8
    else:
        assert (inputs["algorithm"], inputs["ecdsaCurve"]) == ("ECDSA", "P256")
        key = ec.generate_private_key(ec.SECP256R1())
        pem_format = serialization.PrivateFormat.TraditionalOpenSSL
    public = key.public_key()
    return {
        "privateKeyPem": key.private_bytes(
            serialization.Encoding.PEM, pem_format, serialization.NoEncryption()
        ).decode(),
        "privateKeyOpenssh": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode(),
        "publicKeyPem": public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode(),
        # The provider ends the authorized_keys line with a newline.
        "publicKeyOpenssh": public.public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        ).decode()
        + "\n",
    }


def _subject(subject: dict[str, Any]) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, subject["commonName"])]
    if subject.get("organization"):
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, subject["organization"]))
    return x509.Name(attributes)


def _cert_request(inputs: dict[str, Any]) -> str:
    key = serialization.load_pem_private_key(inputs["privateKeyPem"].encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_subject(inputs["subject"]))
        .sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.PEM).decode()


def _locally_signed(inputs: dict[str, Any]) -> str:
    """What the tls provider makes of LocallySignedCert's inputs: the request's subject and
    key, signed by the CA, for the uses asked."""
    request = x509.load_pem_x509_csr(inputs["certRequestPem"].encode())
    ca_cert = x509.load_pem_x509_certificate(inputs["caCertPem"].encode())
    ca_key = serialization.load_pem_private_key(inputs["caPrivateKeyPem"].encode(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    uses = set(inputs["allowedUses"])
    extended = [ExtendedKeyUsageOID.CLIENT_AUTH] if "client_auth" in uses else []
    extended += [ExtendedKeyUsageOID.SERVER_AUTH] if "server_auth" in uses else []
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    builder = (
        x509.CertificateBuilder()
        .subject_name(request.subject)
        .issuer_name(ca_cert.subject)
        .public_key(request.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=int(inputs["validityPeriodHours"])))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(uses), critical=True)
    )
    if extended:
        builder = builder.add_extension(x509.ExtendedKeyUsage(extended), critical=False)
    return builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def _key_usage(uses: set[str]) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature="digital_signature" in uses,
        key_cert_sign="cert_signing" in uses,
        crl_sign="crl_signing" in uses,
        content_commitment=False,
        key_encipherment="key_encipherment" in uses,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def _self_signed(inputs: dict[str, Any]) -> str:
    """What the tls provider makes of SelfSignedCert's inputs."""
    key = serialization.load_pem_private_key(inputs["privateKeyPem"].encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, inputs["subject"]["commonName"])])
    uses = set(inputs["allowedUses"])
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=int(inputs["validityPeriodHours"])))
        .add_extension(
            x509.BasicConstraints(ca=bool(inputs.get("isCaCertificate")), path_length=None),
            critical=True,
        )
        .add_extension(_key_usage(uses), critical=True)
    )
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def _service_account_key(account_name: str) -> str:
    """A key file as GCP returns it: base64 of the JSON document."""
    email = account_name.rsplit("/", 1)[-1]
    return base64.b64encode(example_service_account_key(email, PROJECT).encode()).decode()


@dataclass
class Run:
    resources: dict[str, Registered]
    outputs: dict[str, Any]
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)

    def of_type(self, typ: str) -> dict[str, Registered]:
        return {name: r for name, r in self.resources.items() if r.typ == typ}


def run_program(
    mocks: ProviderMocks,
    program: Any,
    *,
    stack: str = "test",
    monitor: RecordingMonitor | None = None,
) -> Run:
    """Run `program()` once against `mocks`, in a fresh monitor; what it returns is taken as
    the stack outputs. `Run.replaced` lists the resources the run re-created; then
    `mocks.finish()` ends the update."""
    mocks.resources = {}
    mocks.secret_outputs = {}
    mocks.dependencies = {}
    mocks.options = {}
    mocks.replaced = []
    mocks.calls = []
    _quiet_abandoned_futures()
    pulumi.runtime.set_mocks(
        mocks,
        project="raya",
        stack=stack,
        preview=False,
        monitor=monitor or RecordingMonitor(mocks),
    )
    outputs: dict[str, Any] = {}

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def run() -> Awaitable[None]:
        exported = program()  # a dict of inputs, or an output of one, or None

        async def resolve() -> None:
            # As `pulumi.export` hands them to the engine at the end of the run (pulumi/pulumi
            # sdk/python/lib/pulumi/runtime/stack.py `Stack._finish` -> resource.py
            # `register_resource_outputs` -> rpc.py `serialize_properties`), and as
            # `pulumi stack output --show-secrets` reads them back: plain values.
            serialized = await rpc.serialize_properties({"outputs": exported}, {})
            outputs.update(reveal(rpc.deserialize_properties(serialized)).get("outputs") or {})

        return resolve()

    mocks.failure = None
    try:
        run()
    except Exception:
        _cancel_what_is_left()
        # The SDK reports a failed registration its own way: raise what the engine said.
        if mocks.failure is not None:
            raise mocks.failure from None
        raise
    if mocks.failure is not None:
        raise mocks.failure
    mocks.finish()
    return Run(
        resources=dict(mocks.resources),
        outputs=outputs,
        calls=list(mocks.calls),
        replaced=list(mocks.replaced),
    )


def _cancel_what_is_left() -> None:
    """A failed run stops with work pending: registrations and applies waiting on the failed
    output (an apply chained in `raya.cloud.program.outputs.gather` makes the next output of
    its chain only once it runs). Left on the event loop the next run shares, they would run
    and fail there; a `pulumi up` that fails ends its process instead. Cancelled here."""
    loop = _ensure_event_loop()  # type: ignore[no-untyped-call]
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def _quiet_abandoned_futures() -> None:
    """A failed run leaves derived outputs whose exception nobody awaits. Their finalizers would
    log a traceback whenever the garbage collector runs, and Python 3.11 formats tracebacks
    with `ast.parse`, which is not re-entrant: a collection inside another `ast.parse` (pytest
    rewriting an import) then fails with "AST constructor recursion depth mismatch". The run
    itself still raises the error; only these duplicates are dropped."""
    loop = _ensure_event_loop()  # type: ignore[no-untyped-call]

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != "Future exception was never retrieved":
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
