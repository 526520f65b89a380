"""``python -m bench --scenario upload-cpu`` (bench/upload_cpu.py) against the test's S3 endpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.storage import open_store

from bench.run import main
from bench.upload_cpu import ROWS
from tests.support.s3_server import S3Endpoint


@pytest.mark.s3
def test_every_step_is_measured_and_the_store_is_left_empty(s3_store_uri: str, s3_endpoint: S3Endpoint,
                                                            tmp_path: Path) -> None:
    table = tmp_path / "upload-cpu.md"
    args = ["--scenario", "upload-cpu", "--store", s3_store_uri, "--upload-mb", "3", "--rounds", "2",
            "--store-bandwidth", "50", "--markdown", str(table)]
    if s3_endpoint.pid is not None:
        args += ["--server-pid", str(s3_endpoint.pid)]
    assert main(args) == 0
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in table.read_text().splitlines() if line.startswith("| ") and "---" not in line}
    assert set(ROWS) <= set(rows)
    for step in ROWS:
        client, relay, server, mb_per_s, rounds = rows[step]
        assert rounds == "2"
        assert float(client) > 0 and float(relay) >= 0 and float(mb_per_s) > 0
        if step != "hash" and s3_endpoint.pid is not None:
            assert float(server) > 0  # the endpoint did receive the uploads
    # Through the link at 50 MB/s: never faster than the link (less its 64 KiB burst).
    assert float(rows[ROWS[3]][3]) <= 50 * 1.1, rows[ROWS[3]]
    assert open_store(s3_store_uri).list("") == []  # every step's objects were deleted


def test_bad_arguments_are_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "upload-cpu"]) == 2
    assert "--store s3://" in capsys.readouterr().err
    assert main(["--scenario", "upload-cpu", "--store", "s3://b/p", "--upload-mb", "0"]) == 2
    assert "--upload-mb" in capsys.readouterr().err
    assert main(["--scenario", "upload-cpu", "--store", "s3://b/p", "--server-pid", "999999999"]) == 2
    assert "--server-pid 999999999" in capsys.readouterr().err
