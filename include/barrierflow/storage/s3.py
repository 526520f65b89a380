"""S3 object store (``s3://BUCKET/PREFIX``) on boto3.

Endpoint, region and credentials come only from the standard AWS environment, never from
the pipeline spec:

* endpoint: ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL`` (both read natively by
  botocore), else the shared config file, else AWS itself;
* region: ``AWS_REGION``, else ``AWS_DEFAULT_REGION`` / the shared config file, else
  ``us-east-1`` (botocore does not read ``AWS_REGION`` itself, so this module does);
* credentials: boto3's default chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
  profiles, the instance's role, ...).

When a custom endpoint is configured through the environment (MinIO, moto, Ceph, ...)
path-style addressing is used, since such endpoints rarely resolve ``BUCKET.host`` names.

Contract (see :mod:`barrierflow.storage.object_store`): ``put_bytes`` is one PUT and
``put_file`` one managed upload (a multipart upload becomes visible only when completed),
so readers never see a partial object; a missing key raises :class:`ObjectNotFoundError`;
a missing *bucket* raises a plain :class:`StorageError` (never "not found", so that a
misnamed bucket is not mistaken for "no checkpoint yet"). Every botocore/boto3 failure is
re-raised as :class:`StorageError` naming the ``s3://`` URI and the likely fix; messages
and logs never contain credentials.

Content-checked uploads: ``put_file(key, path, sha256=...)`` of a file up to
:data:`SINGLE_PUT_MAX_BYTES` sends the caller's sha256 as ``x-amz-checksum-sha256``, a signed
header, and S3 refuses the PUT if the body does not match it (``BadDigest``). Those requests
go through a second client that does not hash the body again for the signature
(``payload_signing_enabled: False``, ``UNSIGNED-PAYLOAD``), which botocore otherwise does on
``http://`` endpoints, nor compute its default CRC32: the one sha256 the checkpoint needs anyway
covers integrity end to end, from the hashed local file to the stored object. Every other
request keeps botocore's defaults.

Instances are picklable (they are shipped to Spark executors inside closures): the boto3
client is created lazily and dropped when pickling, so each process builds its own from its
own environment.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

from barrierflow.errors import StorageError, UserInputError
from barrierflow.storage.object_store import (
    ConditionalWriteUnsupportedError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStore,
)

if TYPE_CHECKING:
    from botocore.client import BaseClient

logger = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"
#: S3's DeleteObjects accepts at most this many keys per request.
DELETE_BATCH_SIZE = 1000
#: :meth:`S3ObjectStore.put_file` sends files up to this size in one PutObject (S3 allows 5 GB):
#: no transfer manager and thread pool per file, and the request runs in the calling thread.
SINGLE_PUT_MAX_BYTES = 64 * 1024 * 1024
#: Part size of the multipart uploads of larger files.
MULTIPART_PART_BYTES = 32 * 1024 * 1024

_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
_NO_BUCKET_CODES = frozenset({"NoSuchBucket"})
_ACCESS_CODES = frozenset({"403", "AccessDenied", "Forbidden", "AllAccessDisabled"})
#: The object exists (412), or a concurrent conditional write of the same key won (409).
_EXISTS_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
#: The endpoint does not implement conditional writes.
_UNSUPPORTED_CODES = frozenset({"NotImplemented", "501"})
#: The server refused a body that did not match the request's checksum header.
_CHECKSUM_MISMATCH_CODES = frozenset({"BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch"})
_BAD_CREDENTIAL_CODES = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired"}
)


def _env_endpoint() -> str | None:
    """The endpoint configured through the environment, as botocore would pick it."""
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return None
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def _base64_digest(sha256: str) -> str:
    """``x-amz-checksum-sha256``'s form of a hex sha256: the 32 bytes, base64."""
    try:
        raw = bytes.fromhex(sha256)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise StorageError(f"not a sha256 (64 hex digits): {sha256!r}")
    return base64.b64encode(raw).decode("ascii")


def _redact_url(url: str) -> str:
    """``url`` without any ``user:password@`` part, safe for messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable endpoint URL>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


class S3ObjectStore(ObjectStore):
    """Objects are S3 keys ``PREFIX + key`` in ``bucket``.

    ``uri`` is ``s3://BUCKET`` or ``s3://BUCKET/PREFIX`` (without a trailing slash); keys are
    relative to it, ``/``-separated, never starting with ``/`` and without ``..`` segments.
    """

    def __init__(self, bucket: str, prefix: str = "") -> None:
        if not bucket or "/" in bucket:
            raise UserInputError(f"invalid S3 bucket name {bucket!r}")
        prefix = prefix.strip("/")
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self.uri = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self._client: BaseClient | None = None
        self._checked_upload_client: BaseClient | None = None
        self._bucket_checked = False
        self._lock = threading.Lock()

    @classmethod
    def from_uri(cls, uri: str) -> S3ObjectStore:
        """Parse ``s3://BUCKET[/PREFIX]``; raise :class:`UserInputError` if malformed."""
        if not uri.startswith("s3://"):
            raise UserInputError(f"not an S3 URI: {uri!r} (expected s3://BUCKET/PREFIX)")
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise UserInputError(f"S3 URI {uri!r} has no bucket (expected s3://BUCKET/PREFIX)")
        if ".." in prefix.split("/"):
            raise UserInputError(f"S3 URI {uri!r} must not contain '..' segments")
        return cls(bucket, prefix)

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.uri!r})"

    # -- pickling: the client and lock stay in the process that made them ----------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        state["_checked_upload_client"] = None
        state["_bucket_checked"] = False
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- client --------------------------------------------------------------------------

    @property
    def client(self) -> BaseClient:
        """The boto3 S3 client, created on first use from the environment."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    @property
    def checked_upload_client(self) -> BaseClient:
        """The client for PUTs that carry the body's sha256 (see the module docstring)."""
        if self._checked_upload_client is None:
            with self._lock:
                if self._checked_upload_client is None:
                    self._checked_upload_client = self._make_client(sign_payload=False)
        return self._checked_upload_client

    def _make_client(self, sign_payload: bool | None = None) -> BaseClient:
        """``sign_payload`` False: no sha256 of the body for the signature (only for requests
        that carry their own checksum header); None: botocore's default."""
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError

        endpoint = _env_endpoint()
        s3_options: dict[str, Any] = {"addressing_style": "path"} if endpoint else {}
        if sign_payload is not None:
            s3_options["payload_signing_enabled"] = sign_payload
        config = Config(
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=30,
            s3=s3_options or None,
        )
        try:
            session = boto3.session.Session()
            region = os.environ.get("AWS_REGION") or session.region_name or DEFAULT_REGION
            client = session.client("s3", region_name=region, config=config)
        except (BotoCoreError, ValueError) as exc:
            raise StorageError(
                f"cannot create an S3 client for {self.uri}: {exc}. Check AWS_ENDPOINT_URL_S3 / "
                "AWS_ENDPOINT_URL (a full URL such as http://host:9000) and AWS_REGION."
            ) from exc
        logger.debug(
            "S3 client for %s: endpoint %s, region %s",
            self.uri,
            _redact_url(client.meta.endpoint_url),
            client.meta.region_name,
        )
        return client

    def _endpoint_for_messages(self) -> str:
        if self._client is not None:
            return _redact_url(self._client.meta.endpoint_url)
        endpoint = _env_endpoint()
        return _redact_url(endpoint) if endpoint else "the default AWS endpoint"

    # -- keys and errors -----------------------------------------------------------------

    def _key(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise StorageError(f"invalid object key {key!r} (must be non-empty, relative, without '..')")
        return self.prefix + key

    def _raise(self, exc: BaseException, action: str, key: str) -> NoReturn:
        """Re-raise a boto3/botocore failure of ``action`` on ``key`` as StorageError."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
            ReadTimeoutError,
        )

        target = self.describe(key) if key else self.uri
        endpoint = self._endpoint_for_messages()
        cause: BaseException = exc
        if isinstance(exc, Boto3Error) and isinstance(exc.__context__, ClientError):
            cause = exc.__context__  # S3UploadFailedError wraps the ClientError in its text

        if isinstance(cause, ClientError):
            error = cause.response.get("Error", {})
            code = str(error.get("Code", "Unknown"))
            detail = str(error.get("Message") or "").strip()
            status = cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            what = (
                f"S3 error {code}"
                + (f" (HTTP {status})" if status else "")
                + (f": {detail}" if detail else "")
            )
            if code in _NO_BUCKET_CODES:
                hint = f"bucket does not exist: create it (s3://{self.bucket} at {endpoint}) or fix the URI"
            elif code in _ACCESS_CODES:
                hint = (
                    f"access denied: check that the credentials in the environment may {action} "
                    f"in s3://{self.bucket} (bucket policy / IAM role)"
                )
            elif code in _BAD_CREDENTIAL_CODES:
                hint = (
                    "the credentials were rejected: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                    "(and AWS_SESSION_TOKEN) for this endpoint"
                )
            elif code in {
                "PermanentRedirect",
                "AuthorizationHeaderMalformed",
                "IllegalLocationConstraintException",
            }:
                hint = "the bucket is in another region: set AWS_REGION to the bucket's region"
            elif code in _CHECKSUM_MISMATCH_CODES:
                hint = ("the stored bytes did not match the file's sha256: the local file changed while it was "
                        "uploaded, or the transfer was corrupted; nothing was stored, so retrying re-reads the file")
            else:
                hint = f"endpoint {endpoint}"
            message = f"cannot {action} {target}: {what}; {hint}"
        elif isinstance(cause, EndpointConnectionError | ConnectTimeoutError | ConnectionClosedError):
            message = (
                f"cannot {action} {target}: cannot connect to the S3 endpoint {endpoint}; "
                f"is the endpoint AWS_ENDPOINT_URL_S3={endpoint} reachable?"
            )
        elif isinstance(cause, ReadTimeoutError):
            message = f"cannot {action} {target}: the S3 endpoint {endpoint} did not answer in time"
        elif isinstance(cause, NoCredentialsError | PartialCredentialsError):
            message = (
                f"cannot {action} {target}: no usable AWS credentials; set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or give the machine an instance role)"
            )
        elif isinstance(cause, OSError):
            message = f"cannot {action} {target}: local file error: {cause}"
        else:
            message = f"cannot {action} {target} (endpoint {endpoint}): {type(cause).__name__}: {cause}"
        logger.debug("S3 failure: %s", message)
        raise StorageError(message) from exc

    @staticmethod
    def _error_code(exc: BaseException) -> str | None:
        from botocore.exceptions import ClientError

        if isinstance(exc, ClientError):
            return str(exc.response.get("Error", {}).get("Code", "")) or None
        return None

    def _ensure_bucket(self, action: str, key: str) -> None:
        """After an ambiguous 404 (HEAD has no body): raise if the bucket itself is missing.

        Checked once per client; a bucket deleted later surfaces through other operations.
        """
        if self._bucket_checked:
            return
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if self._error_code(exc) in _NOT_FOUND_CODES | _NO_BUCKET_CODES:
                endpoint = self._endpoint_for_messages()
                raise StorageError(
                    f"cannot {action} {self.describe(key)}: bucket does not exist: create it "
                    f"(s3://{self.bucket} at {endpoint}) or fix the URI"
                ) from exc
            if self._error_code(exc) in _ACCESS_CODES:
                # May not be allowed to HEAD the bucket; the object lookup was a plain 404.
                self._bucket_checked = True
                return
            self._raise(exc, action, key)
        except BotoCoreError as exc:
            self._raise(exc, action, key)
        self._bucket_checked = True

    # -- ObjectStore ---------------------------------------------------------------------

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` to ``key`` with one PUT (atomic: whole object or nothing)."""
        from botocore.exceptions import BotoCoreError, ClientError

        s3_key = self._key(key)
        try:
            self.client.put_object(Bucket=self.bucket, Key=s3_key, Body=data)
        except (ClientError, BotoCoreError) as exc:
            self._raise(exc, "write", key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """``PutObject`` with ``If-None-Match: *``: True if created, False if the key existed
        (412 PreconditionFailed, or 409 ConditionalRequestConflict when a concurrent
        conditional write of the key won). An endpoint answering NotImplemented/501 raises
        :class:`ConditionalWriteUnsupportedError`; an endpoint that ignores the header and
        overwrites is detected by :meth:`check_conditional_writes`, not here."""
        from botocore.exceptions import BotoCoreError, ClientError

        s3_key = self._key(key)
        try:
            self.client.put_object(Bucket=self.bucket, Key=s3_key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            code = self._error_code(exc)
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code in _EXISTS_CODES or status in {"412", "409"}:
                return False
            if code in _UNSUPPORTED_CODES or status == "501":
                raise self._unsupported(f"it answered {code or status} to PutObject with If-None-Match") from exc
            self._raise(exc, "create", key)
        except BotoCoreError as exc:
            self._raise(exc, "create", key)
        return True

    def _unsupported(self, why: str) -> ConditionalWriteUnsupportedError:
        return ConditionalWriteUnsupportedError(
            f"the S3 endpoint {self._endpoint_for_messages()} of {self.uri} does not support conditional writes "
            f"({why}), which the pipeline's lease and fencing need to exclude drivers on other hosts. Use an "
            "endpoint that honours If-None-Match on PutObject (AWS S3, MinIO since 2024, recent Ceph RGW), or keep "
            "the checkpoint store on a file:// path that every host mounts")

    def check_conditional_writes(self, probe_key: str) -> None:
        """Probe that the endpoint honours ``If-None-Match: *``: create ``probe_key``, create it
        again (must be refused), delete it. Raises :class:`ConditionalWriteUnsupportedError`
        naming the endpoint and the fix if the second write went through (the header was
        ignored and the object overwritten)."""
        if not self.put_if_absent(probe_key, b"1"):
            self.delete(probe_key)  # a crashed earlier probe's leftover
            if not self.put_if_absent(probe_key, b"1"):
                raise self._unsupported(f"a probe object {self.describe(probe_key)} cannot be created")
        try:
            if self.put_if_absent(probe_key, b"2"):
                raise self._unsupported("it overwrote an existing object despite If-None-Match: *")
        finally:
            self.delete(probe_key)

    def put_file(self, key: str, local_path: str, sha256: str | None = None) -> None:
        """Upload ``local_path`` to ``key``, visible only once complete, in the calling thread:
        one PutObject up to :data:`SINGLE_PUT_MAX_BYTES`, a multipart upload above (parts one
        after another). Callers that want parallel uploads upload several files at once; the
        calling thread's CPU priority (``checkpoint.async_nice``) covers all the work.

        ``sha256`` (64 hex digits): the PutObject carries it and the server refuses a body that
        does not match (:class:`StorageError` naming the object; see the module docstring).
        Multipart uploads of larger files keep botocore's own per-request checksums."""
        from boto3.exceptions import Boto3Error
        from boto3.s3.transfer import TransferConfig
        from botocore.exceptions import BotoCoreError, ClientError

        s3_key = self._key(key)
        checksum = None if sha256 is None else _base64_digest(sha256)
        try:
            if os.path.getsize(local_path) <= SINGLE_PUT_MAX_BYTES:
                with open(local_path, "rb") as body:
                    if checksum is None:
                        self.client.put_object(Bucket=self.bucket, Key=s3_key, Body=body)
                    else:
                        self.checked_upload_client.put_object(Bucket=self.bucket, Key=s3_key, Body=body,
                                                              ChecksumAlgorithm="SHA256", ChecksumSHA256=checksum)
            else:
                config = TransferConfig(multipart_threshold=SINGLE_PUT_MAX_BYTES,
                                        multipart_chunksize=MULTIPART_PART_BYTES, use_threads=False)
                self.client.upload_file(os.fspath(local_path), self.bucket, s3_key, Config=config)
        except (ClientError, BotoCoreError, Boto3Error, OSError) as exc:
            self._raise(exc, "write", key)

    def get_bytes(self, key: str) -> bytes:
        """The whole object; :class:`ObjectNotFoundError` if ``key`` does not exist."""
        from botocore.exceptions import BotoCoreError, ClientError

        s3_key = self._key(key)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=s3_key)
            body: bytes = response["Body"].read()
            return body
        except ClientError as exc:
            if self._error_code(exc) in _NOT_FOUND_CODES:
                raise ObjectNotFoundError(self.describe(key)) from None
            self._raise(exc, "read", key)
        except BotoCoreError as exc:
            self._raise(exc, "read", key)

    def download_file(self, key: str, local_path: str) -> None:
        """Download ``key`` to ``local_path``; :class:`ObjectNotFoundError` if missing."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        s3_key = self._key(key)
        try:
            self.client.download_file(self.bucket, s3_key, os.fspath(local_path))
        except ClientError as exc:
            if self._error_code(exc) in _NOT_FOUND_CODES:
                self._ensure_bucket("read", key)
                raise ObjectNotFoundError(self.describe(key)) from None
            self._raise(exc, "read", key)
        except (BotoCoreError, Boto3Error, OSError) as exc:
            self._raise(exc, "read", key)

    def size(self, key: str) -> int | None:
        """The object's size (HEAD), or None if it does not exist; a missing bucket raises."""
        from botocore.exceptions import BotoCoreError, ClientError

        s3_key = self._key(key)
        try:
            response = self.client.head_object(Bucket=self.bucket, Key=s3_key)
        except ClientError as exc:
            if self._error_code(exc) in _NOT_FOUND_CODES:
                self._ensure_bucket("stat", key)
                return None
            self._raise(exc, "stat", key)
        except BotoCoreError as exc:
            self._raise(exc, "stat", key)
        return int(response["ContentLength"])

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (recursively), sorted by key.

        Keys are relative to the store's URI; zero-byte "directory marker" keys ending in
        ``/`` are skipped, as directories are never objects of the local backend either.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        if prefix and (prefix.startswith("/") or ".." in prefix.split("/")):
            raise StorageError(f"invalid list prefix {prefix!r} (must be relative, without '..')")
        full_prefix = self.prefix + prefix
        out: list[ObjectInfo] = []
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full_prefix):
                for item in page.get("Contents", []):
                    s3_key: str = item["Key"]
                    if s3_key.endswith("/"):
                        continue
                    modified = item.get("LastModified")
                    out.append(ObjectInfo(s3_key[len(self.prefix) :], int(item["Size"]),
                                          str(item.get("ETag", "")).strip('"'),
                                          modified.timestamp() if modified is not None else 0.0))
        except (ClientError, BotoCoreError) as exc:
            self._raise(exc, "list", prefix)
        out.sort(key=lambda o: o.key)
        return out

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is a no-op (a missing bucket is not)."""
        from botocore.exceptions import BotoCoreError, ClientError

        s3_key = self._key(key)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=s3_key)
        except ClientError as exc:
            if self._error_code(exc) in {"NoSuchKey"}:
                return
            self._raise(exc, "delete", key)
        except BotoCoreError as exc:
            self._raise(exc, "delete", key)

    def delete_many(self, keys: list[str]) -> None:
        """Delete ``keys`` with DeleteObjects, 1000 per request; missing keys are ignored.

        Raises :class:`StorageError` naming the first failed keys if S3 reports per-key errors.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        s3_keys = [self._key(k) for k in dict.fromkeys(keys)]
        for start in range(0, len(s3_keys), DELETE_BATCH_SIZE):
            chunk = s3_keys[start : start + DELETE_BATCH_SIZE]
            try:
                response = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as exc:
                self._raise(exc, f"delete {len(chunk)} objects under", "")
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                shown = ", ".join(
                    f"{self.describe(str(e.get('Key', ''))[len(self.prefix) :])} ({e.get('Code')})"
                    for e in errors[:5]
                )
                more = f" and {len(errors) - 5} more" if len(errors) > 5 else ""
                raise StorageError(f"cannot delete {len(errors)} objects: {shown}{more}")

    def copy(self, src: str, dst: str) -> None:
        """Server-side copy (CopyObject, objects up to 5 GiB); ``dst`` appears atomically.

        :class:`ObjectNotFoundError` if ``src`` does not exist.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        src_key, dst_key = self._key(src), self._key(dst)
        try:
            self.client.copy_object(
                Bucket=self.bucket, Key=dst_key, CopySource={"Bucket": self.bucket, "Key": src_key}
            )
        except ClientError as exc:
            if self._error_code(exc) in _NOT_FOUND_CODES:
                raise ObjectNotFoundError(self.describe(src)) from None
            self._raise(exc, f"copy to {self.describe(dst)} from", src)
        except BotoCoreError as exc:
            self._raise(exc, f"copy to {self.describe(dst)} from", src)
