"""`raya up` delivers the cluster autoscaler's Secret and HelmChart (issue 39, part 1) by
server-side apply, with the stack's kubeconfig, to an API that trusts only the cluster's client
CA: created the first time, taken over again after an edit by hand, waited for while the
control plane is still starting."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import yaml

from raya.cloud.kubeconfig import api_client
from raya.errors import DeployError
from raya.model.fleet import Fleet, Pool, build_cluster
from raya.operate.autoscaler import apply
from tests.cloud.program.mocks import Run
from tests.cloud.program.test_program import EXAMPLE, provider_mocks, run
from tests.operate import kube_api as ka
from tests.operate.test_roll import Clock

SECRET = "/api/v1/namespaces/kube-system/secrets/raya-cluster-autoscaler"
CHART = "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts/cluster-autoscaler"
TOKEN = "autoscalerToken0" * 4


@pytest.fixture(scope="module")
def deployed_pool() -> Run:
    burst = Pool("burst", "cpx31", 0, ipaddress.IPv4Network("10.0.16.0/24"),
                 min_size=0, max_size=4)  # fmt: skip
    fleet = build_cluster(EXAMPLE.config, Fleet(agents=("cx23",), pools=(burst,)), "fleet")
    return run(provider_mocks(), fleet, autoscaler_token=TOKEN)


@pytest.fixture
def state(clock: Clock) -> ka.Cluster:
    return ka.Cluster(nodes={"control-plane": ka.node_object("control-plane", "v1")},
                      clock=clock.now)  # fmt: skip


@pytest.fixture
def api(deployed_pool: Run, state: ka.Cluster, tmp_path: Path) -> Iterator[Any]:
    with ka.deployment_api(state, deployed_pool.resources, tmp_path) as url:
        client = api_client(deployed_pool.outputs["kubeconfig"], server=url)
        yield client
        client.close()


def test_it_creates_both_objects_then_takes_them_back(
    deployed_pool: Run, state: ka.Cluster, api: Any, clock: Clock
) -> None:
    said: list[str] = []
    manifests = deployed_pool.outputs["autoscaler"]
    applied = apply(api, manifests, clock, said.append)
    assert applied == [
        "Secret kube-system/raya-cluster-autoscaler",
        "HelmChart kube-system/cluster-autoscaler",
    ]
    assert said == []
    secret = state.objects[SECRET]
    assert base64.b64decode(secret["data"]["token"]).decode() == TOKEN
    assert "stringData" not in secret
    chart = state.objects[CHART]
    assert chart["spec"]["chart"] == "cluster-autoscaler"
    # Owned by raya, forced: the apply takes back what a person changed by hand.
    patches = [entry for entry in state.log if entry[1] == "PATCH"]
    assert len(patches) == 2
    query = parse_qs(patches[0][2].partition("?")[2])
    assert (query["fieldManager"], query["force"]) == (["raya"], ["true"])
    chart["metadata"]["managedFields"] = [{"manager": "kubectl-edit", "operation": "Update"}]
    chart["spec"]["version"] = "0.0.1"
    apply(api, manifests, clock, said.append)
    assert state.objects[CHART]["spec"]["version"] == "9.59.1"
    assert state.objects[CHART]["metadata"]["managedFields"][0]["manager"] == "raya"
    # Nothing of either object was said.
    assert TOKEN not in " ".join(said)


def test_it_waits_for_an_api_that_is_starting(
    deployed_pool: Run, state: ka.Cluster, api: Any, clock: Clock
) -> None:
    """A first `raya up` ends while the control plane boots: nothing listens yet."""
    state.machines["control-plane"] = ka.Machine(running=False)
    said: list[str] = []

    def sleep(seconds: float) -> None:
        clock.t += seconds
        if clock.t >= 30:
            state.machines["control-plane"].running = True

    clock.sleep = sleep
    apply(api, deployed_pool.outputs["autoscaler"], clock, said.append)
    assert len(said) == 3  # at 0, 10 and 20 s; answered at 30 s
    assert all(line.startswith("cluster autoscaler: the API does not answer yet") for line in said)
    assert SECRET in state.objects and CHART in state.objects


def test_it_gives_up_after_the_wait_and_says_what_to_do(
    deployed_pool: Run, state: ka.Cluster, api: Any, clock: Clock
) -> None:
    state.machines["control-plane"] = ka.Machine(running=False)
    with pytest.raises(DeployError, match="did not answer for 60 s") as refused:
        apply(api, deployed_pool.outputs["autoscaler"], clock, lambda _: None, wait=60)
    assert "run `raya up` again" in str(refused.value)
    assert clock.t == 60


def test_the_stand_in_refuses_an_apply_without_a_field_manager(state: ka.Cluster) -> None:
    """What the real API server answers (cited in `apply_object`), so the client's options
    are proven to reach it."""
    body = yaml.safe_load("metadata: {name: raya-cluster-autoscaler, namespace: kube-system}")
    code, answer = ka.apply_object(state.objects, SECRET, {}, body, 0.0)
    assert code == 422 and "fieldManager: Required value" in answer["message"]
    code, _ = ka.apply_object(state.objects, SECRET, {"fieldManager": ["raya"]}, body, 0.0)
    assert code == 201
    code, answer = ka.apply_object(state.objects, SECRET, {"fieldManager": ["other"]}, body, 0.0)
    assert code == 409
