"""A real S3 implementation (moto's server) on 127.0.0.1, and snapshots put into it the way
k3s puts them (k3s-io/k3s pkg/etcd/s3/s3.go, `Upload`: the object at `<folder>/<name>`, its
metadata file at `<folder>/.metadata/<name>`, user metadata k3s-cluster-id, k3s-node-name and
k3s-token-hash; names from pkg/etcd/snapshot.go: `<etcd-snapshot|on-demand>-<node>-<unix
seconds>`, `.zip` when compressed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from raya.nodes.identity import token_hash

ACCESS_KEY = "AKIDRAYATEST"
SECRET_KEY = "raya-test-secret"
REGION = "us-east-1"


@contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server on a free port of 127.0.0.1; yields its `host:port`."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"{host}:{port}"
    finally:
        server.stop()


def client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name=REGION,
                        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)  # fmt: skip


def k3s_upload(endpoint: str, bucket: str, folder: str, name: str, data: bytes,
               join_secret: str) -> None:  # fmt: skip
    """Put snapshot `name` where and how k3s puts it (what k3s does around an upload, its
    schedule and both retentions: tests/operate/k3s_snapshots.py)."""
    # Both of k3s' prefixes (etcd-snapshot, on-demand) hold one '-'; the time is last.
    node = name.split(".")[0].rsplit("-", 1)[0].split("-", 2)[2]
    meta = {"k3s-cluster-id": "5b1c3f0e-cluster", "k3s-node-name": node,
            "k3s-token-hash": token_hash(join_secret)}  # fmt: skip
    s3 = client(endpoint)
    s3.put_object(Bucket=bucket, Key=f"{folder}/{name}", Body=data, Metadata=meta,
                  ContentType="application/octet-stream")  # fmt: skip
    s3.put_object(Bucket=bucket, Key=f"{folder}/.metadata/{name}",
                  Body=json.dumps({"by": "k3s"}).encode(), Metadata=meta)  # fmt: skip
