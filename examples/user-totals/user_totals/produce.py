"""Produce sample payments: ``python -m user_totals.produce BOOTSTRAP TOPIC [--records N]``.

Record i (JSON, keyed by its user): user ``u<i mod 3>``, amount ``(i mod 7 + 1) * 0.25``,
event time 2026-01-01T00:00:00Z plus 1.5 s per record. Creates the topic (2 partitions) when
it does not exist.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

START = datetime(2026, 1, 1, tzinfo=UTC)


def payment(i: int) -> dict[str, object]:
    return {"user_id": f"u{i % 3}", "amount": (i % 7 + 1) * 0.25,
            "event_time": (START + timedelta(seconds=1.5 * i)).isoformat()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("--records", type=int, default=200)
    args = parser.parse_args()
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    try:
        admin.create_topics([NewTopic(args.topic, num_partitions=2, replication_factor=1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks="all")
    for i in range(args.records):
        record = payment(i)
        producer.send(args.topic, key=str(record["user_id"]).encode(), value=json.dumps(record).encode())
    producer.flush()
    producer.close()
    sys.stdout.write(f"produced {args.records} payments to {args.topic}\n")


if __name__ == "__main__":
    main()
