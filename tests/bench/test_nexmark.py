"""The Nexmark side by side (bench/nexmark/): the generator is deterministic and keeps the
benchmark's proportions and distributions; each barrierflow query commits, through Kafka, Spark's
connector and 1 s checkpoints into Parquet, exactly what a plain-Python computation of the query
over the same events gives, and plain Spark running the same transformation (the third engine)
gives the same rows; the Flink SQL texts of the same queries plan on Flink (when the Flink
virtual environment is installed); the scenario's options are checked before anything starts."""

from __future__ import annotations

import json
import math
import subprocess
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from barrierflow.errors import UserInputError
from barrierflow.spec import parse_spec

from bench.nexmark import generator as g
from bench.nexmark.queries import QUERIES, pipeline_spec
from bench.nexmark.scenario import Figures, render, run_nexmark_benchmark, run_plain_spark


def test_the_events_are_a_function_of_the_seed() -> None:
    first = list(g.events(3000))
    assert first == list(g.events(3000))
    assert list(g.events(1000)) == first[:1000]
    assert first != list(g.events(3000, g.GeneratorConfig(seed=g.DEFAULT_SEED + 1)))
    # a range of whole blocks is drawn on its own, the same events
    later = list(g.events(g.BLOCK + 300, start=g.BLOCK))
    assert later == list(g.events(g.BLOCK + 300))[g.BLOCK:]


def test_the_events_keep_the_benchmarks_proportions_and_distributions() -> None:
    config = g.GeneratorConfig(rate=1000.0)
    events = list(g.events(50_000, config))
    kinds = Counter(e["event_type"] for e in events)
    assert kinds == {g.PERSON: 1000, g.AUCTION: 3000, g.BID: 46_000}
    assert [e["event_type"] for e in events[:50]] == [0, 1, 1, 1] + [2] * 46
    persons = [e for e in events if e["event_type"] == g.PERSON]
    auctions = [e for e in events if e["event_type"] == g.AUCTION]
    bids = [e for e in events if e["event_type"] == g.BID]
    assert [p["id"] for p in persons] == list(range(1000, 2000))
    assert [a["id"] for a in auctions] == list(range(1000, 4000))
    base = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert all(e["date_time"] == base + n for n, e in enumerate(events))  # 1000 events/s: 1 ms apart
    # every id refers to a person or auction created by then or a few ahead (the benchmark's lead)
    newest_person = newest_auction = 0
    hot_auction = hot_bidder = hot_seller = 0
    for n, e in enumerate(events):
        newest_person, newest_auction = g.last_person(n) + 1000, max(g.last_auction(n), 0) + 1000
        if e["event_type"] == g.BID:
            assert newest_auction - 100 <= e["auction"] <= newest_auction + g.ID_LEAD
            assert e["bidder"] <= newest_person + g.ID_LEAD
            hot_auction += e["auction"] == (newest_auction - 1000) // 100 * 100 + 1000
            hot_bidder += e["bidder"] == (newest_person - 1000) // 100 * 100 + 1001
        elif e["event_type"] == g.AUCTION:
            assert e["reserve"] > e["initial_bid"] and e["expires"] > e["date_time"] and 10 <= e["category"] < 15
            hot_seller += e["seller"] == (newest_person - 1000) // 100 * 100 + 1000
    # hot with probability 1 - 1/ratio (a cold draw may hit the hot id too)
    assert 0.5 <= hot_auction / len(bids) < 0.56
    assert 0.75 <= hot_bidder / len(bids) < 0.8 and 0.72 <= hot_seller / len(auctions) < 0.8  # 3,000 draws
    prices = sorted(b["price"] for b in bids)
    assert 100 <= prices[0] and prices[-1] <= 100_000_000
    assert 60_000 < prices[len(prices) // 2] < 160_000  # log-uniform over 1e2..1e8 cents: median 1e5
    values = [g.encode(e) for e in events]
    assert [json.loads(v) for v in values] == events
    non_ascii = sum(any(b >= 0x80 for b in v) for v in values) / len(values)
    assert 0.25 < non_ascii < 0.5, non_ascii
    sizes = Counter()
    for e, v in zip(events, values, strict=True):
        sizes[e["event_type"]] += len(v)
    # the values average about 200 and 500 bytes (extra pads them); the JSON keys add 100-150
    assert 250 < sizes[g.PERSON] / 1000 < 420 and 500 < sizes[g.AUCTION] / 3000 < 800


# -- the queries, computed in plain Python ------------------------------------------------------------

WINDOW_MS, SLIDE_MS, DELAY_MS = 10_000, 2_000, 4_000


def _expected(name: str, events: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    bids = [e for e in events if e["event_type"] == 2]
    watermark = max(e["date_time"] for e in events) - DELAY_MS
    if name == "q0":
        return Counter((b["auction"], b["bidder"], b["price"], b["date_time"], b["extra"]) for b in bids)
    if name == "q1":
        return Counter((b["auction"], b["bidder"], Decimal("0.908") * b["price"], b["date_time"], b["extra"])
                       for b in bids)
    if name == "q2":
        return Counter((b["auction"], b["price"]) for b in bids if b["auction"] % 123 == 0)
    if name == "q5":
        counts: Counter[tuple[int, int]] = Counter()
        for b in bids:
            start = b["date_time"] // SLIDE_MS * SLIDE_MS
            while start > b["date_time"] - WINDOW_MS:
                counts[(start, b["auction"])] += 1
                start -= SLIDE_MS
        top: dict[int, int] = defaultdict(int)
        for (start, _), num in counts.items():
            top[start] = max(top[start], num)
        return Counter((start, start + WINDOW_MS, auction, num) for (start, auction), num in counts.items()
                       if num == top[start] and start + WINDOW_MS <= watermark)
    if name == "q7":
        best: dict[int, tuple[Any, ...]] = {}
        for b in bids:
            start = b["date_time"] // WINDOW_MS * WINDOW_MS
            key = (b["price"], b["auction"], b["bidder"], b["date_time"], b["extra"])
            best[start] = max(best.get(start, key), key)
        return Counter((start, start + WINDOW_MS, a, p, bidder, t, x) for start, (p, a, bidder, t, x) in best.items()
                       if start + WINDOW_MS <= watermark)
    assert name == "q8"
    joined = {(e["date_time"] // WINDOW_MS * WINDOW_MS, e["id"]): e["name"] for e in events if e["event_type"] == 0}
    sold = {(e["date_time"] // WINDOW_MS * WINDOW_MS, e["seller"]) for e in events if e["event_type"] == 1}
    return Counter((pid, name_, start) for (start, pid), name_ in joined.items()
                   if (start, pid) in sold and start + WINDOW_MS <= watermark)


def _ms(value: datetime) -> int:
    value = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return round(value.timestamp() * 1000)


def _committed(name: str, rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    if name in ("q0", "q1"):
        return Counter((r["auction"], r["bidder"], r["price"], _ms(r["date_time"]), r["extra"]) for r in rows)
    if name == "q2":
        return Counter((r["auction"], r["price"]) for r in rows)
    if name == "q5":
        return Counter((_ms(r["window_start"]), _ms(r["window_end"]), r["auction"], r["num"]) for r in rows)
    if name == "q7":
        return Counter((_ms(r["window_start"]), _ms(r["window_end"]), r["auction"], r["price"], r["bidder"],
                        _ms(r["date_time"]), r["extra"]) for r in rows)
    return Counter((r["id"], r["name"], _ms(r["window_start"])) for r in rows)


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow(150)
@pytest.mark.timeout(1200)
def test_each_query_commits_what_plain_python_computes(spark: Any, kafka_endpoint: Any, tmp_path: Path,
                                                       figures: dict[str, object]) -> None:
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.sinks.parquet import read_committed
    from kafka import KafkaProducer

    from tests.support.kafka_broker import create_topic

    # 100 events/s of event time: 3,000 events span 30 s (three 10 s windows, persons and their
    # auctions in them); then a person, an auction and a bid a minute later, a batch's worth of them:
    # they move the watermark past every window of the rest (Spark pushes a query's choice of kind
    # below the watermark, so each kind must move it) and the windows they close are written in a
    # batch that reads records
    events = list(g.events(3000, g.GeneratorConfig(rate=100.0)))
    later = events[-1]["date_time"] + 60_000
    closing = [{"event_type": 0, "id": 5000, "name": "Late Person", "email_address": "x@y.com",
                "credit_card": "0000 0000 0000 0000", "city": "Bend", "state": "OR", "date_time": later, "extra": ""},
               {"event_type": 1, "id": 5000, "item_name": "x", "description": "x", "initial_bid": 1, "reserve": 2,
                "date_time": later, "expires": later + 1, "seller": 5000, "category": 10, "extra": ""},
               {"event_type": 2, "auction": 1000, "bidder": 1001, "price": 1, "channel": "Apple",
                "url": "https://www.nexmark.com/x", "date_time": later, "extra": ""}]
    events.extend(closing * 234)
    topic = f"nexmark-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 1)
    producer = KafkaProducer(bootstrap_servers=kafka_endpoint.bootstrap_servers, acks="all")
    try:
        for e in events:
            producer.send(topic, value=g.encode(e), partition=0)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    sizes = {}
    for name, query in QUERIES.items():
        work = tmp_path / name
        spec = pipeline_spec(query, servers=kafka_endpoint.bootstrap_servers, topic=topic, work=work, batch=700,
                             sink={"name": "out", "type": "parquet", "path": f"file://{work / 'out'}"})
        result = StreamingJob(parse_spec(spec), spark=spark).run(until_exhausted=True, duration=300)
        assert result.completed and result.records == len(events), (name, result.records)
        table = read_committed(f"file://{work / 'out'}")
        got = _committed(name, table.to_pylist() if table is not None else [])
        want = _expected(name, events)
        assert want, f"{name}: the events give no rows; the test would show nothing"
        assert got == want, (name, list((got - want).items())[:3], list((want - got).items())[:3])
        sizes[name] = sum(want.values())
    # plain Spark (the benchmark's third engine) runs the same transformation on the same input
    # frame: the same rows, for a stateless query and a windowed one
    for name in ("q2", "q8"):
        out = tmp_path / f"plain-{name}"
        _, read, _ = run_plain_spark(spark, QUERIES[name], servers=kafka_endpoint.bootstrap_servers, topic=topic,
                                     partitions=1, seconds=300, batch=700, events=len(events), output=out)
        assert read == len(events), (name, read)
        got = _committed(name, pq.read_table(out).to_pylist())
        assert got == _expected(name, events), name
    figures.update({f"{name} rows": rows for name, rows in sizes.items()})


FLINK_PYTHON = Path(__file__).resolve().parents[2] / ".venv-flink" / "bin" / "python"


@pytest.mark.skipif(not FLINK_PYTHON.is_file(), reason="no Flink virtual environment (make flink)")
@pytest.mark.slow(25)
@pytest.mark.timeout(600)
def test_the_flink_sql_texts_of_every_query_plan_on_flink() -> None:
    from bench.kafka_source import flink_jars
    from bench.nexmark.scenario import FLINK_JOB

    fields = {name: q.fields for name, q in QUERIES.items()}
    done = subprocess.run([str(FLINK_PYTHON), str(FLINK_JOB), "--explain", "--fields", json.dumps(fields),
                           "--jars", ",".join(flink_jars())], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    plans = json.loads(done.stdout.splitlines()[-1])
    assert set(plans) == set(QUERIES)
    # each plan reads only the query's fields from the one topic, and windows where the query does
    for name, plan in plans.items():
        scanned = plan.split("TableSourceScan(", 1)[1].split("fields=[", 1)[1].split("]", 1)[0]
        assert set(scanned.split(", ")) == set(QUERIES[name].fields), (name, scanned)
        assert ("Window" in plan or "Interval" in plan or "Join" in plan) == QUERIES[name].windowed, name


def test_the_scenario_refuses_unknown_queries_and_engines_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="--queries takes q0, q1, q2, q5, q7, q8"):
        run_nexmark_benchmark(queries=["q3"], results=tmp_path)
    with pytest.raises(UserInputError, match="--engines takes barrierflow, flink"):
        run_nexmark_benchmark(engines=["storm"], results=tmp_path)
    with pytest.raises(UserInputError, match="--events >= 50 x partitions"):
        run_nexmark_benchmark(events=10, results=tmp_path)
    assert not list(tmp_path.iterdir())


def test_the_table_gives_medians_spread_per_core_ratios_and_checkpoint_percentiles() -> None:
    bf = Figures(rates=[300.0, 100.0, 200.0], checkpoint_ms=[float(x) for x in range(1, 101)])
    fl = Figures(rates=[100.0, 100.0, math.nan], failures=["round 3: UserInputError"])
    plain = Figures(rates=[150.0, 100.0, 400.0])
    lines = render({"q5": {"barrierflow": bf, "flink": fl, "spark": plain}}, 3)
    assert lines[2] == ("| q5 | barrierflow | 200 | 100-300 | 100 | 50 / 99 | 2.00; 3.00, 1.00, n/a "
                        "| 1.33; 2.00, 1.00, 0.50 |")
    assert lines[3] == "| q5 | flink (1 failed) | 100 | 100-100 | 50 | nan / nan |  |  |"
    assert lines[4] == "| q5 | spark | 150 | 100-400 | 75 | nan / nan |  |  |"
    alone = render({"q0": {"barrierflow": bf}}, 3)  # an engine that did not run leaves its ratio empty
    assert alone[2].endswith("| 50 / 99 |  |  |")
