"""The boot tests' stand-in for the private Hetzner load balancer in front of several control
planes (raya.cloud.program.placement): a TCP service on the registration address that sends
each connection to a target passing its TCP health check, round robin, from the balancer's
own private address (Hetzner's docs, "Load Balancers": TCP services forward connections as
they are, without proxy protocol unless asked; a target whose health check fails receives
no new connections; targets are reached over the private network with `use_private_ip`).

The health check runs every HEALTH_INTERVAL seconds (Hetzner's runs at the service's
`interval`, 5 s in raya's program): faster here so the test takes less time, the same rule.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

HEALTH_INTERVAL = 0.5
HEALTH_TIMEOUT = 1.0


@dataclass
class Balancer:
    address: ipaddress.IPv4Address
    port: int
    targets: Sequence[ipaddress.IPv4Address]
    # (seconds since start, client address, target address or "none healthy")
    log: list[tuple[float, str, str]] = field(default_factory=list)
    _healthy: list[ipaddress.IPv4Address] = field(default_factory=list)
    _turn: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    @contextlib.contextmanager
    def running(self) -> Iterator[Balancer]:
        """Listen and check health; call inside the namespace the balancer lives in: the
        threads it starts stay there."""
        start = time.monotonic()
        listener = socket.create_server((str(self.address), self.port))
        threads = [
            threading.Thread(target=self._check, daemon=True),
            threading.Thread(target=self._accept, args=(listener, start), daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            listener.close()

    @property
    def healthy(self) -> list[ipaddress.IPv4Address]:
        """The targets that passed the last health check."""
        return list(self._healthy)

    def _check(self) -> None:
        while not self._stop.is_set():
            healthy = []
            for target in self.targets:
                try:
                    with socket.create_connection((str(target), self.port), HEALTH_TIMEOUT):
                        healthy.append(target)
                except OSError:
                    pass
            self._healthy = healthy
            self._stop.wait(HEALTH_INTERVAL)

    def _accept(self, listener: socket.socket, start: float) -> None:
        while not self._stop.is_set():
            try:
                client, (peer, _) = listener.accept()
            except OSError:
                return
            healthy = list(self._healthy)
            if not healthy:
                self.log.append((time.monotonic() - start, peer, "none healthy"))
                client.close()
                continue
            target = healthy[self._turn % len(healthy)]
            self._turn += 1
            self.log.append((time.monotonic() - start, peer, str(target)))
            threading.Thread(target=self._forward, args=(client, target), daemon=True).start()

    def _forward(self, client: socket.socket, target: ipaddress.IPv4Address) -> None:
        try:
            upstream = socket.create_connection(
                (str(target), self.port), HEALTH_TIMEOUT, source_address=(str(self.address), 0)
            )
        except OSError:
            client.close()
            return

        def pipe(source: socket.socket, sink: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := source.recv(65536):
                    sink.sendall(data)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
        back.start()
        pipe(client, upstream)
        back.join()
        client.close()
        upstream.close()
