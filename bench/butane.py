"""Benchmark: how many node-sized Butane configs per second `raya.butane` transpiles.

Not a test: it prints figures and ratios. Target: 1,000 node configs per second on
one core. The ratio to the real `butane` is measured side by side in the same run (one
process per config, as a caller would run it) when a `butane` binary is found (`--butane`,
else PATH); without one no ratio is printed, never one against an assumed figure.

    .venv/bin/python bench/butane.py [--nodes 200] [--rounds 9] [--butane PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.butane.divergent

from tests.butane.divergent import DIVERGENT

from raya.butane import transpile

TARGET = 1000.0
VECTORS = Path(__file__).resolve().parents[1] / "tests" / "butane" / "vectors"

# Shaped like 16-full-agent.bu plus the private NIC keyfile every raya node carries.
NODE = """\
variant: fcos
version: 1.4.0
passwd:
  users:
    - name: core
      ssh_authorized_keys:
        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{key} alice@example
storage:
  files:
    - path: /etc/hostname
      mode: 0644
      overwrite: true
      contents:
        inline: agent-{i}
    - path: /etc/rancher/k3s/config.yaml
      mode: 0600
      contents:
        inline: |
          server: https://10.0.1.10:6443
          token: "K10{ca}::server:{secret}"
          node-name: agent-{i}
          node-ip: 10.0.{hi}.{lo}
          flannel-iface: enp7s0
    - path: /etc/rancher/node/password
      mode: 0600
      contents:
        inline: "{password}\\n"
    - path: /etc/NetworkManager/system-connections/enp7s0.nmconnection
      mode: 0600
      contents:
        inline: |
          [connection]
          id=enp7s0
          type=ethernet
          interface-name=enp7s0

          [ethernet]
          mtu=1450

          [ipv4]
          method=manual
          address1=10.0.{hi}.{lo}/24
          route1=10.0.0.0/8,10.0.0.1
          route1_options=onlink=true
          may-fail=false
          never-default=true

          [ipv6]
          method=disabled
    - path: /etc/tmpfiles.d/k3s.conf
      mode: 0644
      contents:
        inline: |
          Z /var/usrlocal/bin/k3s - - -
systemd:
  units:
    - name: k3s-agent.service
      enabled: true
      contents: |
        [Unit]
        Description=Lightweight Kubernetes (agent)
        Wants=network-online.target
        After=network-online.target

        [Service]
        Type=notify
        ExecStart=/usr/local/bin/k3s agent
        Restart=always
        RestartSec=5s

        [Install]
        WantedBy=multi-user.target
    - name: zincati.service
      enabled: false
"""


def node_configs(count: int) -> list[str]:
    def digest(*parts: object) -> str:
        return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()

    return [
        NODE.format(i=i, hi=1 + (20 + i) // 250, lo=(20 + i) % 250 + 2, ca=digest("ca"),
                    secret=digest("secret")[:32], password=digest("password", i)[:32],
                    key=digest("key", i)[:24])
        for i in range(count)
    ]


def rate(texts: list[str], files_dir: Path | None, rounds: int) -> tuple[float, float]:
    """Configs per second of CPU time and of wall-clock time, best of `rounds` passes.

    CPU time is the figure for "one core": on a shared machine the wall clock also
    counts the time other processes held the core.
    """
    best_cpu = best_wall = float("inf")
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        for text in texts:
            transpile(text, files_dir)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return len(texts) / best_cpu, len(texts) / best_wall


def butane_rate(butane: str, texts: list[str], rounds: int) -> float:
    """Configs per second of the real `butane --strict`, one process per config, best of
    `rounds` passes (wall clock: its CPU time is spent in child processes)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for text in texts:
            subprocess.run([butane, "--strict"], input=text.encode(), capture_output=True,
                           check=True)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200, help="node configs to generate")
    parser.add_argument("--rounds", type=int, default=9, help="passes; the best one counts")
    parser.add_argument("--butane", default=shutil.which("butane"),
                        help="the real butane binary to compare with (default: PATH)")
    args = parser.parse_args()

    nodes = node_configs(args.nodes)
    size = sum(len(transpile(text)) for text in nodes) / len(nodes)
    node_rate, node_wall = rate(nodes, None, args.rounds)
    print(f"node configs: {args.nodes} x ~{size:,.0f} bytes of Ignition")
    print(f"  {node_rate:,.0f} configs/s of CPU time ({1000 / node_rate:.2f} ms each), "
          f"{node_wall:,.0f}/s wall clock")
    print(f"  {node_rate / TARGET:.2f}x the {TARGET:,.0f}/s target")
    if args.butane:
        real = butane_rate(args.butane, nodes, max(1, args.rounds // 3))
        print(f"  real butane ({args.butane}), side by side: {real:,.0f} configs/s wall clock; "
              f"raya {node_wall / real:.1f}x that (wall clock against wall clock)")
    else:
        print("  real butane: not found (--butane or PATH); no ratio measured")

    if VECTORS.is_dir():
        # The cases Butane accepts, less those raya still diverges on (some it refuses).
        cases = [p for p in sorted((VECTORS / "cases").glob("*.bu"))
                 if (VECTORS / "expected" / f"{p.stem}.ign").exists()
                 and p.stem not in DIVERGENT]
        texts = [p.read_text() for p in cases]
        vector_rate, _ = rate(texts * 20, VECTORS / "files", args.rounds)
        print(f"butane vectors: {len(texts)} cases Butane and raya accept, {vector_rate:,.0f} "
              "configs/s of CPU time")


if __name__ == "__main__":
    main()
