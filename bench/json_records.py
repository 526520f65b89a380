"""The Kafka benchmarks' JSON records, and how many of them barrierflow's JSON decoder leaves to
``from_json``.

Two kinds of record (``--text``), both with the job's fields ``key`` (``index % keys``),
``value`` (the index) and ``event_time``:

* ``plain``: those three fields only, ASCII (the records the benchmarks always had);
* ``realistic``: besides, a user's ``name``, the ``url`` of a page with a query string, a
  ``comment`` and a ``tags`` array, as a click or review event carries them; about 30 % of the
  records hold non-ASCII text (names and comments in other scripts, emoji: 2, 3 and 4-byte
  UTF-8), one in ten of those written with ``\\uXXXX`` escapes (``ensure_ascii``), as some
  producers do. Deterministic: record ``i`` is the same in every run (a seeded
  :class:`random.Random` drawn in order), so a prefix of the records is the topic's prefix.

:func:`fallback_rate` measures, in a SparkSession, the share of records the decoder does not
read itself (the records ``from_json`` decodes instead), on the first records of the same kind.
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = ["TEXTS", "fallback_rate", "values"]

#: The kinds of record ``--text`` picks.
TEXTS = ("plain", "realistic")
SEED = 20261202
EVENT_TIME = "2026-01-01T00:00:00.001000Z"
ASCII_NAMES = ["Alice Smith", "Bob Jones", "Carol White", "David Brown", "Eve Miller", "Frank Taylor",
               "Grace Lee", "Henry Walker", "Ivy Young", "Jack King", "Kate Wright", "Liam Scott"]
OTHER_NAMES = ["José Álvarez", "Zoë Łukasiewicz", "Søren Kierkegård", "Ümit Çelik", "Jürgen Müller", "François Dupré",
               "Дмитрий Иванов", "Ελένη Παπαδοπούλου", "محمد علي", "山田 太郎", "王小明", "김민준", "Nguyễn Văn An"]
ASCII_COMMENTS = ["great product, fast delivery", "would buy again", "not as described", "ok", "5/5 \"excellent\"",
                  "works as expected\nthanks", "returned it", "price was fair"]
OTHER_COMMENTS = ["très bien, livraison rapide", "sehr gut 👍", "отличный товар", "とても良い商品です", "很好 🎉🎉",
                  "¡me encantó! ❤️", "naïve café résumé", "€ 12,50 — günstig", "👩‍💻 works on my machine 𝄞"]
HOSTS = ["shop.example.com", "www.example.org", "news.example.net", "m.example.com"]
PATHS = ["products", "search", "cart", "article", "category/shoes", "user/settings"]
TAGS = ["new", "sale", "mobile", "returning", "promo", "gift"]


def _plain(i: int, keys: int) -> bytes:
    return json.dumps({"key": i % keys, "value": i, "event_time": EVENT_TIME}, separators=(",", ":")).encode()


def _realistic(i: int, keys: int, rng: random.Random) -> bytes:
    other = rng.random() < 0.3
    name = rng.choice(OTHER_NAMES if other and rng.random() < 0.7 else ASCII_NAMES)
    comment = rng.choice(OTHER_COMMENTS if other and (name in ASCII_NAMES or rng.random() < 0.5) else ASCII_COMMENTS)
    path = rng.choice(PATHS)
    url = f"https://{rng.choice(HOSTS)}/{path}/{rng.randrange(10**6)}?ref=feed&utm_source=mail&page={rng.randrange(50)}"
    record: dict[str, Any] = {"key": i % keys, "value": i, "event_time": EVENT_TIME, "name": name, "url": url,
                              "comment": comment, "tags": rng.sample(TAGS, rng.randrange(4)),
                              "rating": rng.randrange(1, 6)}
    return json.dumps(record, separators=(",", ":"), ensure_ascii=other and rng.random() < 0.1).encode()


def values(count: int, keys: int, text: str = "plain") -> list[bytes]:
    """The first ``count`` records of kind ``text`` (module docstring), ``keys`` distinct keys."""
    if text == "plain":
        return [_plain(i, keys) for i in range(count)]
    if text != "realistic":
        raise ValueError(f"--text takes {' or '.join(TEXTS)}, got {text!r}")
    rng = random.Random(SEED)
    return [_realistic(i, keys, rng) for i in range(count)]


def fallback_rate(spark: Any, sample: list[bytes], fields: dict[str, str]) -> float:
    """The share of ``sample`` barrierflow's JSON decoder leaves to ``from_json`` (decoding
    ``fields``: name -> STRING, BIGINT, DOUBLE or BOOLEAN), counted in Spark: the decoder run
    with a fallback of null, the null records counted."""
    from barrierflow.jvm.helper import FLAT_JSON_CLASS, helper_instance
    from pyspark.sql import functions as F
    from pyspark.sql.column import Column
    from pyspark.sql.types import BinaryType, StructField, StructType

    if not sample:
        return 0.0
    ddl = ", ".join(f"`{name}` {kind}" for name, kind in fields.items())
    schema = spark.createDataFrame([], ddl).schema
    decoder = helper_instance(spark, FLAT_JSON_CLASS)
    alone = Column(decoder.decode(F.col("value")._jc, F.lit(None).cast(schema)._jc, schema.json()))
    frame = spark.createDataFrame([(v,) for v in sample], StructType([StructField("value", BinaryType())]))
    return frame.filter(alone.isNull()).count() / len(sample)
