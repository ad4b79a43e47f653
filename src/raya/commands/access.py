"""`raya kubeconfig` and `raya ssh`: reach the cluster with the identities the deployment
decided, never trusting an endpoint on first use."""

from __future__ import annotations

import datetime
import sys

from raya.commands.deploy import deploy_module
from raya.commands.options import ROOT, STACK, project_root
from raya.commands.parser import Argument, BadParameter, Commands, Option
from raya.errors import DeployError

TYPE_CHECKING = False  # typing costs start-up time: mypy alone reads these imports
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

commands = Commands()  # what this module adds to `raya`

# Below this, `raya kubeconfig` says to run `raya up`, which re-issues the certificate.
RENEW_WARNING = datetime.timedelta(days=30)


def stack_outputs(command: str, stack: str, root: Path | None) -> dict[str, Any]:
    """The deployed stack's outputs, for `command`; secrets in clear, never to print."""
    folder = project_root(root)
    outputs: dict[str, Any] = deploy_module(command).stack_outputs(folder, stack)
    return outputs


@commands.command(
    STACK, ROOT,
    Option("--out", "-o", kind="path", dest="out_file", help="File to write (0600).",
           show_default="~/.kube/config with --merge, else ~/.kube/raya-<stack>.yaml"),
    Option("--merge", kind="flag",
           help="Add the cluster's context to the file, replacing only entries of its name."),
    Option("--stdout", kind="flag", help="Print the kubeconfig (it holds a private key)."),
)  # fmt: skip
def kubeconfig(
    *, stack: str, root: Path | None, out_file: Path | None, merge: bool, stdout: bool
) -> None:
    """Write the cluster's admin kubeconfig, made from the deployment's own PKI (no SSH).

    The API's certificate is pinned to the cluster's server CA. The client certificate lasts
    90 days; `raya up` renews it in its last 30."""
    if stdout and (merge or out_file):
        raise BadParameter("--stdout prints the kubeconfig; it takes no --out or --merge")
    text = stack_outputs("kubeconfig", stack, root).get("kubeconfig")
    from pathlib import Path

    import yaml

    from raya.cloud import kubeconfig as kube
    from raya.console import err
    from raya.files import write_atomically

    if not isinstance(text, str):
        raise DeployError(f"stack {stack} has no kubeconfig output yet; run `raya up`")
    new = yaml.safe_load(text)
    expires = _expiry(new)
    if stdout:
        sys.stdout.write(text)
    else:
        default = "config" if merge else f"raya-{stack}.yaml"
        path = out_file or Path.home() / ".kube" / default
        document = kube.merge(kube.read(path), new, str(path)) if merge else new
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomically(path, yaml.safe_dump(document, sort_keys=False).encode(), 0o600)
        except OSError as error:
            raise DeployError(f"{path}: cannot write: {error.strerror}") from None
        context = new["current-context"]
        err.print(f"wrote context {context} to {path}", markup=False, soft_wrap=True)
    left = expires - datetime.datetime.now(datetime.UTC)
    if left < RENEW_WARNING:
        err.print(
            f"the client certificate expires on {expires:%Y-%m-%d}: run `raya up` to renew it",
            markup=False,
        )


def _expiry(document: dict[str, Any]) -> datetime.datetime:
    import base64

    from cryptography import x509

    pem = base64.b64decode(document["users"][0]["user"]["client-certificate-data"])
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc


@commands.command(
    Argument("node", required=True,
             help="The node: its name (agent-1), DNS label (a1) or DNS name."),
    Argument("command", multiple=True,
             help="Command to run on the node (after --); a shell if none."),
    STACK, ROOT, pass_unknown=True,
)  # fmt: skip
def ssh(*, node: str, command: list[str], stack: str, root: Path | None) -> None:
    """SSH to a node as core, trusting only the host key the deployment gave it, or, for a
    node the cluster autoscaler made, the one it published on its Node object."""
    outputs = stack_outputs("ssh", stack, root)
    servers = outputs.get("servers") or {}
    import subprocess
    import tempfile
    from pathlib import Path

    from raya.operate import ssh as ssh_model

    entry: Mapping[str, Any]
    try:
        _, entry = ssh_model.find_node(servers, node)
    except DeployError:
        # A node the autoscaler made is in no output: its Node object says who it is.
        if not outputs.get("autoscaler"):
            raise
        entry = ssh_model.published_entry(_node_object(outputs["kubeconfig"], node))
    with tempfile.TemporaryDirectory(prefix="raya-ssh-") as folder:
        known_hosts = Path(folder) / "known_hosts"
        known_hosts.write_text(ssh_model.known_hosts(entry))
        try:
            argv = ssh_model.ssh_command(entry, known_hosts, command)
            code = subprocess.run(argv, check=False).returncode
        except FileNotFoundError:
            raise DeployError("ssh is not installed (Debian: openssh-client)") from None
    raise SystemExit(code)


def _node_object(kubeconfig: str, name: str) -> Mapping[str, Any]:
    """Node `name` as the cluster's API serves it, trusting only the kubeconfig's CA."""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    from raya.commands.deploy import kube_api_client

    api = kube_api_client(kubeconfig)
    try:
        found = CoreV1Api(api).read_node(name, _request_timeout=15)
        document: Mapping[str, Any] = api.sanitize_for_serialization(found)
    except ApiException as error:
        if error.status == 404:
            raise DeployError(
                f"no node {name!r} in the stack nor in the cluster; accepted: a node of "
                "`raya status`, or an autoscaled node's name (`kubectl get nodes`)"
            ) from None
        raise DeployError(
            f"the API did not give node {name}: {error.status} {error.reason}"
        ) from None
    finally:
        api.close()
    return document
