"""Object storage as production speaks to it: Google Cloud Storage's S3-compatible XML API over
HTTPS on 127.0.0.1, HMAC keys it issued, each call authorized by the IAM permission GCS asks
for it, the objects themselves kept by a real S3 implementation (moto's server) behind it on
loopback. And snapshots put into it the way k3s puts them (k3s-io/k3s pkg/etcd/s3/s3.go,
`Upload`: the object at `<folder>/<name>`, its metadata file at `<folder>/.metadata/<name>`,
user metadata k3s-cluster-id, k3s-node-name and k3s-token-hash; names from
pkg/etcd/snapshot.go: `<etcd-snapshot|on-demand>-<node>-<unix seconds>`, `.zip` when
compressed).

The rules the stand-in holds, each from its source:
- TLS with a CA of the test's own; clients trust it as any botocore client trusts a private
  CA, through `AWS_CA_BUNDLE` (botocore's `ca_bundle` setting: boto/botocore
  botocore/configprovider.py, `BOTOCORE_DEFAULT_SESSION_VARIABLES`), set while the stand-in
  runs. Production code keeps its default verification: no test-only path.
- AWS Signature Version 4, checked with the secret of the key named in `Authorization`
  (Google's "HMAC keys" and "V4 signing process with HMAC authentication" docs; AWS' "Create
  a signed AWS API request": canonical request, string to sign, derived signing key). An
  access key it never issued is refused 403 `InvalidAccessKeyId`, a wrong secret 403
  `SignatureDoesNotMatch`, a body whose sha256 differs from `x-amz-content-sha256` 400
  `XAmzContentSHA256Mismatch`, a request dated more than 15 minutes off 403
  `RequestTimeTooSkewed` (AWS S3 "Error responses"; GCS' XML API answers HMAC requests with
  the same codes).
- Each call needs the IAM permissions of Google's table "IAM permissions for XML methods"
  (cloud.google.com/storage/docs/access-control/iam-xml), `permissions_for` below: HEAD
  bucket -> storage.buckets.get (what k3s' BucketExists sends first: k3s-io/k3s
  pkg/etcd/s3/s3.go, `(*Controller).GetClient`, `mc.BucketExists`); GET bucket ->
  storage.objects.list; PUT object -> storage.objects.create, and storage.objects.delete
  when it replaces an object; multipart initiate/part/complete -> storage.multipartUploads.
  create with storage.objects.create (and delete when replacing); abort ->
  storage.multipartUploads.abort; list parts -> storage.multipartUploads.listParts;
  GET/HEAD object -> storage.objects.get; DELETE object -> storage.objects.delete. A missing
  one is refused 403 `AccessDenied` (GCS: "<account> does not have <permission> access to
  the Google Cloud Storage bucket").
- Permissions come from roles bound on one bucket (or project-wide, for the test's own
  owner key), with the predefined roles' permissions as Google lists them (`ROLES`, from
  "IAM roles for Cloud Storage", cloud.google.com/storage/docs/access-control/iam-roles, as
  recorded in iann0036/iam-dataset gcp/roles/storage.*.json).
- A bucket that does not exist is 404 `NoSuchBucket` to anyone who signs correctly (bucket
  names are global, and GCS says so before it checks a permission).
- A binding takes effect later, not inside the request that makes it: IAM is eventually
  consistent ("Access change propagation", cloud.google.com/iam/docs/access-change-
  propagation: typically 2 minutes, up to 7 or more). `grant` queues, `propagate` applies:
  the test says when the time has passed.
- GCS' interop refuses the flexible checksums botocore sends by default since 1.36 (the
  `x-amz-sdk-checksum-algorithm`/`x-amz-checksum-*` headers and the aws-chunked body with a
  checksum trailer, `x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER`): 403
  `SignatureDoesNotMatch`, as reported in boto/boto3#4400, gramps-project/gramps-web-api#758,
  PostHog/posthog#40593 and ansible/galaxy-operator#262; the clients there set
  `request_checksum_calculation="when_required"`.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import json
import os
import secrets
import ssl
import tempfile
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Set
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import boto3
from moto.server import ThreadedMotoServer

from raya.nodes.identity import _example_ca, token_hash
from tests.nodes.k3s_join import serving_certificate

# The test's own identity (like the deploy identity): an HMAC key holding roles/storage.admin
# on the whole project from before the test starts. It makes buckets and plays k3s' uploads.
ACCESS_KEY = "GOOGTESTOWNERKEY0000000000000000000000000000000000000000"
SECRET_KEY = "raya-test-owner-secret"
REGION = "auto"  # the signing region GCS takes (Google's V4 signing docs)
PROJECT = "*"  # a binding on every bucket of the project

# Predefined roles -> permissions (iam-roles page; iann0036/iam-dataset gcp/roles/), the
# storage.* permissions the XML API checks. The legacy roles can be bound on a bucket only.
ROLES: dict[str, frozenset[str]] = {
    "roles/storage.admin": frozenset({
        "storage.buckets.create", "storage.buckets.delete", "storage.buckets.get",
        "storage.buckets.getIamPolicy", "storage.buckets.list", "storage.buckets.setIamPolicy",
        "storage.buckets.update", "storage.multipartUploads.abort",
        "storage.multipartUploads.create", "storage.multipartUploads.list",
        "storage.multipartUploads.listParts", "storage.objects.create",
        "storage.objects.delete", "storage.objects.get", "storage.objects.getIamPolicy",
        "storage.objects.list", "storage.objects.restore", "storage.objects.setIamPolicy",
        "storage.objects.update",
    }),
    "roles/storage.objectAdmin": frozenset({
        "storage.multipartUploads.abort", "storage.multipartUploads.create",
        "storage.multipartUploads.list", "storage.multipartUploads.listParts",
        "storage.objects.create", "storage.objects.delete", "storage.objects.get",
        "storage.objects.getIamPolicy", "storage.objects.list", "storage.objects.restore",
        "storage.objects.setIamPolicy", "storage.objects.update",
    }),
    "roles/storage.objectUser": frozenset({
        "storage.multipartUploads.abort", "storage.multipartUploads.create",
        "storage.multipartUploads.list", "storage.multipartUploads.listParts",
        "storage.objects.create", "storage.objects.delete", "storage.objects.get",
        "storage.objects.list", "storage.objects.restore", "storage.objects.update",
    }),
    "roles/storage.objectViewer": frozenset({"storage.objects.get", "storage.objects.list"}),
    "roles/storage.legacyBucketReader": frozenset({
        "storage.buckets.get", "storage.multipartUploads.list", "storage.objects.list",
    }),
    "roles/storage.legacyBucketWriter": frozenset({
        "storage.buckets.get", "storage.multipartUploads.abort",
        "storage.multipartUploads.create", "storage.multipartUploads.list",
        "storage.multipartUploads.listParts", "storage.objects.create",
        "storage.objects.delete", "storage.objects.list",
    }),
    "roles/storage.legacyObjectReader": frozenset({"storage.objects.get"}),
}  # fmt: skip

# botocore's flexible checksums (>= 1.36), which GCS' interop refuses.
_CHECKSUM_HEADERS = ("x-amz-sdk-checksum-algorithm", "x-amz-trailer")
_STREAMING_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
_SKEW = datetime.timedelta(minutes=15)


def permissions_for(method: str, bucket: str, key: str, query: Set[str],
                    replaces: bool) -> frozenset[str]:  # fmt: skip
    """What GCS' table "IAM permissions for XML methods" asks of a call (`query`: the names
    of its query parameters; `replaces`: an object of that name exists)."""
    delete = {"storage.objects.delete"} if replaces else set()
    if not bucket:
        return frozenset({"storage.buckets.list"})
    if not key:
        if method == "HEAD":
            return frozenset({"storage.buckets.get"})
        if method == "GET":
            if "uploads" in query:
                return frozenset({"storage.multipartUploads.list"})
            if "acl" in query:
                return frozenset({"storage.buckets.get", "storage.buckets.getIamPolicy"})
            if query & {"location", "versioning", "lifecycle", "cors", "logging", "billing"}:
                return frozenset({"storage.buckets.get"})
            return frozenset({"storage.objects.list"})
        if method == "PUT":
            return frozenset({"storage.buckets.update" if query else "storage.buckets.create"})
        if method == "DELETE":
            return frozenset({"storage.buckets.delete"})
        return frozenset({f"(no XML method {method} on a bucket)"})
    if method in ("GET", "HEAD"):
        if "uploadId" in query:
            return frozenset({"storage.multipartUploads.listParts"})
        if "acl" in query:
            return frozenset({"storage.objects.get", "storage.objects.getIamPolicy"})
        return frozenset({"storage.objects.get"})
    if method == "POST" and "uploads" in query:
        return frozenset({"storage.multipartUploads.create", "storage.objects.create"})
    if method == "POST" and "uploadId" in query:
        return frozenset({"storage.multipartUploads.create", "storage.objects.create", *delete})
    if method == "PUT" and "uploadId" in query:
        return frozenset({"storage.multipartUploads.create", "storage.objects.create"})
    if method == "PUT":
        return frozenset({"storage.objects.create", *delete})
    if method == "DELETE" and "uploadId" in query:
        return frozenset({"storage.multipartUploads.abort"})
    if method == "DELETE":
        return frozenset({"storage.objects.delete"})
    return frozenset({f"(no XML method {method} on an object)"})


def role_permissions(roles: Iterable[str]) -> frozenset[str]:
    """The permissions predefined `roles` hold together (an unknown role is a test error)."""
    return frozenset().union(*(ROLES[role] for role in roles))


@dataclass
class ObjectStorage:
    """The stand-in's state: the keys it issued (access id -> secret), the permissions in
    force per (access id, bucket), and the bindings IAM has not propagated yet."""

    endpoint: str  # host:port, as raya's `Target.endpoint` and k3s' `etcd-s3-endpoint`
    ca_bundle: Path
    keys: dict[str, str] = field(default_factory=dict)
    granted: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    pending: list[tuple[str, str, frozenset[str]]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (call, error code)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def issue_key(self, access_key: str | None = None, secret: str | None = None
                  ) -> tuple[str, str]:  # fmt: skip
        """An HMAC key (as `gcp.storage.HmacKey` makes): the deployment's own, when given."""
        access_key = access_key or f"GOOG1E{secrets.token_hex(24).upper()}"
        secret = secret or secrets.token_urlsafe(30)
        with self.lock:
            self.keys[access_key] = secret
        return access_key, secret

    def grant(self, access_key: str, bucket: str, permissions: Iterable[str]) -> None:
        """Bind `permissions` to the key's account on `bucket` (PROJECT: on all): in force
        after the next `propagate`, not before."""
        with self.lock:
            self.pending.append((access_key, bucket, frozenset(permissions)))

    def propagate(self) -> None:
        """IAM's propagation delay has passed: every queued binding is in force."""
        with self.lock:
            for access_key, bucket, permissions in self.pending:
                self.granted.setdefault((access_key, bucket), set()).update(permissions)
            self.pending.clear()

    def writer(self, bucket: str, roles: Iterable[str], access_key: str | None = None,
               secret: str | None = None) -> tuple[str, str]:  # fmt: skip
        """A key (the deployment's, when given) holding `roles` on `bucket`, in force: what an
        earlier `raya up` left."""
        access_key, secret = self.issue_key(access_key, secret)
        self.grant(access_key, bucket, role_permissions(roles))
        self.propagate()
        return access_key, secret

    def allowed(self, access_key: str, bucket: str) -> set[str]:
        with self.lock:
            return self.granted.get((access_key, bucket), set()) | self.granted.get(
                (access_key, PROJECT), set()
            )

    def client(self, access_key: str = ACCESS_KEY, secret: str = SECRET_KEY) -> Any:
        return client(self.endpoint, access_key, secret)


@contextmanager
def s3_server() -> Iterator[ObjectStorage]:
    """The stand-in on a free port of 127.0.0.1, moto's server behind it, its CA trusted by
    botocore (`AWS_CA_BUNDLE`) while it runs."""
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    with tempfile.TemporaryDirectory(prefix="raya-s3-") as folder:
        ca = _example_ca("raya test object storage CA")
        ca_bundle = Path(folder) / "ca.crt"
        ca_bundle.write_text(ca.cert_pem)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(*serving_certificate(ca, Path(folder)))
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        storage = ObjectStorage(f"127.0.0.1:{server.server_address[1]}", ca_bundle)
        storage.issue_key(ACCESS_KEY, SECRET_KEY)
        storage.grant(ACCESS_KEY, PROJECT, ROLES["roles/storage.admin"])
        storage.propagate()
        server.storage, server.moto = storage, moto.get_host_and_port()  # type: ignore[attr-defined]
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        before = os.environ.get("AWS_CA_BUNDLE")
        os.environ["AWS_CA_BUNDLE"] = str(ca_bundle)
        try:
            yield storage
        finally:
            if before is None:
                os.environ.pop("AWS_CA_BUNDLE", None)
            else:
                os.environ["AWS_CA_BUNDLE"] = before
            server.shutdown()
            server.server_close()
            moto.stop()


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str, details: str = "") -> None:
        super().__init__(code)
        self.status, self.code, self.message, self.details = status, code, message, details


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_HEAD(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _serve(self) -> None:
        storage: ObjectStorage = self.server.storage  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urllib.parse.urlsplit(self.path)
        bucket, _, key = urllib.parse.unquote(url.path).lstrip("/").partition("/")
        query = {name for name, _ in urllib.parse.parse_qsl(url.query, keep_blank_values=True)}
        call = f"{self.command} {url.path}{'?' + url.query if url.query else ''}"
        try:
            access_key = self._authenticate(storage, url, body)
            self._refuse_checksums()
            if bucket and not self._exists(bucket, "") and not (self.command == "PUT" and not key):
                self._forward(body)  # 404 NoSuchBucket, whoever asks: names are global
                return
            replaces = self.command in ("PUT", "POST") and bool(key) and "uploads" not in query \
                and "partNumber" not in query and self._exists(bucket, key)  # fmt: skip
            missing = permissions_for(self.command, bucket, key, query, replaces) - (
                storage.allowed(access_key, bucket)
            )
            if missing:
                first = sorted(missing)[0]
                raise _Refused(403, "AccessDenied", "Access denied.",
                               f"{access_key[:8]}... does not have {first} access to the "
                               f"Google Cloud Storage bucket {bucket}.")  # fmt: skip
        except _Refused as refusal:
            with storage.lock:
                storage.refused.append((call, refusal.code))
            self._error(refusal)
            return
        self._forward(body)

    def _authenticate(self, storage: ObjectStorage, url: urllib.parse.SplitResult,
                      body: bytes) -> str:  # fmt: skip
        """The access key of a request whose SigV4 signature its secret reproduces."""
        authorization = self.headers.get("Authorization", "")
        scheme, _, fields = authorization.partition(" ")
        if scheme != "AWS4-HMAC-SHA256":
            raise _Refused(403, "AccessDenied", "Anonymous caller does not have "
                           "storage.objects.get access.")  # fmt: skip
        parts = dict(p.strip().split("=", 1) for p in fields.split(","))
        access_key, date, region, service, _ = parts["Credential"].split("/")
        secret = storage.keys.get(access_key)
        if secret is None:
            raise _Refused(403, "InvalidAccessKeyId",
                           "The access key Id you provided does not exist in our records.")
        stamp = self.headers.get("x-amz-date", "")
        when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
        if abs(datetime.datetime.now(datetime.UTC) - when) > _SKEW:
            raise _Refused(403, "RequestTimeTooSkewed",
                           "The difference between the request time and the server's time is "
                           "too large.")  # fmt: skip
        payload = self.headers.get("x-amz-content-sha256", "")
        if payload not in ("UNSIGNED-PAYLOAD", _STREAMING_TRAILER) and \
                payload != hashlib.sha256(body).hexdigest():  # fmt: skip
            raise _Refused(400, "XAmzContentSHA256Mismatch",
                           "The provided 'x-amz-content-sha256' header does not match what "
                           "was computed.")  # fmt: skip
        signed = parts["SignedHeaders"].split(";")
        canonical = "\n".join([
            self.command,
            url.path or "/",
            "&".join(
                f"{_quote(k)}={_quote(v)}"
                for k, v in sorted(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
            ),
            "".join(f"{h}:{' '.join((self.headers.get(h) or '').split())}\n" for h in signed),
            ";".join(signed),
            payload,
        ])  # fmt: skip
        scope = f"{date}/{region}/{service}/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signing = f"AWS4{secret}".encode()
        for part in (date, region, service, "aws4_request"):
            signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
        expected = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, parts["Signature"]):
            raise _Refused(403, "SignatureDoesNotMatch",
                           "The request signature we calculated does not match the signature "
                           "you provided. Check your Google secret key and signing method.")
        return access_key

    def _refuse_checksums(self) -> None:
        headers = {name.lower() for name in self.headers}
        if any(h in headers for h in _CHECKSUM_HEADERS) or any(
            h.startswith("x-amz-checksum-") and h != "x-amz-checksum-mode" for h in headers
        ) or self.headers.get("x-amz-content-sha256") == _STREAMING_TRAILER:  # fmt: skip
            raise _Refused(403, "SignatureDoesNotMatch",
                           "The request signature we calculated does not match the signature "
                           "you provided. Check your Google secret key and signing method.")

    def _moto(self) -> http.client.HTTPConnection:
        host, port = self.server.moto  # type: ignore[attr-defined]
        return http.client.HTTPConnection(host, port, timeout=60)

    def _exists(self, bucket: str, key: str) -> bool:
        moto = self._moto()
        try:
            path = f"/{bucket}/{urllib.parse.quote(key)}" if key else f"/{bucket}"
            moto.request("HEAD", path, headers={"Authorization": _MOTO_AUTH})
            return moto.getresponse().status == 200
        finally:
            moto.close()

    def _forward(self, body: bytes) -> None:
        moto = self._moto()
        try:
            # Verified here; moto is told the region it keeps buckets in, not GCS' `auto`.
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "authorization")}  # fmt: skip
            headers["Authorization"] = _MOTO_AUTH
            moto.request(self.command, self.path, body=body, headers=headers)
            answer = moto.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "server", "date"):
                    self.send_header(name, value)
            if answer.getheader("Content-Length") is None:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            moto.close()

    def _error(self, refusal: _Refused) -> None:
        details = f"<Details>{escape(refusal.details)}</Details>" if refusal.details else ""
        body = (
            "<?xml version='1.0' encoding='UTF-8'?>"
            f"<Error><Code>{refusal.code}</Code><Message>{escape(refusal.message)}</Message>"
            f"{details}</Error>"
        ).encode()
        self.send_response(refusal.status)
        self.send_header("Content-Type", "application/xml; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


# moto routes a request by the service of its credential scope; it checks no signature.
_MOTO_AUTH = "AWS4-HMAC-SHA256 Credential=moto/20260101/us-east-1/s3/aws4_request, " \
    "SignedHeaders=host, Signature=0"  # fmt: skip


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="-_.~")


def client(endpoint: str, access_key: str = ACCESS_KEY, secret: str = SECRET_KEY) -> Any:
    """A boto3 client of the stand-in (the owner's key unless told), set as GCS' interop
    needs (path-style, checksums only when an operation requires them)."""
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=f"https://{endpoint}", region_name=REGION,
        aws_access_key_id=access_key, aws_secret_access_key=secret,
        config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"),
    )  # fmt: skip


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


# minio-go uploads in parts of 16 MiB what is larger (minio/minio-go api-put-object.go,
# `putObjectCommon`, `minPartSize`; `OptimalPartInfo`): a big etcd snapshot goes in parts.
MIN_PART_SIZE = 16 * 2**20


def k3s_calls(endpoint: str, access_key: str, secret: str, bucket: str, folder: str,
              name: str, data: bytes, old: str) -> None:  # fmt: skip
    """Every call k3s' S3 client makes with the writer's key, in its order (k3s-io/k3s
    pkg/etcd/s3/s3.go): `GetClient`'s BucketExists (HEAD bucket); `Upload`'s FPutObject of
    the snapshot (in parts past MIN_PART_SIZE) and of its metadata file; `SnapshotRetention`'s
    ListObjects, then `DeleteSnapshot`'s StatObject and RemoveObject of snapshot `old` and
    its metadata; `Download`'s FGetObject (StatObject, then GET) on a restore from S3."""
    s3 = client(endpoint, access_key, secret)
    meta = {"k3s-cluster-id": "5b1c3f0e-cluster", "k3s-node-name": "control-plane",
            "k3s-token-hash": "0123456789ab"}  # fmt: skip
    key, metadata = f"{folder}/{name}", f"{folder}/.metadata/{name}"
    s3.head_bucket(Bucket=bucket)
    if len(data) > MIN_PART_SIZE:
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key, Metadata=meta,
                                            ContentType="application/octet-stream")["UploadId"]
        parts = [
            {"PartNumber": n + 1, "ETag": s3.upload_part(
                Bucket=bucket, Key=key, UploadId=upload, PartNumber=n + 1,
                Body=data[offset:offset + MIN_PART_SIZE])["ETag"]}
            for n, offset in enumerate(range(0, len(data), MIN_PART_SIZE))
        ]
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                     MultipartUpload={"Parts": parts})
    else:
        s3.put_object(Bucket=bucket, Key=key, Body=data, Metadata=meta,
                      ContentType="application/octet-stream")
    s3.put_object(Bucket=bucket, Key=metadata, Body=b'{"by": "k3s"}', Metadata=meta,
                  ContentType="application/json")
    s3.list_objects_v2(Bucket=bucket, Prefix=f"{folder}/etcd-snapshot")
    for doomed in (f"{folder}/{old}", f"{folder}/.metadata/{old}"):
        s3.head_object(Bucket=bucket, Key=doomed)
        s3.delete_object(Bucket=bucket, Key=doomed)
    s3.head_object(Bucket=bucket, Key=key)
    got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    if got != data:
        raise AssertionError(f"{key}: read back {len(got):,} bytes, not the {len(data):,} put")
