"""Make the single-stage checkpoint store that tests/recovery/test_previous_release_store.py
restores: run ``spec.yaml`` with the code of an earlier release for two checkpoints, then keep
its checkpoint store and committed output (work dirs and Spark's local checkpoint are left out,
as on a fresh machine).

Run it from a checkout of the earlier release (the fixture in git was made from 57293b5, the
last commit before the one pipeline model)::

    git worktree add /tmp/prev 57293b5 && cd /tmp/prev && make install
    .venv/bin/python /path/to/barrierflow/tests/recovery/previous_release/make_store.py \\
        /path/to/barrierflow/tests/recovery/previous_release/store

It prints the checkpoints it completed. Needs only local Spark (no broker, no S3).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def spec_for(root: Path) -> dict:
    """The fixture's spec with its storage under ``root`` (``chk/``, ``out/``, ``work/``)."""
    data = yaml.safe_load((HERE / "spec.yaml").read_text())
    data["work_dir"] = str(root / "work")
    data["checkpoint"]["storage"] = f"file://{root / 'chk'}"
    data["sinks"][0]["path"] = f"file://{root / 'out'}"
    return data


def main(target: str) -> None:
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.spec import parse_spec

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        result = StreamingJob(parse_spec(spec_for(root))).run(checkpoints=2, duration=300)
        print("completed checkpoints:", [m.checkpoint_id for m in result.completed])
        out = Path(target)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        shutil.copytree(root / "chk", out / "chk")
        shutil.copytree(root / "out", out / "out")


if __name__ == "__main__":
    main(sys.argv[1])
