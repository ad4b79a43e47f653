"""The program with an autoscaled pool (issue 39, part 1): the autoscaler's manifests as a
secret output, built from the cluster's own agent secret and server CA and the autoscaler's
own Hetzner token; none without such a pool; refused without its token."""

from __future__ import annotations

import base64
import dataclasses
import functools
import ipaddress
import json
from typing import Any

import pulumi_random as random
import pytest
import yaml

from raya.cloud.program import define
from raya.errors import DeployError
from raya.model.fleet import Fleet, Pool, build_cluster
from raya.nodes.autoscaler import manifests
from raya.nodes.identity import generate_example_secrets
from raya.nodes.render import render_pool
from tests.cloud.program.ignition import ignition_files
from tests.cloud.program.mocks import is_secret, run_program
from tests.cloud.program.test_program import (
    CHARTS,
    CLUSTER_TOKEN,
    EXAMPLE,
    PINS,
    RENDER,
    provider_mocks,
    run,
    user_data,
)
from tests.operate import autoscaler_double

AUTOSCALER_TOKEN = "autoscalerToken0" * 4  # 64 characters, as Hetzner's tokens
BURST = Pool("burst", "cpx31", 0, ipaddress.IPv4Network("10.0.16.0/24"),
             min_size=0, max_size=4)  # fmt: skip
FLEET = build_cluster(EXAMPLE.config, Fleet(agents=("cx23",), pools=(BURST,)), "test fleet")
K3S_CONFIG = "/etc/rancher/k3s/config.yaml"


@functools.cache
def deployed_manifests(cluster: str, pools: tuple[Pool, ...]) -> str:
    """The autoscaler's manifests raya deploys for cluster `cluster` autoscaling `pools`
    (raya.nodes.autoscaler.manifests, which the program outputs)."""
    config = dataclasses.replace(EXAMPLE.config, cluster_name=cluster)
    fleet = build_cluster(config, Fleet(agents=("cx23",), pools=pools), "test fleet")
    secrets = generate_example_secrets(["control-plane", "agent-0"])
    rendered = [render_pool(fleet, pool, secrets) for pool in fleet.autoscaled]
    return manifests(fleet, PINS, CHARTS.cluster_autoscaler, rendered, AUTOSCALER_TOKEN)


def deployed_config(cluster: str, pools: tuple[Pool, ...]) -> dict[str, Any]:
    """The cluster config raya deploys (the autoscaler Secret's `cluster-config`), as the
    autoscaler's provider reads it (tests/operate/autoscaler_double.py)."""
    text = deployed_manifests(cluster, pools)
    secret = next(d for d in yaml.safe_load_all(text) if d["kind"] == "Secret")
    return autoscaler_double.cluster_config(secret["stringData"]["cluster-config"])


def deployed_env(cluster: str, pools: tuple[Pool, ...]) -> dict[str, str]:
    """The provider's environment raya deploys (the HelmChart's `extraEnv`)."""
    return autoscaler_double.provider_env(deployed_manifests(cluster, pools))


def test_the_autoscalers_manifests_are_a_secret_output() -> None:
    def program() -> dict[str, Any]:
        outputs = define(FLEET, PINS, RENDER, hcloud_token=CLUSTER_TOKEN,
                         autoscaler_token=AUTOSCALER_TOKEN,
                         autoscaler_chart=CHARTS.cluster_autoscaler)  # fmt: skip
        # What the engine sees of it: a resource taking it as an input.
        random.RandomPassword("probe", length=16, override_special=outputs["autoscaler"])
        return outputs

    result = run_program(provider_mocks(), program)
    assert is_secret(result.resources["probe"].inputs["overrideSpecial"])
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(result.outputs["autoscaler"])}
    assert sorted(docs) == ["HelmChart", "Secret"]
    secret = docs["Secret"]["stringData"]
    assert secret["token"] == AUTOSCALER_TOKEN
    assert CLUSTER_TOKEN not in result.outputs["autoscaler"]  # the cloud controller's
    config = json.loads(base64.b64decode(secret["cluster-config"]))
    cloud_init = config["nodeConfigs"]["raya-burst"]["cloudInit"]
    # The pool joins with the agent token the planned agent has: the cluster's own.
    pool_k3s = yaml.safe_load(ignition_files(cloud_init)[K3S_CONFIG])
    agent_k3s = yaml.safe_load(ignition_files(user_data(result)["agent-0"])[K3S_CONFIG])
    assert pool_k3s["token"] == agent_k3s["token"]


def test_without_an_autoscaled_pool_there_is_no_autoscaler() -> None:
    result = run(provider_mocks())
    assert "autoscaler" not in result.outputs


def test_an_autoscaled_pool_needs_the_autoscalers_token() -> None:
    with pytest.raises(DeployError, match="raya:autoscalerHcloudToken is not set") as refused:
        run(provider_mocks(), FLEET)
    assert "pools (burst)" in str(refused.value)


def test_an_autoscaled_pool_needs_the_autoscalers_chart_pin() -> None:
    with pytest.raises(DeployError, match="no cluster-autoscaler chart pin"):
        run(provider_mocks(), FLEET, autoscaler_token=AUTOSCALER_TOKEN, autoscaler_chart=None)
