"""Delivering the cluster autoscaler's Secret and HelmChart (the stack output `autoscaler`) to
the cluster, by server-side apply over the Kubernetes API with the stack's kubeconfig.

Not through the control plane's config like the other add-ons: the Secret holds every
autoscaled pool's whole node config (about 14 KB each), which a control plane's `user_data`
(under 32 KiB, nearly full with the add-ons) cannot carry, and a control plane's config is
fixed when its server is created while pools come and go. Once applied, k3s' helm-controller
installs the chart, as for the add-ons.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from raya.errors import DeployError
from raya.operate.roll import Clock

FIELD_MANAGER = "raya"
APPLY = "application/apply-patch+yaml"  # server-side apply
# How long `raya up` waits for an API that is still starting (a first deployment), and how
# often it asks.
API_WAIT = 600.0
API_RETRY = 10.0
API_TIMEOUT = 15.0


def _patch(api: Any, document: dict[str, Any]) -> None:
    """One server-side apply of `document`, a Secret or a HelmChart."""
    from kubernetes import client as k8s

    version, kind, meta = document.get("apiVersion"), document.get("kind"), document["metadata"]
    options: dict[str, Any] = {
        "field_manager": FIELD_MANAGER,
        "force": True,
        "_content_type": APPLY,
        "_request_timeout": API_TIMEOUT,
    }
    if (version, kind) == ("v1", "Secret"):
        k8s.CoreV1Api(api).patch_namespaced_secret(
            meta["name"], meta["namespace"], document, **options
        )
    elif (version, kind) == ("helm.cattle.io/v1", "HelmChart"):
        group, _, group_version = str(version).partition("/")
        k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
            group, group_version, meta["namespace"], "helmcharts", meta["name"], document,
            **options,
        )  # fmt: skip
    else:
        raise DeployError(
            f"the autoscaler's manifests hold a {kind} ({version}); accepted: Secret (v1), "
            "HelmChart (helm.cattle.io/v1)"
        )


def apply(
    api: Any,
    manifests: str,
    clock: Clock,
    say: Callable[[str], None],
    *,
    wait: float = API_WAIT,
) -> list[str]:
    """Server-side apply of each object of `manifests` through `api` (the official client's
    ApiClient), owned by field manager `raya` and forced (raya's values win over an edit by
    hand); the API is asked again every `API_RETRY` s for up to `wait` s while it does not
    answer. Returns `<Kind> <namespace>/<name>` of each, in order. Never shows an object."""
    from kubernetes.client.exceptions import ApiException

    from raya.cloud.kubeconfig import reason

    applied = []
    for document in yaml.safe_load_all(manifests):
        meta = document["metadata"]
        what = f"{document['kind']} {meta['namespace']}/{meta['name']}"
        deadline = clock.now() + wait
        while True:
            try:
                _patch(api, document)
                break
            except ApiException as error:
                if error.status is not None and error.status < 500 and error.status != 429:
                    raise DeployError(
                        f"cluster autoscaler: the API refused {what}: {error.status} "
                        f"{error.reason}"
                    ) from None
                problem = f"{error.status} {error.reason}"
            except Exception as error:  # urllib3 and the client raise many kinds
                problem = reason(error)
            if clock.now() >= deadline:
                raise DeployError(
                    f"cluster autoscaler: {what} not applied, the API did not answer for "
                    f"{wait:g} s ({problem}); the deployment itself is done: run `raya up` "
                    "again once the control plane is up"
                )
            say(f"cluster autoscaler: the API does not answer yet ({problem}); retrying")
            clock.sleep(API_RETRY)
        applied.append(what)
    return applied
