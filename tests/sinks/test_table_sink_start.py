"""A table sink checks the query's output schema before the query starts (shared SparkSession):
a Delta table whose column has another type stops the run with a UserInputError naming the
column (exit code 2 in the CLI), before anything was written ahead."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from barrierflow.errors import UserInputError
from barrierflow.runtime.job import StreamingJob
from barrierflow.spec import parse_spec
from deltalake import write_deltalake

from tests.pipeline_specs import spec_dict

pytestmark = pytest.mark.spark


def test_a_table_that_cannot_take_the_output_stops_the_run_naming_the_column(spark, tmp_path: Path) -> None:
    table = tmp_path / "totals"
    write_deltalake(str(table), pa.table({"key": pa.array([1], pa.int64()), "count": pa.array(["one"]),
                                          "value_sum": pa.array([1], pa.int64())}))
    data = spec_dict(tmp_path, name="lakestart")
    data["sinks"] = [{"name": "totals", "type": "delta", "path": f"file://{table}"}]
    job = StreamingJob(parse_spec(data), spark=spark)

    with pytest.raises(UserInputError, match="output column 'count' is long but the table's column is string"):
        job.run(checkpoints=1, duration=60)
    assert not (table / "_barrierflow_staging").exists()  # refused before any micro-batch was written ahead
