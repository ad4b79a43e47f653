"""A model of the Hetzner Cloud API's rules that a replacement meets, and of what the hcloud
provider (pulumi-hcloud, a bridge of hetznercloud/terraform-provider-hcloud) asks of it.

Written from the API and the provider, not from what raya expects:
- A server's name is unique per project: a second one is refused with `uniqueness_error`
  (Hetzner Cloud API reference, "Errors"; hcloud-go `hcloud/error.go`,
  `ErrorCodeUniquenessError`).
- A private IP of a network is held by the server attached with it until that server leaves
  the network or is deleted: another server asking for it is refused with `ip_not_available`
  (hcloud-go `hcloud/error.go`, `ErrorCodeIPNotAvailable`).
- A volume is attached to one server at a time: attaching an attached volume is refused with
  `volume_already_attached`, "Volume is already attached to a server, detach first"
  (hcloud-go `hcloud/error.go`, `ErrorCodeVolumeAlreadyAttached`).
- Deleting a server detaches its volumes (API reference, "Delete a Server": attached volumes
  are detached, not deleted), and deletes it whatever it is doing: a running server is cut off.
- `shutdown_before_deletion` (terraform-provider-hcloud `internal/server/resource.go`,
  `resourceServerDelete`): the provider first sends an ACPI shutdown and waits for the server
  to be `off`, `control.Retry(control.DefaultRetries, ...)`: 5 tries, 1+2+4+8+16 s apart
  (`internal/util/control/retry.go`, hcloud's `ExponentialBackoff(2, 1s)`), about 31 s; then
  it gives up with a warning ("did not finish shutting down gracefully in time, deleting it
  anyways") and deletes it running. A shutdown is an ACPI request (API reference, "Shutdown
  a Server": "the server's OS must support ACPI"): a server whose OS does not act on it
  (`acpi` False: hung, or ignoring the button) stays `running`. Asking an `off` server to
  shut down changes nothing.
- A firewall applies to servers two ways (API reference, "Firewalls", `apply_to`, and
  "Apply to Resources"): directly (`type: server`) or by a label selector (`type:
  label_selector`), which applies it to every server whose labels match, those present and
  those created or relabelled later (`firewalls_of`). The API refuses to delete a firewall
  still applied to a resource: `resource_in_use`, "Firewall must not be in use to be deleted"
  (hcloud-go `hcloud/error.go`, `ErrorCodeResourceInUse`; API reference, "Delete a
  Firewall"). terraform-provider-hcloud `internal/firewall/resource.go`,
  `resourceFirewallDelete`, does not stop there: it first removes the firewall from every
  resource it is applied to, `AppliedTo`, label selectors and servers alike
  (`removeFromResources`, "Detach all Resources of the firewall before trying to delete
  it"), then deletes it, retrying `resource_in_use` and `conflict`: a server the firewall
  covered when the engine destroys it is left running behind no firewall
  (`remove_from_resources`, then `delete_firewall`). The same firewall on a server both ways
  is an ownership lock: Hetzner refuses to take it off by hand
  (`firewall_managed_by_label_selector`, "Firewall is applied via a Label Selector and
  cannot be removed manually", hcloud-go `hcloud/error.go`; hcloud-talos/
  terraform-hcloud-talos#494: every later modification of such a server is refused), so
  nothing here applies a firewall both ways.
- Deleting a server through the API (`DELETE /v1/servers/{id}`, API reference "Delete a
  Server") answers an action, `delete_server`, still running: the server is `deleting` until
  the action ends, and gone after (`delete_server_later`, done by `settle`).
- `hcloud_volume_attachment` (terraform-provider-hcloud, `resourceVolumeAttachmentCreate` and
  `resourceVolumeAttachmentDelete`): create attaches the volume to the server (its id is the
  volume's); delete detaches it if it is attached, and does nothing if it is not.

`log` keeps every call that changed something, in order, for the tests to read the sequence.
`on_create` is told each server created (a new VM that boots) and `on_delete` each server
deleted: what a Kubernetes stand-in needs to have that node go away and register again with
a new boot.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class HetznerError(Exception):
    """An API error: its `code` and message, as the API's error object carries them."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code


@dataclass
class Server:
    id: int
    name: str
    private_ips: tuple[str, ...]
    status: str = "running"
    acpi: bool = True  # its OS acts on an ACPI shutdown
    labels: dict[str, str] = field(default_factory=dict)
    firewalls: tuple[str, ...] = ()  # applied to it directly, by name (`firewalls_of`)
    # What `GET /v1/servers` says of it beyond that (API reference, "Servers"): the image it
    # was created from (its id; 0: none), when it was created (RFC 3339) and its type.
    image: int = 0
    created: str = "2026-12-01T00:00:00+00:00"
    server_type: str = "cx23"


@dataclass
class Volume:
    id: int
    name: str
    server: int | None = None  # the server it is attached to


@dataclass
class Hetzner:
    on_create: Callable[[str], None] = lambda name: None
    on_delete: Callable[[str], None] = lambda name: None
    servers: dict[int, Server] = field(default_factory=dict)
    # Each firewall's label selectors, by name (its `apply_to` of type `label_selector`).
    firewalls: dict[str, tuple[str, ...]] = field(default_factory=dict)
    volumes: dict[int, Volume] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    # What raya asked of Hetzner's HTTP API itself (tests/cloud/hetzner_api.py), not through
    # the provider: "shutdown <server>" for each shutdown action, "delete <server>" for each
    # delete.
    requests: list[str] = field(default_factory=list)
    # Servers being deleted through the API: id -> when (time.monotonic) the action ends.
    deleting: dict[int, float] = field(default_factory=dict)
    delete_seconds: float = 0.5  # how long a `delete_server` action runs
    _serial: int = 5000

    def _id(self) -> int:
        self._serial += 1
        return self._serial

    def server_named(self, name: str) -> Server | None:
        return next((s for s in self.servers.values() if s.name == name), None)

    def create_server(
        self,
        name: str,
        private_ips: tuple[str, ...],
        labels: dict[str, str] | None = None,
        firewalls: tuple[str, ...] = (),
    ) -> Server:
        if self.server_named(name) is not None:
            raise HetznerError("uniqueness_error", f"server name {name} is already used")
        held = {ip: s.name for s in self.servers.values() for ip in s.private_ips}
        for ip in private_ips:
            if ip in held:
                raise HetznerError(
                    "ip_not_available", f"IP {ip} is not available (held by {held[ip]})"
                )
        server = Server(
            self._id(), name, private_ips, labels=dict(labels or {}), firewalls=firewalls
        )
        self.servers[server.id] = server
        self.log.append(f"create server {name}")
        self.on_create(name)
        return server

    def shutdown_server(self, server_id: int) -> None:
        server = self._server(server_id)
        if server.status == "off":
            return
        if not server.acpi:
            self.log.append(f"shutdown server {server.name} (no effect)")
            return
        server.status = "off"
        self.log.append(f"shutdown server {server.name}")

    def delete_server(self, server_id: int) -> None:
        server = self._server(server_id)
        for volume in self.volumes.values():
            if volume.server == server_id:
                volume.server = None
                self.log.append(f"detach volume {volume.name} (server deleted)")
        del self.servers[server_id]
        self.log.append(f"delete server {server.name} ({server.status})")
        self.on_delete(server.name)

    def delete_server_later(self, server_id: int) -> None:
        """The API's delete: the server `deleting` now, gone `delete_seconds` later."""
        server = self._server(server_id)
        if server_id not in self.deleting:
            server.status = "deleting"
            self.deleting[server_id] = time.monotonic() + self.delete_seconds
            self.log.append(f"deleting server {server.name}")

    def settle(self) -> None:
        """Ends the `delete_server` actions whose time has come."""
        for server_id, due in sorted(self.deleting.items()):
            if time.monotonic() >= due:
                del self.deleting[server_id]
                if server_id in self.servers:
                    self.delete_server(server_id)

    def create_firewall(self, name: str, label_selectors: tuple[str, ...] = ()) -> None:
        if name in self.firewalls:
            raise HetznerError("uniqueness_error", f"firewall name {name} is already used")
        self.firewalls[name] = label_selectors
        self.log.append(f"create firewall {name}")

    def firewalls_of(self, server: Server) -> dict[str, str]:
        """The firewalls that apply to `server`, each with how: "server" (directly) or the
        label selector that selects it."""
        found = {name: "server" for name in server.firewalls}
        for name, selectors in sorted(self.firewalls.items()):
            for selector in selectors:
                if name not in found and selects(selector, server.labels):
                    found[name] = selector
        return found

    def remove_from_resources(self, name: str) -> None:
        """`POST /v1/firewalls/{id}/actions/remove_from_resources` of all it is applied to:
        its label selectors dropped (the servers they selected are no longer behind it),
        and it taken off each server it was applied to directly."""
        covered = sorted(s.name for s in self.servers.values() if name in self.firewalls_of(s))
        self._firewall(name)
        self.firewalls[name] = ()
        for server in self.servers.values():
            server.firewalls = tuple(f for f in server.firewalls if f != name)
        self.log.append(f"remove firewall {name} from {', '.join(covered) or 'no server'}")

    def delete_firewall(self, name: str) -> None:
        users = sorted(s.name for s in self.servers.values() if name in s.firewalls)
        users += [f"label selector {selector}" for selector in self._firewall(name)]
        if users:
            raise HetznerError(
                "resource_in_use",
                f"firewall {name} still applied to a resource ({', '.join(users)})",
            )
        del self.firewalls[name]
        self.log.append(f"delete firewall {name}")

    def _firewall(self, name: str) -> tuple[str, ...]:
        if name not in self.firewalls:
            raise HetznerError("not_found", f"firewall {name} not found")
        return self.firewalls[name]

    def create_volume(self, name: str) -> Volume:
        if any(v.name == name for v in self.volumes.values()):
            raise HetznerError("uniqueness_error", f"volume name {name} is already used")
        volume = Volume(self._id(), name)
        self.volumes[volume.id] = volume
        self.log.append(f"create volume {name}")
        return volume

    def delete_volume(self, volume_id: int) -> None:
        volume = self._volume(volume_id)
        del self.volumes[volume_id]
        self.log.append(f"delete volume {volume.name}")

    def attach(self, volume_id: int, server_id: int) -> None:
        volume, server = self._volume(volume_id), self._server(server_id)
        if volume.server is not None:
            raise HetznerError(
                "volume_already_attached",
                f"volume {volume.name} is already attached to a server, detach first",
            )
        volume.server = server_id
        self.log.append(f"attach volume {volume.name} to {server.name}")

    def detach(self, volume_id: int) -> None:
        volume = self._volume(volume_id)
        if volume.server is not None:
            volume.server = None
            self.log.append(f"detach volume {volume.name}")

    def _server(self, server_id: int) -> Server:
        if server_id not in self.servers:
            raise HetznerError("not_found", f"server {server_id} not found")
        return self.servers[server_id]

    def _volume(self, volume_id: int) -> Volume:
        if volume_id not in self.volumes:
            raise HetznerError("not_found", f"volume {volume_id} not found")
        return self.volumes[volume_id]

    def public_ipv4(self, server_id: int) -> str:
        return str(ipaddress.IPv4Address("203.0.113.0") + server_id % 250 + 1)


def selects(selector: str, labels: dict[str, str]) -> bool:
    """Whether a label selector of `key=value` terms, comma-separated (all must hold), selects
    `labels` (API reference, "Label Selector"); other forms are not modelled."""
    terms = selector.split(",")
    if not all(term.count("=") == 1 and "!" not in term for term in terms):
        raise AssertionError(f"label selector {selector!r}: only key=value terms are modelled")
    return all(labels.get(key) == value for key, value in (t.split("=") for t in terms))
