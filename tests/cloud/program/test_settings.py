"""Every user setting at a value other than its default, and where it lands.

One stack in which every `raya:` setting and every fleet field differs from its default runs
through the program as `pulumi up` runs it (`main`: the stack through `pulumi.Config`, the
fleet file, the users' keys from a local GitHub) under Pulumi's mocks; each setting then has
its own test, which reads its value back where it acts: a resource's inputs, or a node's
rendered config. Each figure is written here, never taken from raya's constants, so a
setting that stops reaching its target (replaced by its default, dropped, mixed up with
another) fails its own test. docs/testing.md maps each setting to its test.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulumi
import pytest
import yaml

from raya.cloud.program import GITHUB_URL_ENV, main
from raya.model.pins import load_pins, snapshot_labels
from raya.model.project import EXAMPLE_ROOT
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import ProviderMocks, Snapshot, Zone, reveal, run_program
from tests.support import EXAMPLE_KEYS, REPO, http_server

CLUSTER_TOKEN = "clusterTokenNotDefault0" + "x" * 41
ACCESS_KEY, SECRET_KEY = "AK-SETTINGS-0001", "sk-settings-0002"
# Every setting away from its default (docs/config.md has the defaults).
STACK = {
    "raya:clusterName": "kube",
    "raya:location": "fsn1",  # default nbg1
    "raya:networkZone": "eu-central",  # may only ever be the location's zone
    "raya:controlPlaneServerType": "cpx31",  # default cx33
    "raya:networkRange": "10.8.0.0/16",  # default 10.0.0.0/16
    "raya:nodesSubnet": "10.8.4.0/24",  # default 10.0.1.0/24
    "raya:controlPlaneIp": "10.8.4.5",  # default 10.0.1.10
    "raya:loadBalancerSubnet": "10.8.192.0/26",  # default nodesSubnet's next block, 10.8.5.0/24
    "raya:controlPlaneSchedulable": "true",  # default false
    "raya:sshSources": '["198.51.100.0/24"]',  # default anywhere
    "raya:apiSources": '["203.0.113.7/32", "2001:db8:1::/48"]',  # default anywhere
    "raya:controlPlaneVolumeSize": "25",  # default 10
    "raya:controlPlanes": "3",  # default 1
    "raya:backupSchedule": "30 2 * * *",  # default 0 */6 * * *
    "raya:backupRetention": "9",  # default 28
    # default: a GCS bucket of the deployment's
    "raya:backupS3": json.dumps(
        {
            "endpoint": "s3.example.net:9000",
            "bucket": "team-snaps",
            "region": "eu-2",
            "folder": "lab",
        }
    ),
    "raya:authorizedUsers": json.dumps(["octo-bob"]),  # required: no default
    "raya:managedSubdomain": "k8s",
    "raya:parentZone": "corp.example.org",
    "raya:acmeEmail": "certs@corp.example.org",
    "raya:clusterHcloudToken": CLUSTER_TOKEN,
    "raya:backupS3AccessKey": ACCESS_KEY,
    "raya:backupS3SecretKey": SECRET_KEY,
}
SECRETS = ["raya:clusterHcloudToken", "raya:backupS3AccessKey", "raya:backupS3SecretKey"]
# Both fleet forms, every pool field set (docs/fleet.md).
FLEET = {
    "agents": ["cpx21", "cax11"],
    "pools": [
        {"name": "gpu", "type": "cpx41", "count": 2, "addresses": "10.8.4.64/28",
         "labels": {"team": "ml"}, "taints": ["gpu=yes:NoSchedule"], "location": "hel1"},
    ],
}  # fmt: skip
CONFIG = "/etc/rancher/k3s/config.yaml"
SEED = "/var/lib/raya/k3s-server-seed/manifests"
NM = "/etc/NetworkManager/system-connections/enp7s0.nmconnection"


@dataclass(frozen=True)
class Landed:
    inputs: dict[str, dict[str, Any]]  # each resource's inputs, revealed, by name
    types: dict[str, str]  # each resource's type, by name
    files: dict[str, dict[str, bytes]]  # each server's Ignition files, by node name
    outputs: dict[str, Any]

    def config(self, node: str) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(self.files[node][CONFIG])
        return loaded

    def of_type(self, suffix: str) -> dict[str, dict[str, Any]]:
        return {n: i for n, i in self.inputs.items() if self.types[n].endswith(suffix)}


@pytest.fixture(scope="module")
def landed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Landed]:
    root = tmp_path_factory.mktemp("settings")
    shutil.copytree(EXAMPLE_ROOT / "deploy", root / "deploy")
    shutil.copytree(REPO / "image", root / "image", ignore=shutil.ignore_patterns("*.hcl", "*.sh"))
    (root / "deploy" / "fleet" / "agents.json").write_text(json.dumps(FLEET))
    labels = snapshot_labels(load_pins(root), "kube")
    mocks = ProviderMocks(
        zones=[Zone("example-com", "example.com."), Zone("corp", "corp.example.org.")],
        snapshots=[Snapshot(7, labels), Snapshot(8, labels, architecture="arm")],
    )

    def keys_page(request: Any) -> tuple[int, bytes]:
        body = EXAMPLE_KEYS.get(request.path.removeprefix("/").removesuffix(".keys"))
        return (200, body.encode()) if body else (404, b"Not Found")

    with pytest.MonkeyPatch.context() as patch, http_server(keys_page) as url:
        patch.setenv(GITHUB_URL_ENV, url)
        pulumi.runtime.set_all_config(STACK, SECRETS)
        try:
            run = run_program(mocks, lambda: main(root), stack="prod")
        finally:
            pulumi.runtime.set_all_config({})
    inputs = {name: reveal(r.inputs) for name, r in run.resources.items()}
    yield Landed(
        inputs=inputs,
        types={name: r.typ for name, r in run.resources.items()},
        files={
            name: ignition_files(i["userData"])
            for name, i in inputs.items()
            if run.resources[name].typ.endswith(":Server")
        },
        outputs=run.outputs,
    )


def rules(landed: Landed) -> dict[str | None, list[str]]:
    return {rule.get("port"): rule["sourceIps"] for rule in landed.inputs["firewall"]["rules"]}


def cluster_name(landed: Landed) -> None:
    assert landed.inputs["network"]["name"] == "kube"
    assert landed.inputs["firewall"]["name"] == "kube"
    assert landed.inputs["agent-0"]["name"] == "kube-agent-0"
    assert landed.inputs["gpu-1"]["name"] == "kube-gpu-1"
    assert landed.inputs["control-plane-2"]["name"] == "kube-control-plane-2"
    assert landed.inputs["agent-0"]["labels"]["managed_by"] == "kube"


def location(landed: Landed) -> None:
    assert landed.inputs["control-plane"]["location"] == "fsn1"
    assert landed.inputs["agent-1"]["location"] == "fsn1"
    assert landed.inputs["control-plane-state"]["location"] == "fsn1"


def network_zone(landed: Landed) -> None:
    assert landed.inputs["nodes"]["networkZone"] == "eu-central"


def control_plane_server_type(landed: Landed) -> None:
    types = {name: i["serverType"] for name, i in landed.of_type(":Server").items()}
    assert types == {
        "control-plane": "cpx31", "control-plane-1": "cpx31", "control-plane-2": "cpx31",
        "agent-0": "cpx21", "agent-1": "cax11", "gpu-0": "cpx41", "gpu-1": "cpx41",
    }  # fmt: skip


def network_range(landed: Landed) -> None:
    assert landed.inputs["network"]["ipRange"] == "10.8.0.0/16"
    # Hetzner's gateway, the network's first address: every node's route to 10.0.0.0/8.
    for node, files in landed.files.items():
        assert "10.8.0.1" in files[NM].decode(), node
        assert "10.0.0.1" not in files[NM].decode(), node


def nodes_subnet(landed: Landed) -> None:
    assert landed.inputs["nodes"]["ipRange"] == "10.8.4.0/24"
    # The list form's agents from the subnet's 20th address.
    assert landed.config("agent-0")["node-ip"] == "10.8.4.20"
    assert landed.config("agent-1")["node-ip"] == "10.8.4.21"


def control_plane_ip(landed: Landed) -> None:
    ips = {name: landed.config(name)["node-ip"] for name in landed.files}
    assert {k: v for k, v in ips.items() if k.startswith("control-plane")} == {
        "control-plane": "10.8.4.5", "control-plane-1": "10.8.4.6",
        "control-plane-2": "10.8.4.7",
    }  # fmt: skip
    networks = landed.inputs["control-plane"]["networks"]
    assert [n["ip"] for n in networks] == ["10.8.4.5"]


def load_balancer_subnet(landed: Landed) -> None:
    assert landed.inputs["load-balancers"]["ipRange"] == "10.8.192.0/26"
    assert landed.inputs["load-balancers"]["type"] == "cloud"
    text = landed.files["control-plane"][f"{SEED}/raya-helm-charts.yaml"]
    (ccm,) = [doc for doc in yaml.safe_load_all(text) if doc["metadata"]["name"] == (
        "hcloud-cloud-controller-manager"
    )]  # fmt: skip
    env = yaml.safe_load(ccm["spec"]["valuesContent"])["env"]
    assert env["HCLOUD_LOAD_BALANCERS_PRIVATE_SUBNET_IP_RANGE"] == {"value": "10.8.192.0/26"}


def control_plane_schedulable(landed: Landed) -> None:
    for name in ("control-plane", "control-plane-1", "control-plane-2"):
        assert "node-taint" not in landed.config(name), name


def ssh_sources(landed: Landed) -> None:
    assert rules(landed)["22"] == ["198.51.100.0/24"]


def api_sources(landed: Landed) -> None:
    assert rules(landed)["6443"] == ["203.0.113.7/32", "2001:db8:1::/48"]


def control_plane_volume_size(landed: Landed) -> None:
    sizes = {n: i["size"] for n, i in landed.of_type("volume:Volume").items()}
    assert sizes == {
        "control-plane-state": 25, "control-plane-1-state": 25, "control-plane-2-state": 25,
    }  # fmt: skip


def control_planes(landed: Landed) -> None:
    servers = sorted(n for n in landed.of_type(":Server") if n.startswith("control-plane"))
    assert servers == ["control-plane", "control-plane-1", "control-plane-2"]
    # Agents register through the private load balancer: controlPlaneIp + 5.
    assert landed.config("agent-0")["server"] == "https://10.8.4.10:6443"
    assert landed.config("control-plane-1")["server"] == "https://10.8.4.10:6443"


def backup_schedule(landed: Landed) -> None:
    for name in ("control-plane", "control-plane-2"):
        assert landed.config(name)["etcd-snapshot-schedule-cron"] == "30 2 * * *"


def backup_retention(landed: Landed) -> None:
    # Each control plane's own snapshots, and the bucket's for the whole cluster (k3s reads
    # the latter from its config and from the S3 Secret: docs/backups.md).
    for name in ("control-plane", "control-plane-2"):
        assert landed.config(name)["etcd-snapshot-retention"] == 9
        assert landed.config(name)["etcd-s3-retention"] == 9
        assert s3_secret(landed, name)["etcd-s3-retention"] == "9"


def s3_secret(landed: Landed, node: str) -> dict[str, str]:
    secret: dict[str, str] = yaml.safe_load(landed.files[node][f"{SEED}/raya-etcd-s3.yaml"])[
        "stringData"
    ]
    return secret


def backup_s3(landed: Landed) -> None:
    assert not landed.of_type("storage/bucket:Bucket")  # no bucket of the deployment's
    secret = s3_secret(landed, "control-plane")
    assert {k: v for k, v in secret.items() if not k.endswith(("-key", "-retention"))} == {
        "etcd-s3-endpoint": "s3.example.net:9000",
        "etcd-s3-bucket": "team-snaps",
        "etcd-s3-region": "eu-2",
        "etcd-s3-folder": "lab",
    }


def backup_s3_access_key(landed: Landed) -> None:
    assert s3_secret(landed, "control-plane-1")["etcd-s3-access-key"] == ACCESS_KEY


def backup_s3_secret_key(landed: Landed) -> None:
    assert s3_secret(landed, "control-plane-1")["etcd-s3-secret-key"] == SECRET_KEY


def authorized_users(landed: Landed) -> None:
    for node, files in landed.files.items():
        assert files["/etc/raya/ssh-key-handles"].decode().splitlines() == ["octo-bob"], node


def managed_subdomain(landed: Landed) -> None:
    assert landed.inputs["primary"]["dnsName"] == "k8s.corp.example.org."
    assert landed.inputs["a1"]["name"] == "a1.k8s.corp.example.org."
    assert "cp.k8s.corp.example.org" in landed.config("control-plane")["tls-san"]


def parent_zone(landed: Landed) -> None:
    assert landed.inputs["delegation"]["managedZone"] == "corp"
    assert landed.inputs["delegation"]["name"] == "k8s.corp.example.org."


def acme_email(landed: Landed) -> None:
    text = landed.files["control-plane"][f"{SEED}/raya-cluster-issuers.yaml"]
    issuers = list(yaml.safe_load_all(text))
    emails = {issuer["spec"]["acme"]["email"] for issuer in issuers if issuer}
    assert emails == {"certs@corp.example.org"}


def cluster_hcloud_token(landed: Landed) -> None:
    text = landed.files["control-plane"][f"{SEED}/raya-hcloud-credentials.yaml"]
    secret = yaml.safe_load(text)
    assert secret["stringData"]["token"] == CLUSTER_TOKEN


# The fleet file's fields (docs/fleet.md).


def agents(landed: Landed) -> None:
    list_form = sorted(n for n in landed.of_type(":Server") if n.startswith("agent-"))
    assert list_form == ["agent-0", "agent-1"]
    assert landed.inputs["agent-1"]["serverType"] == "cax11"
    assert landed.inputs["agent-1"]["image"] == "8"  # ARM: the aarch64 snapshot


def pool_name(landed: Landed) -> None:
    assert landed.config("gpu-0")["node-name"] == "gpu-0"
    assert landed.inputs["gpu-0"]["name"] == "kube-gpu-0"
    assert landed.inputs["gpu-1"]["placementGroupId"] is not None


def pool_type(landed: Landed) -> None:
    assert {landed.inputs[n]["serverType"] for n in ("gpu-0", "gpu-1")} == {"cpx41"}


def pool_count(landed: Landed) -> None:
    assert sorted(n for n in landed.of_type(":Server") if n.startswith("gpu")) == [
        "gpu-0", "gpu-1",
    ]  # fmt: skip


def pool_addresses(landed: Landed) -> None:
    assert [landed.config(n)["node-ip"] for n in ("gpu-0", "gpu-1")] == [
        "10.8.4.64", "10.8.4.65",
    ]  # fmt: skip
    assert [n["ip"] for n in landed.inputs["gpu-1"]["networks"]] == ["10.8.4.65"]


def pool_labels(landed: Landed) -> None:
    assert landed.config("gpu-1")["node-label"] == ["team=ml"]
    assert "node-label" not in landed.config("agent-0")


def pool_taints(landed: Landed) -> None:
    assert landed.config("gpu-0")["node-taint"] == ["gpu=yes:NoSchedule"]
    assert "node-taint" not in landed.config("agent-0")


def pool_location(landed: Landed) -> None:
    assert {landed.inputs[n]["location"] for n in ("gpu-0", "gpu-1")} == {"hel1"}
    assert landed.inputs["agent-0"]["location"] == "fsn1"


LANDS: dict[str, Callable[[Landed], None]] = {
    "raya:clusterName": cluster_name,
    "raya:location": location,
    "raya:networkZone": network_zone,
    "raya:controlPlaneServerType": control_plane_server_type,
    "raya:networkRange": network_range,
    "raya:nodesSubnet": nodes_subnet,
    "raya:controlPlaneIp": control_plane_ip,
    "raya:loadBalancerSubnet": load_balancer_subnet,
    "raya:controlPlaneSchedulable": control_plane_schedulable,
    "raya:sshSources": ssh_sources,
    "raya:apiSources": api_sources,
    "raya:controlPlaneVolumeSize": control_plane_volume_size,
    "raya:controlPlanes": control_planes,
    "raya:backupSchedule": backup_schedule,
    "raya:backupRetention": backup_retention,
    "raya:backupS3": backup_s3,
    "raya:backupS3AccessKey": backup_s3_access_key,
    "raya:backupS3SecretKey": backup_s3_secret_key,
    "raya:authorizedUsers": authorized_users,
    "raya:managedSubdomain": managed_subdomain,
    "raya:parentZone": parent_zone,
    "raya:acmeEmail": acme_email,
    "raya:clusterHcloudToken": cluster_hcloud_token,
    "agents": agents,
    "pools.name": pool_name,
    "pools.type": pool_type,
    "pools.count": pool_count,
    "pools.addresses": pool_addresses,
    "pools.labels": pool_labels,
    "pools.taints": pool_taints,
    "pools.location": pool_location,
}


@pytest.mark.parametrize("setting", LANDS)
def test_a_setting_lands(landed: Landed, setting: str) -> None:
    LANDS[setting](landed)
