"""Contract tests of every ObjectStore backend (local directory and S3 on a moto server)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from barrierflow.errors import BarrierflowError, StorageError
from barrierflow.local_ports import free_port
from barrierflow.storage.local import LocalObjectStore
from barrierflow.storage.object_store import ObjectInfo, ObjectNotFoundError, ObjectStore
from barrierflow.storage.s3 import S3ObjectStore
from barrierflow.storage.uri import open_store


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """Each backend in turn; the S3 one lives in a fresh bucket under a prefix."""
    if request.param == "local":
        root = tmp_path / "store"
        return LocalObjectStore(root, uri=f"file://{root}")
    uri: str = request.getfixturevalue("s3_store_uri")
    backend = open_store(uri)
    assert isinstance(backend, S3ObjectStore)
    return backend


def test_put_get_round_trip(store: ObjectStore) -> None:
    store.put_bytes("a/b/c.bin", b"\x00hello\xff")
    assert store.get_bytes("a/b/c.bin") == b"\x00hello\xff"
    store.put_bytes("a/b/c.bin", b"replaced")
    assert store.get_bytes("a/b/c.bin") == b"replaced"
    store.put_bytes("empty", b"")
    assert store.get_bytes("empty") == b""


def test_put_file_download_file(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    payload = bytes(range(256)) * 1000
    src.write_bytes(payload)
    store.put_file("files/x.bin", str(src))
    dst = tmp_path / "dst.bin"
    store.download_file("files/x.bin", str(dst))
    assert dst.read_bytes() == payload
    assert store.size("files/x.bin") == len(payload)


def test_missing_key_raises_object_not_found_naming_the_uri(store: ObjectStore, tmp_path: Path) -> None:
    with pytest.raises(ObjectNotFoundError) as info:
        store.get_bytes("nope/missing.json")
    assert isinstance(info.value, StorageError)
    assert isinstance(info.value, BarrierflowError)
    assert store.describe("nope/missing.json") in str(info.value)

    with pytest.raises(ObjectNotFoundError) as info:
        store.download_file("nope/missing.json", str(tmp_path / "out"))
    assert store.describe("nope/missing.json") in str(info.value)


def test_size_and_exists(store: ObjectStore) -> None:
    assert store.size("k") is None
    assert not store.exists("k")
    store.put_bytes("k", b"12345")
    assert store.size("k") == 5
    assert store.exists("k")


def test_list_with_prefix(store: ObjectStore) -> None:
    assert store.list() == []
    store.put_bytes("chk-2/b.txt", b"bb")
    store.put_bytes("chk-1/nested/deep/a.txt", b"a")
    store.put_bytes("chk-1/z.txt", b"zzz")
    store.put_bytes("chk-10/x.txt", b"x")
    store.put_bytes("other/y.txt", b"yyyy")

    assert store.list("chk-1/") == [
        ObjectInfo("chk-1/nested/deep/a.txt", 1),
        ObjectInfo("chk-1/z.txt", 3),
    ]
    everything = store.list()
    assert [o.key for o in everything] == sorted(o.key for o in everything)
    assert {o.key: o.size for o in everything} == {
        "chk-1/nested/deep/a.txt": 1,
        "chk-1/z.txt": 3,
        "chk-10/x.txt": 1,
        "chk-2/b.txt": 2,
        "other/y.txt": 4,
    }
    assert store.list("missing/") == []


def test_list_prefix_is_a_string_prefix_not_a_directory(
    store: ObjectStore, request: pytest.FixtureRequest
) -> None:
    store.put_bytes("chk-1/a.txt", b"a")
    store.put_bytes("chk-10/x.txt", b"x")
    store.put_bytes("chk-2/b.txt", b"b")
    assert [o.key for o in store.list("chk-1")] == ["chk-1/a.txt", "chk-10/x.txt"]


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put_bytes("d/x", b"1")
    store.delete("d/x")
    assert not store.exists("d/x")
    store.delete("d/x")
    store.delete("never/existed")


def test_delete_many(store: ObjectStore) -> None:
    keys = [f"many/{i:03d}" for i in range(12)]
    for key in keys:
        store.put_bytes(key, b"x")
    store.put_bytes("keep/me", b"k")
    store.delete_many([*keys[:10], "many/not-there"])
    assert [o.key for o in store.list()] == ["keep/me", "many/010", "many/011"]
    store.delete_many([])


def test_copy(store: ObjectStore) -> None:
    store.put_bytes("src/a", b"payload")
    store.copy("src/a", "dst/a")
    assert store.get_bytes("dst/a") == b"payload"
    assert store.get_bytes("src/a") == b"payload"
    with pytest.raises(ObjectNotFoundError):
        store.copy("src/missing", "dst/b")


def test_move(store: ObjectStore) -> None:
    store.put_bytes("tmp/part", b"data")
    store.move("tmp/part", "final/part")
    assert store.get_bytes("final/part") == b"data"
    assert not store.exists("tmp/part")
    with pytest.raises(ObjectNotFoundError):
        store.move("tmp/part", "final/other")


# -- S3 only ---------------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_store_keys_live_under_the_uri_prefix(s3_store_uri: str, s3_endpoint: object) -> None:
    store = open_store(s3_store_uri)
    assert isinstance(store, S3ObjectStore)
    store.put_bytes("x/y", b"1")
    bucket, _, prefix = s3_store_uri.removeprefix("s3://").partition("/")
    client = store.client
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]  # type: ignore[attr-defined]
    assert keys == [f"{prefix}/x/y"]
    # the same bucket opened at its root sees the full key
    assert [o.key for o in open_store(f"s3://{bucket}").list()] == [f"{prefix}/x/y"]


def test_s3_uri_parsing() -> None:
    store = S3ObjectStore.from_uri("s3://bucket/a/b/")
    assert (store.bucket, store.prefix, store.uri) == ("bucket", "a/b/", "s3://bucket/a/b")
    assert store.describe("k") == "s3://bucket/a/b/k"
    root = S3ObjectStore.from_uri("s3://bucket")
    assert (root.bucket, root.prefix, root.describe("k")) == ("bucket", "", "s3://bucket/k")
    with pytest.raises(BarrierflowError, match="no bucket"):
        S3ObjectStore.from_uri("s3:///prefix")


@pytest.mark.s3
def test_s3_dead_endpoint_gives_storage_error_naming_uri_and_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    secret = "sEcReT-do-not-leak-1234567890"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIADEADENDPOINT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    store = open_store("s3://some-bucket/ckpt")
    for call in (lambda: store.get_bytes("meta.json"), lambda: store.put_bytes("meta.json", b"{}")):
        with pytest.raises(StorageError) as info:
            call()
        message = str(info.value)
        assert not isinstance(info.value, ObjectNotFoundError)
        assert "s3://some-bucket/ckpt/meta.json" in message
        assert endpoint in message
        assert "reachable" in message
        assert secret not in message
        assert "AKIADEADENDPOINT" not in message


@pytest.mark.s3
def test_s3_missing_bucket_is_a_clear_storage_error(s3_endpoint: object, tmp_path: Path) -> None:
    store = open_store("s3://bf-no-such-bucket-anywhere/p")
    for call in (
        lambda: store.put_bytes("k", b"1"),
        lambda: store.get_bytes("k"),
        lambda: store.size("k"),
        lambda: store.download_file("k", str(tmp_path / "out")),
        lambda: store.list(),
        lambda: store.delete("k"),
        lambda: store.delete_many(["k"]),
    ):
        with pytest.raises(StorageError) as info:
            call()
        assert not isinstance(info.value, ObjectNotFoundError)
        message = str(info.value)
        assert "s3://bf-no-such-bucket-anywhere" in message
        assert "bucket does not exist: create it" in message


@pytest.mark.s3
def test_s3_store_pickles_and_works_after_unpickling(s3_store_uri: str) -> None:
    store = open_store(s3_store_uri)
    assert isinstance(store, S3ObjectStore)
    store.put_bytes("before", b"1")  # creates the client
    clone = pickle.loads(pickle.dumps(store))
    assert isinstance(clone, S3ObjectStore)
    assert clone._client is None
    assert clone.uri == store.uri
    assert clone.get_bytes("before") == b"1"
    clone.put_bytes("after", b"2")
    assert store.get_bytes("after") == b"2"


class _CountingDeleteClient:
    """Stands in for the boto3 client: records DeleteObjects batch sizes."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def delete_objects(self, Bucket: str, Delete: dict[str, list[dict[str, str]]]) -> dict[str, object]:
        self.batches.append(len(Delete["Objects"]))
        return {}


def test_s3_delete_many_batches_by_1000() -> None:
    store = S3ObjectStore.from_uri("s3://bucket/p")
    fake = _CountingDeleteClient()
    store._client = fake  # type: ignore[assignment]
    store.delete_many([f"k{i}" for i in range(2500)])
    assert fake.batches == [1000, 1000, 500]


def test_local_list_stays_inside_its_root(tmp_path: Path) -> None:
    (tmp_path / "sibling").mkdir()
    (tmp_path / "sibling" / "x").write_bytes(b"x")
    store = LocalObjectStore(tmp_path / "root")
    assert store.list("") == []
    store.put_bytes("a/b.txt", b"b")
    assert [o.key for o in store.list("")] == ["a/b.txt"]
    assert [o.key for o in store.list("a/")] == ["a/b.txt"]
    assert store.list("zzz/") == [] and store.list("zzz") == []


@pytest.mark.s3
def test_s3_put_file_above_the_single_put_size_is_a_multipart_upload(
        s3_store_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from barrierflow.storage import s3

    monkeypatch.setattr(s3, "SINGLE_PUT_MAX_BYTES", 1024 * 1024)
    monkeypatch.setattr(s3, "MULTIPART_PART_BYTES", 5 * 1024 * 1024)  # S3's smallest part
    store = open_store(s3_store_uri)
    assert isinstance(store, S3ObjectStore)
    src = tmp_path / "big.bin"
    payload = bytes(range(256)) * (11 * 1024 * 1024 // 256)  # 11 MiB: parts of 5, 5 and 1 MiB
    src.write_bytes(payload)
    store.put_file("files/big.bin", str(src))
    head = store.client.head_object(Bucket=store.bucket, Key=store._key("files/big.bin"))
    assert head["ETag"].strip('"').endswith("-3")  # three parts
    dst = tmp_path / "dst.bin"
    store.download_file("files/big.bin", str(dst))
    assert dst.read_bytes() == payload


def _sha256_hex(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_put_file_with_its_sha256_stores_the_file(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "state.delta"
    payload = bytes(range(256)) * 4096  # 1 MiB
    src.write_bytes(payload)
    store.put_file("shared/ab/file", str(src), sha256=_sha256_hex(payload))
    dst = tmp_path / "dst.bin"
    store.download_file("shared/ab/file", str(dst))
    assert dst.read_bytes() == payload


@pytest.mark.s3
def test_s3_put_file_sends_the_callers_sha256_and_does_not_hash_the_body_again(
        s3_store_uri: str, tmp_path: Path) -> None:
    """The PUT carries x-amz-checksum-sha256 (signed header) and an unsigned payload; the
    server keeps the checksum it was given, which is the file's."""
    import base64

    store = open_store(s3_store_uri)
    assert isinstance(store, S3ObjectStore)
    src = tmp_path / "state.delta"
    payload = b"barrier" * 100_000
    src.write_bytes(payload)
    digest = _sha256_hex(payload)
    sent: list[dict[str, str]] = []

    def record(request: object, **_: object) -> None:
        headers = request.headers  # type: ignore[attr-defined]
        sent.append({k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in headers.items()})

    store.checked_upload_client.meta.events.register("before-send.s3.PutObject", record)
    store.put_file("shared/x", str(src), sha256=digest)
    assert len(sent) == 1
    assert sent[0]["x-amz-checksum-sha256"] == base64.b64encode(bytes.fromhex(digest)).decode()
    assert sent[0]["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
    assert "x-amz-checksum-sha256" in sent[0]["authorization"]  # the checksum itself is signed
    head = store.client.head_object(Bucket=store.bucket, Key=store._key("shared/x"), ChecksumMode="ENABLED")
    assert base64.b64decode(head["ChecksumSHA256"]).hex() == digest
    assert store.get_bytes("shared/x") == payload

    # Without a sha256 the default client signs as botocore always did.
    sent.clear()
    plain: list[str] = []
    store.client.meta.events.register(
        "before-send.s3.PutObject", lambda request, **_: plain.append(request.headers["x-amz-content-sha256"]))
    store.put_file("other/y", str(src))
    assert sent == [] and plain and plain[0] != "UNSIGNED-PAYLOAD"


def test_s3_put_file_refuses_a_malformed_sha256_before_any_request(tmp_path: Path) -> None:
    store = S3ObjectStore.from_uri("s3://bucket/p")
    src = tmp_path / "f"
    src.write_bytes(b"x")
    with pytest.raises(StorageError, match="not a sha256"):
        store.put_file("shared/f", str(src), sha256="abc")
    assert store._client is None and store._checked_upload_client is None


def test_s3_checksum_refusal_becomes_a_storage_error_naming_the_object_and_the_cause() -> None:
    """What S3 answers when the body does not match x-amz-checksum-sha256 (``BadDigest``, HTTP
    400) becomes a StorageError naming the object and what happened. The refusal itself is S3's:
    moto 5.2 stores the checksum unchecked, so this checks barrierflow's translation of S3's
    real error response, built as botocore builds it."""
    from botocore.exceptions import ClientError

    store = S3ObjectStore.from_uri("s3://bucket/p")
    refusal = ClientError({"Error": {"Code": "BadDigest", "Message": "The sha256 you specified did not match the "
                                     "calculated checksum."}, "ResponseMetadata": {"HTTPStatusCode": 400}},
                          "PutObject")
    with pytest.raises(StorageError) as info:
        store._raise(refusal, "write", "shared/ab/abcd")
    message = str(info.value)
    assert "s3://bucket/p/shared/ab/abcd" in message
    assert "BadDigest" in message and "HTTP 400" in message
    assert "did not match the file's sha256" in message and "nothing was stored" in message
