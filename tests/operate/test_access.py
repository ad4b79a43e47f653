"""`raya kubeconfig` and `raya ssh` on the outputs the program exports (computed under the
Pulumi mocks): files written private, contexts merged without touching others, known_hosts
read by the real ssh-keygen, ssh asked to trust nothing else."""

from __future__ import annotations

import base64
import datetime
import os
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from pulumi import automation as auto

from raya.cloud import deploy
from raya.commands import access
from raya.errors import DeployError, RayaError
from raya.nodes.identity import CertificateAuthority
from tests.cloud.program.mocks import Run
from tests.nodes.k3s_join import serving_certificate
from tests.runner import invoke
from tests.support import require_tool

OTHER = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "work", "cluster": {"server": "https://work.example:6443"}}],
    "users": [{"name": "work", "user": {"token": "t"}}],
    "contexts": [{"name": "work", "context": {"cluster": "work", "user": "work"}}],
    "current-context": "work",
}


@pytest.fixture
def outputs(
    deployed: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> list[tuple[Path, str]]:
    """The deployed stack's outputs, as `raya.cloud.deploy.stack_outputs` would read them."""
    asked: list[tuple[Path, str]] = []

    def stack_outputs(root: Path, stack: str) -> dict[str, Any]:
        asked.append((root, stack))
        return deployed.outputs

    monkeypatch.setattr(deploy, "stack_outputs", stack_outputs)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "Pulumi.yaml").write_text("name: raya\n")
    monkeypatch.chdir(tmp_path / "project")
    return asked


def _invoke(*args: str) -> Any:
    return invoke(list(args))


def test_kubeconfig_is_written_private_and_never_printed(
    outputs: list[tuple[Path, str]], deployed: Run, tmp_path: Path
) -> None:
    result = _invoke("kubeconfig", "--stack", "prod")
    assert result.exit_code == 0, result.output
    path = tmp_path / "home/.kube/raya-prod.yaml"
    assert path.stat().st_mode & 0o777 == 0o600
    assert yaml.safe_load(path.read_text()) == yaml.safe_load(deployed.outputs["kubeconfig"])
    assert "client-key-data" not in result.output and "PRIVATE" not in result.output
    assert str(path) in result.output
    assert outputs == [(tmp_path / "project", "prod")]


def test_kubeconfig_merges_its_context_and_leaves_the_others(
    outputs: list[tuple[Path, str]], deployed: Run, tmp_path: Path
) -> None:
    config = tmp_path / "home/.kube/config"
    config.parent.mkdir(parents=True)
    stale = {"name": "raya", "cluster": {"server": "https://old:6443"}}
    config.write_text(yaml.safe_dump({**OTHER, "clusters": [*OTHER["clusters"], stale]}))
    for _ in range(2):  # merging twice gives one entry, not two
        assert _invoke("kubeconfig", "--merge").exit_code == 0
    merged = yaml.safe_load(config.read_text())
    ours = yaml.safe_load(deployed.outputs["kubeconfig"])
    assert merged["current-context"] == "work"
    for section in ("clusters", "users", "contexts"):
        assert merged[section] == [*OTHER[section], *ours[section]], section
    assert config.stat().st_mode & 0o777 == 0o600


def test_kubeconfig_stdout_only_when_asked(
    outputs: list[tuple[Path, str]], deployed: Run, tmp_path: Path
) -> None:
    result = _invoke("kubeconfig", "--stdout")
    assert result.exit_code == 0
    assert result.stdout == deployed.outputs["kubeconfig"]
    assert not (tmp_path / "home/.kube").exists()
    refused = _invoke("kubeconfig", "--stdout", "--out", str(tmp_path / "k.yaml"))
    assert refused.exit_code == 2 and "--stdout" in refused.output


@pytest.mark.parametrize(("days_left", "warned"), [(29, True), (31, False)])
def test_kubeconfig_warns_in_the_certificates_last_30_days(
    outputs: list[tuple[Path, str]],
    deployed: Run,
    monkeypatch: pytest.MonkeyPatch,
    days_left: int,
    warned: bool,
) -> None:
    """`raya up` renews the admin certificate in its last 30 days (docs/using.md): from
    then on, writing the kubeconfig says so."""
    (user,) = yaml.safe_load(deployed.outputs["kubeconfig"])["users"]
    pem = base64.b64decode(user["user"]["client-certificate-data"])
    expires = x509.load_pem_x509_certificate(pem).not_valid_after_utc

    class Clock(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> Clock:
            moment = expires - datetime.timedelta(days=days_left)
            return cls.fromtimestamp(moment.timestamp(), tz)

    fake = types.SimpleNamespace(datetime=Clock, timedelta=datetime.timedelta, UTC=datetime.UTC)
    monkeypatch.setattr(access, "datetime", fake)
    result = _invoke("kubeconfig")
    assert result.exit_code == 0, result.output
    warning = f"the client certificate expires on {expires:%Y-%m-%d}: run `raya up` to renew it"
    assert (warning in result.output) is warned


def test_kubeconfig_refuses_a_kubeconfig_it_cannot_read(
    outputs: list[tuple[Path, str]], tmp_path: Path
) -> None:
    config = tmp_path / "home/.kube/config"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump({"clusters": "nope"}))
    result = _invoke("kubeconfig", "--merge")
    # A RayaError: `raya` prints it as one line and exits 1 (tests/commands/test_cli.py).
    assert isinstance(result.exception, RayaError)
    assert str(result.exception) == f"{config}: 'clusters' is not a list of named entries"
    assert yaml.safe_load(config.read_text()) == {"clusters": "nope"}  # untouched


def _kubeconfig_expiring_in(deployed: Run, left: datetime.timedelta, folder: Path) -> str:
    """The stack's kubeconfig with a certificate from the client CA that expires `left` from
    now (its usage does not matter here: only its expiry is read)."""
    document = yaml.safe_load(deployed.outputs["kubeconfig"])
    client_ca = CertificateAuthority(
        deployed.resources["client-ca"].outputs["certPem"],
        deployed.resources["client-ca-key"].outputs["privateKeyPem"],
    )
    certificate, _ = serving_certificate(client_ca, folder, valid=left)
    pem = certificate.read_bytes()
    document["users"][0]["user"]["client-certificate-data"] = base64.b64encode(pem).decode()
    return yaml.safe_dump(document)


@pytest.mark.parametrize(("days", "warned"), [(29, True), (31, False)])
def test_kubeconfig_warns_in_the_client_certificates_last_30_days(
    outputs: list[tuple[Path, str]],
    deployed: Run,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    days: int,
    warned: bool,
) -> None:
    left = datetime.timedelta(days=days)
    text = _kubeconfig_expiring_in(deployed, left, tmp_path)
    monkeypatch.setattr(
        deploy, "stack_outputs", lambda root, stack: {**deployed.outputs, "kubeconfig": text}
    )
    result = _invoke("kubeconfig")
    assert result.exit_code == 0, result.output
    expires = datetime.datetime.now(datetime.UTC) + left
    warning = f"the client certificate expires on {expires:%Y-%m-%d}: run `raya up` to renew it"
    assert (warning in result.output) is warned
    assert ("expires" in result.output) is warned


def _fake_ssh(folder: Path, code: int) -> Path:
    """An `ssh` that records its arguments and the known_hosts file it was given."""
    folder.mkdir()
    script = folder / "ssh"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {folder}/argv\n'
        'for arg in "$@"; do case "$arg" in UserKnownHostsFile=*) '
        f'cp "${{arg#UserKnownHostsFile=}}" {folder}/known_hosts;; esac; done\n'
        f"exit {code}\n"
    )
    script.chmod(0o755)
    return folder


def test_ssh_trusts_only_the_deployed_host_key(
    outputs: list[tuple[Path, str]],
    deployed: Run,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ssh_keygen = require_tool("ssh-keygen")
    fake = _fake_ssh(tmp_path / "bin", code=7)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    result = _invoke("ssh", "a1", "--", "uptime", "-p")
    assert result.exit_code == 7  # ssh's own status
    address = deployed.resources["agent-1"].outputs["ipv4Address"]
    argv = (fake / "argv").read_text().splitlines()
    assert argv[-4:] == [f"core@{address}", "--", "uptime", "-p"]
    options = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-o"]
    assert "StrictHostKeyChecking=yes" in options
    assert "HostKeyAlgorithms=ssh-ed25519" in options
    assert "GlobalKnownHostsFile=/dev/null" in options
    public = deployed.resources["agent-1-host-key"].outputs["publicKeyOpenssh"].split()
    known = fake / "known_hosts"
    assert known.read_text() == f"a1.raya.example.com,{address} {public[0]} {public[1]}\n"
    # The real ssh-keygen finds the node's key under its address and its name.
    for host in (address, "a1.raya.example.com"):
        found = subprocess.run(
            [ssh_keygen, "-F", host, "-f", str(known)], capture_output=True, text=True
        )
        assert found.returncode == 0 and public[1] in found.stdout, host
    # The known_hosts file lived as long as ssh ran.
    (given,) = [o.split("=", 1)[1] for o in options if o.startswith("UserKnownHostsFile=")]
    assert not Path(given).exists()


def test_ssh_names_the_nodes_when_it_does_not_know_one(outputs: list[tuple[Path, str]]) -> None:
    result = _invoke("ssh", "agent-9")
    assert isinstance(result.exception, RayaError)
    assert str(result.exception) == (
        "no node 'agent-9' in the stack; accepted: agent-0, agent-1, agent-2, control-plane "
        "(or their DNS labels)"
    )


class _OutputsStack:
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def outputs(self) -> dict[str, auto.OutputValue]:
        if self.fail:
            raise auto.CommandError(
                auto._cmd.CommandResult(stdout="", stderr="error: no stack state", code=255)
            )
        return {"kubeconfig": auto.OutputValue("k", True), "zone": auto.OutputValue("z.", False)}


def test_stack_outputs_opens_without_creating_and_reveals_values(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    opened: list[tuple[Path, str, bool]] = []

    def open_stack(root: Path, name: str, create: bool) -> _OutputsStack:
        opened.append((root, name, create))
        return _OutputsStack(fail=name == "broken")

    monkeypatch.setattr(deploy, "open_stack", open_stack)
    assert deploy.stack_outputs(tmp_path, "prod") == {"kubeconfig": "k", "zone": "z."}
    assert opened == [(tmp_path, "prod", False)]
    with pytest.raises(DeployError, match="outputs of stack broken: error: no stack state"):
        deploy.stack_outputs(tmp_path, "broken")


@pytest.mark.parametrize("in_the_way", ["folder", "file"])
def test_kubeconfig_out_the_file_system_refuses_writes_nothing(
    in_the_way: str, outputs: list[tuple[Path, str]], tmp_path: Path
) -> None:
    """`--out` naming a folder, or a file under a file: one line naming the path, and nothing
    written anywhere (the kubeconfig holds a private key)."""
    blocker = tmp_path / "blocker"
    if in_the_way == "folder":
        blocker.mkdir()
        target = blocker
    else:
        blocker.write_text("kept\n")
        target = blocker / "k.yaml"
    before = sorted(tmp_path.rglob("*"))
    result = _invoke("kubeconfig", "--out", str(target))
    assert result.exit_code == 1
    assert isinstance(result.exception, RayaError)
    assert str(result.exception).startswith(f"{target if in_the_way == 'folder' else blocker}")
    assert sorted(tmp_path.rglob("*")) == before


def test_kubeconfig_merge_refuses_a_key_written_twice(
    outputs: list[tuple[Path, str]], tmp_path: Path
) -> None:
    config = tmp_path / "home/.kube/config"
    config.parent.mkdir(parents=True)
    text = "apiVersion: v1\nkind: Config\ncurrent-context: a\ncurrent-context: b\n"
    config.write_text(text)
    result = _invoke("kubeconfig", "--merge")
    assert isinstance(result.exception, RayaError)
    assert str(result.exception) == (
        f"{config}: line 4 column 1: key 'current-context' appears twice in one object; "
        "accepted: each key once"
    )
    assert config.read_text() == text
