"""What the docs say a user gets is what the code gives: the fields of a dead letter
(docs/writing-pipelines.md, "Dead letters") are those the Kafka decoder writes, with
``partition`` as ``"topic:N"`` and ``payload_encoding`` only beside a base64 payload; the
Kafka source's defaults in docs/pipeline-spec.md are the spec model's. No Spark, no broker: the
decoder runs on records built here."""

from __future__ import annotations

import re
from pathlib import Path

from barrierflow.kafka_io.consumer import Record
from barrierflow.kafka_io.decoding import RecordDecoder
from barrierflow.spec.models import KafkaSourceSpec

ROOT = Path(__file__).resolve().parents[2]


def _documented_dead_letter_fields() -> set[str]:
    text = (ROOT / "docs" / "writing-pipelines.md").read_text(encoding="utf-8")
    section = text[text.index("## Dead letters"):]
    section = section[: section.index("\n## ", 1)]
    return set(re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE))


def test_a_dead_letter_has_the_documented_fields_and_forms() -> None:
    spec = KafkaSourceSpec(name="payments", type="kafka", bootstrap_servers="127.0.0.1:9", topics=["pay"],
                           format="json", json_fields={"amount": "double"})
    decoder = RecordDecoder(spec)
    values = [b'{"amount": 1.5}', b'{"amount": ', b"\xff\xfe not utf-8", None, b'{"amount": "x"}']
    records = [Record("pay", 3, offset, None, None, value, ()) for offset, value in enumerate(values)]
    rows = sum(batch.num_rows for batch in decoder.batches(records))
    letters = {letter["offset"]: letter for letter in decoder.dead_letters}

    assert rows == 1 and sorted(letters) == [1, 2, 3, 4]
    assert all(letter["partition"] == "pay:3" and letter["source"] == "payments" for letter in letters.values())
    assert letters[1]["payload"] == '{"amount": ' and "payload_encoding" not in letters[1]
    assert letters[2]["payload_encoding"] == "base64" and letters[2]["payload"] == "//4gbm90IHV0Zi04"
    assert letters[3]["payload"] is None and "payload_encoding" not in letters[3]
    documented = _documented_dead_letter_fields()
    written = set().union(*letters.values())
    assert written == documented, f"written {sorted(written)}, documented {sorted(documented)}"


def test_the_kafka_sources_documented_defaults_are_the_models() -> None:
    text = " ".join((ROOT / "docs" / "pipeline-spec.md").read_text(encoding="utf-8").split())
    bullet = text[text.index("- `type: kafka` —"):]
    fields = KafkaSourceSpec.model_fields
    batch = fields["max_records_per_batch"].default
    assert f"`max_records_per_batch` (records per partition and batch, default {batch})" in bullet
    assert f"`starting_offsets` (`{fields['starting_offsets'].default}`, the default," in bullet
    assert f"`format` (`{fields['format'].default}`, the default:" in bullet
    assert f"`poll_timeout` ({fields['poll_timeout'].default:g} s:" in bullet
    assert f"`unavailable_timeout` ({fields['unavailable_timeout'].default:g} s:" in bullet
