"""Outputs pass the real ignition-validate (3.3.0) and Ignition's JSON schemas (3.3-3.5)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from raya.butane import transpile
from tests.butane.divergent import DIVERGENT
from tests.butane.helpers import schema_errors, vectors
from tests.support import require_tool

# Every section raya's transpiler supports, in one config; {version} is filled in.
KITCHEN_SINK = """\
variant: fcos
version: {version}
ignition:
  timeouts:
    http_total: 30
  proxy:
    http_proxy: http://proxy.example:3128
    https_proxy: https://proxy.example:3129
    no_proxy: [localhost]
  security:
    tls:
      certificate_authorities:
        - inline: |
            -----BEGIN CERTIFICATE-----
            MIIB
            -----END CERTIFICATE-----
kernel_arguments:
  should_exist: [mitigations=auto]
  should_not_exist: [quiet]
passwd:
  users:
    - name: core
      ssh_authorized_keys: [ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq0 alice@example]
      groups: [wheel]
    - name: k3s
      uid: 1500
      system: true
      no_create_home: true
      shell: /sbin/nologin
  groups:
    - name: k3s
      gid: 1500
storage:
  disks:
    - device: /dev/sdb
      wipe_table: true
      partitions:
        - label: data
          number: 1
          size_mib: 0
  filesystems:
    - device: /dev/disk/by-partlabel/data
      path: /var/lib/data
      format: xfs
      label: data
      with_mount_unit: true
      mount_options: [noatime]
  directories:
    - path: /etc/rancher/node
      mode: 0700
  files:
    - path: /etc/hostname
      overwrite: true
      mode: 0644
      contents:
        inline: agent-1
    - path: /etc/motd
      append:
        - inline: "hello\\n"
    - path: /etc/remote
      contents:
        source: https://example.com/file
        verification:
          hash: sha512-{sha512}
        http_headers:
          - name: Authorization
            value: Bearer x
    - path: /etc/owned
      user:
        name: core
      group:
        id: 1500
      contents:
        local: hello.txt
  links:
    - path: /etc/localtime
      target: ../usr/share/zoneinfo/UTC
  trees:
    - local: tree
      path: /opt/tree
systemd:
  units:
    - name: k3s.service
      enabled: true
      contents: |
        [Service]
        ExecStart=/usr/local/bin/k3s agent
        [Install]
        WantedBy=multi-user.target
      dropins:
        - name: 10-env.conf
          contents: |
            [Service]
            Environment=A=1
    - name: docker.socket
      mask: true
"""


def _files_dir(tmp_path: Path) -> Path:
    files = tmp_path / "files"
    (files / "tree" / "bin").mkdir(parents=True)
    (files / "hello.txt").write_text("hello\n")
    (files / "tree" / "a.conf").write_text("a=1\n")
    script = files / "tree" / "bin" / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    os.symlink("a.conf", files / "tree" / "link.conf")
    return files


def _sink(version: str, tmp_path: Path) -> str:
    text = KITCHEN_SINK.format(version=version, sha512="ab" * 64)
    return transpile(text, _files_dir(tmp_path))


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    tool = require_tool("ignition-validate")
    return subprocess.run([tool, str(path)], capture_output=True, text=True, check=False)


@pytest.mark.tools
@pytest.mark.parametrize("case", ["01-minimal-user", "03-inline-small", "06-nmconnection",
                                  "11-units", "16-full-agent"])
def test_vector_outputs_pass_ignition_validate(case: str, tmp_path: Path) -> None:
    text = (vectors() / "cases" / f"{case}.bu").read_text()
    out = tmp_path / "config.ign"
    out.write_text(transpile(text, vectors() / "files"))
    assert json.loads(out.read_text())["ignition"]["version"] == "3.3.0"
    result = _validate(out)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.tools
def test_kitchen_sink_passes_ignition_validate(tmp_path: Path) -> None:
    out = tmp_path / "config.ign"
    out.write_text(_sink("1.4.0", tmp_path))
    result = _validate(out)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.tools
def test_ignition_validate_does_reject_a_broken_config(tmp_path: Path) -> None:
    # The check above would be worthless if the tool accepted anything.
    out = tmp_path / "config.ign"
    out.write_text('{"ignition":{"version":"3.3.0"},"storage":{"files":[{"path":"x"}]}}')
    result = _validate(out)
    # Refused for what is wrong, not for an unreadable file or an unknown flag.
    assert result.returncode == 1
    assert "error at $.storage.files.0.path, line 1 col 61: path not absolute" in (
        result.stdout + result.stderr
    )


@pytest.mark.parametrize("version", ["1.4.0", "1.5.0", "1.6.0"])
def test_kitchen_sink_matches_the_ignition_schema(version: str, tmp_path: Path) -> None:
    config = json.loads(_sink(version, tmp_path))
    assert schema_errors(config) == []
    units = [u["name"] for u in config["systemd"]["units"]]
    assert units[0] == "var-lib-data.mount"  # generated units come first, like Butane
    assert {f["path"] for f in config["storage"]["files"]} >= {
        "/opt/tree/a.conf", "/opt/tree/bin/run.sh"}


def test_schema_check_does_reject_a_broken_config() -> None:
    broken = {"ignition": {"version": "3.4.0"}, "storage": {"files": [{"mode": "0644"}]}}
    assert schema_errors(broken)


# Cases raya still diverges on are left out until their entry leaves DIVERGENT.
@pytest.mark.parametrize("case", sorted(p.stem for p in (vectors() / "expected").glob("*.ign")
                                        if p.stem not in DIVERGENT))
def test_vector_outputs_match_the_ignition_schema(case: str) -> None:
    text = (vectors() / "cases" / f"{case}.bu").read_text()
    assert schema_errors(json.loads(transpile(text, vectors() / "files"))) == []
