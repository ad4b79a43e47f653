"""The object storage stand-in's own rules (tests/operate/s3.py): TLS with its CA, signatures
checked with the keys it issued, each call authorized by the permission GCS' table names,
bindings in force only once IAM has propagated, botocore's default checksums refused."""

from __future__ import annotations

import secrets
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, SSLError

from tests.operate.s3 import (
    ACCESS_KEY,
    REGION,
    ROLES,
    SECRET_KEY,
    ObjectStorage,
    client,
    permissions_for,
)


@pytest.fixture
def bucket(s3: ObjectStorage) -> str:
    name = f"standin-{secrets.token_hex(4)}"  # one bucket per test: the server is shared
    s3.client().create_bucket(Bucket=name)
    s3.client().put_object(Bucket=name, Key="raya/kept", Body=b"kept")
    return name


def code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


def test_a_wrong_secret_is_refused_over_https(s3: ObjectStorage, bucket: str) -> None:
    access_key, _ = s3.writer(bucket, ["roles/storage.objectViewer"])
    with pytest.raises(ClientError) as refused:
        client(s3.endpoint, access_key, "a-secret-it-never-issued").get_object(
            Bucket=bucket, Key="raya/kept"
        )
    assert code(refused) == "SignatureDoesNotMatch"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_a_key_it_never_issued_is_refused(s3: ObjectStorage, bucket: str) -> None:
    with pytest.raises(ClientError) as refused:
        client(s3.endpoint, "GOOG1EUNKNOWNKEY", "whatever").list_objects_v2(Bucket=bucket)
    assert code(refused) == "InvalidAccessKeyId"


def test_a_client_that_does_not_trust_its_ca_is_refused(
    s3: ObjectStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_CA_BUNDLE")  # botocore falls back to the public CAs
    with pytest.raises(SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        s3.client().list_buckets()


def test_plain_http_gets_no_answer(s3: ObjectStorage) -> None:
    plain = boto3.client("s3", endpoint_url=f"http://{s3.endpoint}", region_name=REGION,
                         aws_access_key_id="x", aws_secret_access_key="y",
                         config=Config(retries={"max_attempts": 1}))  # fmt: skip
    with pytest.raises(ConnectionClosedError):  # the TLS handshake fails: no answer
        plain.list_buckets()


def test_a_binding_is_in_force_only_once_iam_has_propagated(
    s3: ObjectStorage, bucket: str
) -> None:
    access_key, secret = s3.issue_key()
    s3.grant(access_key, bucket, ROLES["roles/storage.objectViewer"])
    reader = client(s3.endpoint, access_key, secret)
    with pytest.raises(ClientError) as refused:
        reader.get_object(Bucket=bucket, Key="raya/kept")
    assert code(refused) == "AccessDenied"
    s3.propagate()
    assert reader.get_object(Bucket=bucket, Key="raya/kept")["Body"].read() == b"kept"


def test_a_binding_holds_on_its_bucket_alone(s3: ObjectStorage, bucket: str) -> None:
    other = f"standin-{secrets.token_hex(4)}"
    s3.client().create_bucket(Bucket=other)
    access_key, secret = s3.writer(bucket, ["roles/storage.objectViewer"])
    with pytest.raises(ClientError) as refused:
        client(s3.endpoint, access_key, secret).list_objects_v2(Bucket=other)
    assert code(refused) == "AccessDenied"


def test_a_bucket_that_does_not_exist_is_404_to_anyone_signed(s3: ObjectStorage) -> None:
    access_key, secret = s3.issue_key()  # no binding at all
    with pytest.raises(ClientError) as refused:
        client(s3.endpoint, access_key, secret).list_objects_v2(Bucket="no-such-bucket-here")
    assert code(refused) == "NoSuchBucket"


# Each call k3s or raya makes, and the one permission GCS' table names for it (a replacing
# PUT: the second one, storage.objects.delete).
CALLS: list[tuple[str, str]] = [
    ("head_bucket", "storage.buckets.get"),
    ("list_objects_v2", "storage.objects.list"),
    ("put_new", "storage.objects.create"),
    ("put_over", "storage.objects.delete"),
    ("get_object", "storage.objects.get"),
    ("head_object", "storage.objects.get"),
    ("delete_object", "storage.objects.delete"),
    ("create_multipart_upload", "storage.multipartUploads.create"),
    ("abort_multipart_upload", "storage.multipartUploads.abort"),
    ("list_parts", "storage.multipartUploads.listParts"),
    ("list_multipart_uploads", "storage.multipartUploads.list"),
]


def call(s3: Any, name: str, bucket: str, upload: str) -> None:
    object_ = {"Bucket": bucket, "Key": "raya/kept"}
    {
        "head_bucket": lambda: s3.head_bucket(Bucket=bucket),
        "list_objects_v2": lambda: s3.list_objects_v2(Bucket=bucket),
        "put_new": lambda: s3.put_object(Bucket=bucket, Key=f"raya/{secrets.token_hex(4)}",
                                         Body=b"new"),
        "put_over": lambda: s3.put_object(**object_, Body=b"again"),
        "get_object": lambda: s3.get_object(**object_),
        "head_object": lambda: s3.head_object(**object_),
        "delete_object": lambda: s3.delete_object(**object_),
        "create_multipart_upload": lambda: s3.create_multipart_upload(**object_),
        "abort_multipart_upload": lambda: s3.abort_multipart_upload(**object_, UploadId=upload),
        "list_parts": lambda: s3.list_parts(**object_, UploadId=upload),
        "list_multipart_uploads": lambda: s3.list_multipart_uploads(Bucket=bucket),
    }[name]()  # fmt: skip


@pytest.mark.parametrize(("name", "permission"), CALLS)
def test_each_call_needs_the_permission_gcs_names_for_it(
    s3: ObjectStorage, bucket: str, name: str, permission: str
) -> None:
    """With every storage permission but that one the call is refused AccessDenied; with it,
    it passes."""
    upload = s3.client().create_multipart_upload(Bucket=bucket, Key="raya/kept")["UploadId"]
    everything = ROLES["roles/storage.admin"]
    access_key, secret = s3.writer(bucket, [])
    s3.grant(access_key, bucket, everything - {permission})
    s3.propagate()
    lacking = client(s3.endpoint, access_key, secret)
    with pytest.raises(ClientError) as refused:
        call(lacking, name, bucket, upload)
    assert code(refused) in ("AccessDenied", "403")  # a HEAD's answer has no body
    assert s3.refused[-1][1] == "AccessDenied"
    s3.grant(access_key, bucket, {permission})
    s3.propagate()
    call(lacking, name, bucket, upload)


def test_the_table_asks_create_and_delete_to_replace_and_complete() -> None:
    assert permissions_for("PUT", "b", "k", set(), replaces=True) == {
        "storage.objects.create", "storage.objects.delete"
    }  # fmt: skip
    assert permissions_for("POST", "b", "k", {"uploadId"}, replaces=False) == {
        "storage.multipartUploads.create", "storage.objects.create"
    }  # fmt: skip
    assert permissions_for("PUT", "b", "k", {"partNumber", "uploadId"}, replaces=True) == {
        "storage.multipartUploads.create", "storage.objects.create"
    }  # fmt: skip
    assert permissions_for("GET", "", "", set(), replaces=False) == {"storage.buckets.list"}


def test_botocores_default_checksums_are_refused_as_gcs_refuses_them(
    s3: ObjectStorage, bucket: str
) -> None:
    """botocore >= 1.36 sends an aws-chunked body with a CRC32 trailer on every PUT."""
    default = boto3.client("s3", endpoint_url=f"https://{s3.endpoint}", region_name=REGION,
                           aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                           config=Config(s3={"addressing_style": "path"}))  # fmt: skip
    with pytest.raises(ClientError) as refused:
        default.put_object(Bucket=bucket, Key="raya/crc", Body=b"x")
    assert code(refused) == "SignatureDoesNotMatch"
    s3.client().put_object(Bucket=bucket, Key="raya/crc", Body=b"x")  # when_required: passes
