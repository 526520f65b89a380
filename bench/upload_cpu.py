"""``python -m bench --scenario upload-cpu``: what the asynchronous phase's upload costs in CPU
on the processing machine, per megabyte, piece by piece.

ABS keeps processing going while a checkpoint uploads, so on a machine whose cores the job keeps
busy, what ABS still costs is the upload path's CPU (bench/results/abs-overhead-s3/). This
scenario measures each piece alone, without Spark, against the S3 endpoint of the standard AWS
variables (``--store s3://bucket/prefix``), on ``--upload-mb`` of incompressible files of
:data:`FILE_BYTES` each (Spark's state files are lz4-compressed, so random bytes stand for them):

- **hash**: the uploader's sha256 of every file (content addressing; done once per new file);
- **PUT, signed payload**: :meth:`S3ObjectStore.put_file` without the file's sha256, i.e.
  botocore's defaults (on ``http://`` it hashes the body again for the signature, and adds its
  CRC32): how checkpoint files were uploaded before the uploader sent the file's sha256;
- **PUT with the file's sha256**: what the uploader does now (``x-amz-checksum-sha256``,
  unsigned payload, see :mod:`barrierflow.storage.s3`);
- **the same through a throttled link** (``--store-bandwidth``, the first value; default
  20 MB/s): adds the benchmark's emulated network, whose relay threads run at
  :data:`~bench.abs_overhead.LINK_NICE`.

Per row: CPU milliseconds per MB of the calling thread (the client's own work), of this
process's other threads (the relay), and, with ``--server-pid`` (a store process on this
machine, e.g. moto), of that process; plus MB/s of wall time. Rows alternate within each round
(``--rounds``); the table shows per-row medians over rounds. CPU times are what the kernel
accounted, so they barely move with the machine's load; wall times do.

It prints what it ran (command, commit, date, cores, load average, rounds) above the table and
writes the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every round's sample per row
(:mod:`bench.record`), to bench/results/upload-cpu/ (the runs before it are in
bench/results/abs-overhead-s3/), or to ``--markdown FILE`` and ``FILE`` with ``.json``.
"""

from __future__ import annotations

import os
import resource
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from barrierflow.checkpointing.uploader import sha256_file
from barrierflow.errors import UserInputError
from barrierflow.storage.s3 import S3ObjectStore

from bench.abs_overhead import throttled_store_endpoint
from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, report

#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "upload-cpu"

#: Size of each uploaded file: about one state partition's delta file of the reference job with a
#: million keys (bench/results/abs-overhead-s3/).
FILE_BYTES = 2 * 1024 * 1024
MEGABYTE = 1_000_000
DEFAULT_BANDWIDTH = 20.0

ROWS = ("hash", "PUT, signed payload", "PUT with the file's sha256", "PUT with the file's sha256, throttled link")


@dataclass(frozen=True)
class UploadCpuSample:
    """One row of one round: CPU milliseconds per MB, and MB/s of wall time."""

    row: str
    client_ms_per_mb: float
    relay_ms_per_mb: float
    server_ms_per_mb: float | None
    mb_per_s: float


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``), all its threads."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError as exc:
        raise UserInputError(f"--server-pid {pid}: cannot read /proc/{pid}/stat ({exc}); give the pid of the "
                             "S3 endpoint's process on this machine, or drop --server-pid") from exc
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(row: str, work: Callable[[], None], megabytes: float, server_pid: int | None) -> UploadCpuSample:
    """Run ``work`` once and charge its CPU to the calling thread, the process's other threads
    and the server process."""
    server_before = process_cpu_seconds(server_pid) if server_pid is not None else 0.0
    own_before, thread_before, wall_before = _own_cpu_seconds(), time.thread_time(), time.perf_counter()
    work()
    wall = time.perf_counter() - wall_before
    thread = time.thread_time() - thread_before
    others = max(0.0, _own_cpu_seconds() - own_before - thread)
    server = process_cpu_seconds(server_pid) - server_before if server_pid is not None else None
    return UploadCpuSample(row=row, client_ms_per_mb=thread * 1000 / megabytes,
                           relay_ms_per_mb=others * 1000 / megabytes,
                           server_ms_per_mb=None if server is None else server * 1000 / megabytes,
                           mb_per_s=megabytes / wall if wall > 0 else float("inf"))


def write_files(directory: Path, total_bytes: int) -> list[Path]:
    """Incompressible files of :data:`FILE_BYTES` (the last one shorter) adding up to ``total_bytes``."""
    files = []
    remaining = total_bytes
    while remaining > 0:
        size = min(FILE_BYTES, remaining)
        path = directory / f"state-{len(files):04d}.delta"
        path.write_bytes(os.urandom(size))
        files.append(path)
        remaining -= size
    return files


@contextmanager
def _fresh_store(uri: str) -> Iterator[S3ObjectStore]:
    """A new store (a new client, as a new job would make) under ``uri``/<random>, emptied afterwards."""
    store = S3ObjectStore.from_uri(f"{uri.rstrip('/')}/upload-cpu-{uuid.uuid4().hex[:12]}")
    try:
        yield store
    finally:
        store.delete_many([o.key for o in store.list("")])


def _warm_up(store: S3ObjectStore) -> None:
    """Create both clients and open a connection outside the measurement: a job's store lives as
    long as the job, so building a client (botocore loads the S3 service model, about 0.1 s of
    CPU) is not part of a checkpoint's cost."""
    store.put_bytes("warm-up", b"1")
    store.checked_upload_client.head_bucket(Bucket=store.bucket)


def run_round(uri: str, files: Sequence[Path], digests: dict[Path, str], *, bandwidth: float,
              server_pid: int | None, reverse: bool) -> list[UploadCpuSample]:
    """Every row once, in :data:`ROWS` order or reversed; each upload row writes every file once."""
    megabytes = sum(p.stat().st_size for p in files) / MEGABYTE

    def hash_all() -> None:
        for path in files:
            sha256_file(str(path))  # exactly what the uploader runs

    def upload(store: S3ObjectStore, with_digest: bool) -> Callable[[], None]:
        def run() -> None:
            for path in files:
                store.put_file(path.name, str(path), sha256=digests[path] if with_digest else None)
        return run

    samples = []
    for row in (tuple(reversed(ROWS)) if reverse else ROWS):
        if row == ROWS[0]:
            samples.append(measure(row, hash_all, megabytes, server_pid))
            continue
        if row == ROWS[3]:
            with throttled_store_endpoint([bandwidth]) as link, _fresh_store(uri) as store:
                assert link is not None
                link.set_rate(bandwidth)
                _warm_up(store)
                samples.append(measure(row, upload(store, True), megabytes, server_pid))
            continue
        with _fresh_store(uri) as store:
            _warm_up(store)
            samples.append(measure(row, upload(store, row == ROWS[2]), megabytes, server_pid))
    return samples


def run_upload_cpu_benchmark(uri: str, *, upload_mb: float, rounds: int, bandwidth: float | None = None,
                             server_pid: int | None = None,
                             markdown: str | None = None, results: Path | None = RESULTS,
                             command: str | None = None) -> dict[str, list[UploadCpuSample]]:
    """Measure every row ``rounds`` times (alternating order) and print the table; returns the
    samples per row. The run's record goes to ``markdown`` if given, else into ``results``
    (None: no record); ``command``: the command line it names."""
    if not uri.startswith("s3://") or len(uri) <= len("s3://"):
        raise UserInputError(f"bench --scenario upload-cpu needs --store s3://bucket/prefix (got {uri!r}); the "
                             "endpoint comes from AWS_ENDPOINT_URL_S3")
    if upload_mb <= 0:
        raise UserInputError(f"bench --scenario upload-cpu needs --upload-mb > 0 (got {upload_mb})")
    if server_pid is not None:
        process_cpu_seconds(server_pid)  # refuses a pid it cannot read before any work
    record = RunRecord.start("upload-cpu", command)
    by_row: dict[str, list[UploadCpuSample]] = {row: [] for row in ROWS}
    with tempfile.TemporaryDirectory(prefix="barrierflow-upload-cpu-") as tmp:
        files = write_files(Path(tmp), int(upload_mb * MEGABYTE))
        digests = {path: sha256_file(str(path)) for path in files}  # also brings them into the page cache
        for index in range(rounds):
            for sample in run_round(uri, files, digests, bandwidth=bandwidth or DEFAULT_BANDWIDTH,
                                    server_pid=server_pid, reverse=index % 2 == 1):
                by_row[sample.row].append(sample)
    record_run(record, by_row, upload_mb=upload_mb, bandwidth=bandwidth or DEFAULT_BANDWIDTH, rounds=rounds,
               markdown=markdown, results=results)
    return by_row


def record_run(record: RunRecord, by_row: dict[str, list[UploadCpuSample]], *, upload_mb: float, bandwidth: float,
               rounds: int, markdown: str | None, results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render_table`) and write the record
    (:func:`bench.record.report`) with every round's sample of every row; returns the paths written."""
    figures = {"upload_mb": upload_mb, "file_bytes": FILE_BYTES, "bandwidth": bandwidth,
               "rows": {row: [asdict(s) for s in samples] for row, samples in by_row.items()}}
    table = render_table(by_row, upload_mb=upload_mb, bandwidth=bandwidth)
    return report(record, "Upload path CPU per MB", rounds, table.splitlines(), figures, results_dir=results,
                  markdown=markdown)


def render_table(by_row: dict[str, list[UploadCpuSample]], *, upload_mb: float, bandwidth: float) -> str:
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}" if values else "-"

    lines = [f"Upload path CPU per MB ({upload_mb:g} MB per row and round, files of {FILE_BYTES // 1024} KiB, "
             f"throttled link at {bandwidth:g} MB/s; medians over rounds)", "",
             "| step | client CPU ms/MB (calling thread) | relay CPU ms/MB (other threads) | "
             "endpoint CPU ms/MB (--server-pid) | MB/s | rounds |",
             "|---|---|---|---|---|---|"]
    for row, samples in by_row.items():
        server = [s.server_ms_per_mb for s in samples if s.server_ms_per_mb is not None]
        lines.append(f"| {row} | {med([s.client_ms_per_mb for s in samples])} | "
                     f"{med([s.relay_ms_per_mb for s in samples])} | {med(server) if server else '-'} | "
                     f"{med([s.mb_per_s for s in samples])} | {len(samples)} |")
    return "\n".join(lines)
