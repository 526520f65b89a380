"""Create Kafka topics that do not exist yet: ``python -m large_payments.topics BOOTSTRAP TOPIC...``.

The Kafka sink never creates topics: its output topic and its commit-marker topic
(``commit_marker_topic``, default ``__barrierflow_commits``) must exist before the run.
"""

from __future__ import annotations

import argparse
import sys

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("topics", nargs="+")
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    try:
        for topic in args.topics:
            try:
                admin.create_topics([NewTopic(topic, num_partitions=args.partitions, replication_factor=1)])
                sys.stdout.write(f"created {topic}\n")
            except TopicAlreadyExistsError:
                sys.stdout.write(f"{topic} exists\n")
    finally:
        admin.close()


if __name__ == "__main__":
    main()
