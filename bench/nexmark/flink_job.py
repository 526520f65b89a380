"""The Nexmark queries on Flink SQL, for ``python -m bench --scenario nexmark``.

A stand-alone script run by the Python of the Flink virtual environment (``make flink``); it
imports nothing of barrierflow (the scenario runs it, and the tests read its query texts). One
query per run over the scenario's topic, read with Flink's Kafka connector (the ``flink-kafka``
JVM artifact set, ``--jars``) from the earliest offsets, JSON, the query's fields only (the list
barrierflow's pipeline decodes, ``--fields``); event time ``dateTime`` from the events'
``date_time`` (epoch milliseconds) with the watermark 4 s behind it, declared on the source
table as Flink's nexmark declares it; the views ``person``, ``auction`` and ``bid`` pick a kind by
``event_type``. The query texts are the nexmark project's (q0, q1, q2, q5, q7, q8), each into a
blackhole sink; checkpoints every ``--checkpoint-interval`` seconds, exactly-once (Flink's
default mode), heap state, Flink's local MiniCluster with ``--parallelism`` slots.

As :mod:`bench.flink_sql_job`'s Kafka mode: a warm-up run over ``--warmup-rows`` records without
checkpoints, a short run over ``--first-rows`` (standing in for the first batch, so that the
figure leaves the job's start out as barrierflow's does, bench/rates.py), then the measured run
over ``--rows`` records (each run bounded by offsets: ``rows // partitions`` per partition; the
topic's records are spread ``i % partitions`` without transactions, so offsets count records).
``--explain`` only plans the queries (Flink's EXPLAIN, nothing runs) and prints their plans.
Otherwise it prints one JSON line: ``{"query", "rows", "seconds", "first_rows", "first_seconds",
"checkpoint_ms", "flink_version"}``; ``checkpoint_ms``: the end-to-end duration of every
checkpoint the measured run completed, read from the MiniCluster's REST API while it runs.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

#: barrierflow's json_fields types -> the Flink SQL type of the source column.
FLINK_TYPES = {"long": "BIGINT", "string": "STRING", "double": "DOUBLE", "boolean": "BOOLEAN",
               "timestamp": "BIGINT"}
KINDS = {"person": 0, "auction": 1, "bid": 2}
VIEW_COLUMNS = {"person": ("id", "name", "email_address", "credit_card", "city", "state", "extra"),
                "auction": ("id", "item_name", "description", "initial_bid", "reserve", "expires", "seller",
                            "category", "extra"),
                "bid": ("auction", "bidder", "price", "channel", "url", "extra")}

#: The nexmark project's query texts (over the views person, auction, bid; sink ``nexmark_sink``),
#: ``dateTime`` back-quoted (``DATETIME`` is a function keyword of Flink 2's parser).
QUERIES = {
    "q0": "INSERT INTO nexmark_sink SELECT auction, bidder, price, `dateTime`, extra FROM bid",
    "q1": "INSERT INTO nexmark_sink SELECT auction, bidder, 0.908 * price AS price, `dateTime`, extra FROM bid",
    "q2": "INSERT INTO nexmark_sink SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
    "q5": """INSERT INTO nexmark_sink
SELECT AuctionBids.auction, AuctionBids.num, AuctionBids.starttime, AuctionBids.endtime
FROM (
  SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
  SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
  FROM (
    SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end
  ) AS CountBids
  GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn""",
    "q7": """INSERT INTO nexmark_sink
SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
FROM bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end AS `dateTime`
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.`dateTime` BETWEEN B1.`dateTime` - INTERVAL '10' SECOND AND B1.`dateTime`""",
    "q8": """INSERT INTO nexmark_sink
SELECT P.id, P.name, P.starttime
FROM (
  SELECT id, name, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY id, name, window_start, window_end
) P
JOIN (
  SELECT seller, window_start AS starttime, window_end AS endtime
  FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
  GROUP BY seller, window_start, window_end
) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime""",
}


def specific_offsets(rows: int, partitions: int) -> str:
    """``scan.bounded.specific-offsets`` that end each partition after ``rows // partitions``."""
    return ";".join(f"partition:{p},offset:{rows // partitions}" for p in range(partitions))


def statements(query: str, fields: dict[str, str], *, bootstrap: str, topic: str, bound: str,
               suffix: str) -> list[str]:
    """The source table, the three views, the query as the view ``nexmark_result``, and the INSERT of
    ``nexmark_result`` into ``nexmark_sink`` (a blackhole of ``nexmark_result``'s columns, :func:`_create_sink`).
    ``fields``: the query's event fields (name -> barrierflow's type); ``bound``:
    ``scan.bounded.specific-offsets``."""
    columns = ", ".join(f"`{name}` {FLINK_TYPES[kind]}" for name, kind in fields.items())
    ddl = [f"CREATE TEMPORARY TABLE events ({columns}, "
           "`dateTime` AS TO_TIMESTAMP_LTZ(`date_time`, 3), "
           "WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND) WITH ("
           f"'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}', "
           f"'properties.group.id' = 'nexmark-{suffix}', 'properties.isolation.level' = 'read_committed', "
           "'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'specific-offsets', "
           f"'scan.bounded.specific-offsets' = '{bound}', 'format' = 'json')"]
    for view, kind in KINDS.items():
        picked = [c for c in VIEW_COLUMNS[view] if c in fields]
        ddl.append(f"CREATE TEMPORARY VIEW {view} AS SELECT {', '.join([*picked, '`dateTime`'])} FROM events "
                   f"WHERE event_type = {kind}")
    select = QUERIES[query].removeprefix("INSERT INTO nexmark_sink").strip()
    ddl.append(f"CREATE TEMPORARY VIEW nexmark_result AS {select}")
    return [*ddl, "INSERT INTO nexmark_sink SELECT * FROM nexmark_result"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CheckpointWatch(threading.Thread):
    """Polls the MiniCluster's REST API for the running job's completed checkpoints (id ->
    end-to-end duration, ms) until :meth:`stop`."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.durations, self._stop_event = port, {}, threading.Event()

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as response:
            return json.loads(response.read())

    def run(self) -> None:
        while not self._stop_event.wait(0.5):
            try:
                for job in self._get("/jobs")["jobs"]:
                    for entry in self._get(f"/jobs/{job['id']}/checkpoints").get("history", []):
                        if entry.get("status") == "COMPLETED":
                            self.durations[int(entry["id"])] = int(entry["end_to_end_duration"])
            except (OSError, ValueError, KeyError):
                continue

    def stop(self) -> list[int]:
        self._stop_event.set()
        self.join(timeout=5)
        return [self.durations[k] for k in sorted(self.durations)]


def explain(queries: dict[str, dict[str, str]], jars: list[str]) -> dict[str, str]:
    """Each query's optimized plan (Flink's EXPLAIN; nothing runs, no broker is reached), by name:
    shows that the texts parse and plan. ``queries``: name -> the query's event fields."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    plans = {}
    for query, fields in queries.items():
        env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
        env.get_config().set("pipeline.jars", ";".join(f"file://{jar}" for jar in jars))
        *ddl, insert = statements(query, fields, bootstrap="127.0.0.1:9", topic="explain", suffix="explain",
                                  bound="partition:0,offset:1")
        for statement in ddl:
            env.execute_sql(statement)
        _create_sink(env)
        plans[query] = env.explain_sql(insert)
    return plans


def _create_sink(env: Any) -> None:
    """The blackhole sink ``nexmark_sink`` with ``nexmark_result``'s columns."""
    schema = env.from_path("nexmark_result")._j_table.getResolvedSchema()
    columns = ", ".join(f"`{c.getName()}` {c.getDataType().getLogicalType().asSerializableString()}"
                        for c in schema.getColumns())
    env.execute_sql(f"CREATE TEMPORARY TABLE nexmark_sink ({columns}) WITH ('connector' = 'blackhole')")


def run_query(query: str, fields: dict[str, str], *, bootstrap: str, topic: str, partitions: int, rows: int,
              interval: float, parallelism: int, jars: list[str], suffix: str) -> tuple[float, list[int]]:
    """One bounded run: seconds from submitting the job to its end, and its checkpoints' durations."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    port = _free_port()
    for key, value in {"parallelism.default": str(parallelism), "state.backend.type": "hashmap",
                       "pipeline.jars": ";".join(f"file://{jar}" for jar in jars), "rest.port": str(port),
                       "rest.address": "127.0.0.1", "table.exec.source.idle-timeout": "0 ms"}.items():
        conf.set(key, value)
    directory = tempfile.mkdtemp(prefix="flink-nexmark-")
    if interval > 0:
        conf.set("execution.checkpointing.interval", f"{int(interval * 1000)} ms")
        conf.set("execution.checkpointing.mode", "EXACTLY_ONCE")
        conf.set("execution.checkpointing.dir", f"file://{directory}")
    *ddl, insert = statements(query, fields, bootstrap=bootstrap, topic=topic, suffix=suffix,
                              bound=specific_offsets(rows, partitions))
    for statement in ddl:
        env.execute_sql(statement)
    _create_sink(env)
    watch = CheckpointWatch(port)
    watch.start()
    started = time.perf_counter()
    env.execute_sql(insert).wait()
    seconds = time.perf_counter() - started
    return seconds, watch.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--explain", action="store_true", help="only plan the queries of --fields (JSON: query -> "
                        "its fields) and print {query: plan} as one JSON line")
    parser.add_argument("--query", choices=sorted(QUERIES))
    parser.add_argument("--fields", required=True, help="the query's event fields, JSON: name -> type")
    parser.add_argument("--kafka", metavar="HOST:PORT")
    parser.add_argument("--topic")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rows", type=int, default=0, help="records of the measured run")
    parser.add_argument("--first-rows", type=int, help="records of the short run (default --rows / 20)")
    parser.add_argument("--warmup-rows", type=int, default=200_000)
    parser.add_argument("--checkpoint-interval", type=float, default=1.0)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--jars", required=True, help="Flink's Kafka connector's jars, comma separated")
    args = parser.parse_args(argv)
    jars = [j for j in args.jars.split(",") if j]
    if args.explain:
        print(json.dumps(explain(dict(json.loads(args.fields)), jars)))
        return 0
    if not (args.query and args.kafka and args.topic):
        parser.error("a run needs --query, --kafka and --topic (or --explain)")
    if args.partitions < 1 or args.rows < 2 * args.partitions:
        parser.error("--rows must be at least twice --partitions")
    first = args.first_rows if args.first_rows is not None else args.rows // 20
    first = max(1, first // args.partitions) * args.partitions
    if first >= args.rows:
        parser.error("--first-rows must be fewer than --rows")
    import pyflink

    fields = dict(json.loads(args.fields))
    common = {"bootstrap": args.kafka, "topic": args.topic, "partitions": args.partitions,
              "parallelism": args.parallelism, "jars": jars}
    if args.warmup_rows >= args.partitions:
        run_query(args.query, fields, rows=min(args.warmup_rows, args.rows), interval=0.0, suffix="warmup", **common)
    first_seconds, _ = run_query(args.query, fields, rows=first, interval=args.checkpoint_interval, suffix="first",
                                 **common)
    seconds, checkpoints = run_query(args.query, fields, rows=args.rows, interval=args.checkpoint_interval,
                                     suffix="measured", **common)
    rows = args.rows // args.partitions * args.partitions
    print(json.dumps({"query": args.query, "rows": rows, "seconds": round(seconds, 3), "first_rows": first,
                      "first_seconds": round(first_seconds, 3), "checkpoint_ms": checkpoints,
                      "flink_version": getattr(pyflink, "__version__", "?")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
