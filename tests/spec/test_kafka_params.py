"""A Kafka source's options as Spark's workers read them (barrierflow.spec.kafka_params): the same
values as the spec model, the same client settings, and no spec models imported in the workers."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from barrierflow.errors import SourceError
from barrierflow.kafka_io.security import describe, kafka_python_config, librdkafka_config
from barrierflow.sources.kafka import KafkaStreamReader, schema_for
from barrierflow.spec.kafka_client import KafkaClientSpec
from barrierflow.spec.kafka_params import KafkaClientParams, KafkaSourceParams
from barrierflow.spec.models import KafkaSourceSpec

#: Every field away from its default, so a field read from the wrong key cannot pass.
CLIENT = KafkaClientSpec(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username="env:KP_USER",
                         password="env:KP_PASSWORD", ssl_cafile="/etc/ca-ü.pem", ssl_certfile="/etc/c.pem",
                         ssl_keyfile="/etc/k.pem", ssl_key_password="env:KP_KEY",
                         options={"client.rack": "rack-1", "metadata.max.age.ms": 5000,
                                  "socket.keepalive.enable": True})
SPEC = KafkaSourceSpec(
    type="kafka", name="orders-ü", reader="python", bootstrap_servers="127.0.0.1:1,127.0.0.1:2",
    topics=["a", "b"], starting_offsets={"a": {"0": 5}}, max_records_per_batch=77, format="json",
    json_fields={"k": "string", "v": "long", "at": "timestamp"}, topic_fields={"b": ["k", "v"]},
    malformed="dead_letter", poll_timeout=3.5, unavailable_timeout=9.0, client=CLIENT)


def test_params_hold_every_field_of_the_spec_and_its_client_with_its_value() -> None:
    params = KafkaSourceParams.from_json(SPEC.model_dump_json())
    names = {f.name for f in dataclasses.fields(KafkaSourceParams)}
    # A new Kafka source field must be decided here: read by the workers (a field of the params) or not.
    assert names == set(KafkaSourceSpec.model_fields) - {"type"}
    for name in names - {"client"}:
        assert getattr(params, name) == getattr(SPEC, name), name
    assert params.client is not None
    assert {f.name for f in dataclasses.fields(KafkaClientParams)} == set(KafkaClientSpec.model_fields)
    for name in KafkaClientSpec.model_fields:
        assert getattr(params.client, name) == getattr(CLIENT, name), name
    assert (params.dead_letters_malformed, params.kind, params.fields_of("a"), params.fields_of("b")) == \
        (SPEC.dead_letters_malformed, SPEC.kind, SPEC.fields_of("a"), SPEC.fields_of("b"))
    assert (params.client.is_plaintext, params.client.effective_username) == \
        (CLIENT.is_plaintext, CLIENT.effective_username)
    plain = KafkaSourceParams.from_json(KafkaSourceSpec(type="kafka", bootstrap_servers="h:1", topics=["t"],
                                                        reader="spark").model_dump_json())
    assert plain.client is None and plain.kind == "spark_kafka" and not plain.dead_letters_malformed


def test_params_and_spec_give_the_same_client_settings_and_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("KP_USER", "alice"), ("KP_PASSWORD", "s3cret-ü"), ("KP_KEY", "k3y")):
        monkeypatch.setenv(name, value)
    params = KafkaSourceParams.from_json(SPEC.model_dump_json())
    assert params.client is not None
    assert hash(params.client) == hash(KafkaClientParams.from_dict(json.loads(CLIENT.model_dump_json())))
    assert describe(params.client) == describe(CLIENT)
    # the settings that do not read the TLS files (which do not exist here) are the same for both
    tls_free = {"security_protocol": "SASL_PLAINTEXT", "ssl_cafile": None, "ssl_certfile": None,
                "ssl_keyfile": None, "ssl_key_password": None, "options": {"client.rack": "rack-1"}}
    model = CLIENT.model_copy(update=tls_free)
    plain = dataclasses.replace(params.client, **tls_free)
    assert librdkafka_config(plain) == librdkafka_config(model)
    assert kafka_python_config(plain) == kafka_python_config(model)
    assert schema_for(params) == schema_for(SPEC)


def test_options_without_a_field_name_it_and_the_fix() -> None:
    data = json.loads(SPEC.model_dump_json())
    del data["poll_timeout"]
    with pytest.raises(SourceError, match=r"lack 'poll_timeout'.*install one version on both"):
        KafkaSourceParams.from_json(json.dumps(data))


def test_the_reader_holds_params_and_survives_pickling(tmp_path: Path) -> None:
    import pickle

    reader = KafkaStreamReader({"spec": SPEC.model_dump_json(), "control_dir": str(tmp_path)})
    assert isinstance(reader.spec, KafkaSourceParams)
    assert pickle.loads(pickle.dumps(reader)).spec == reader.spec


@pytest.mark.parametrize("module", ["barrierflow.sources.kafka", "barrierflow.sources.channel",
                                    "barrierflow.sources.spark_kafka", "barrierflow.sinks.channel"])
def test_a_worker_that_reads_or_writes_kafka_imports_no_spec_model(module: str) -> None:
    """What a Spark Python worker imports to read a Kafka source or a channel (or dead-letter the
    connector's malformed records), or to write a channel: neither pydantic nor the spec models."""
    probe = (f"import sys, {module}; "
             "print(sorted(m for m in sys.modules if m == 'pydantic' or m.startswith('barrierflow.spec.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out.strip().replace("'", '"')))
    assert "pydantic" not in loaded
    assert loaded <= {"barrierflow.spec.checkpoint_mode", "barrierflow.spec.client_options",
                      "barrierflow.spec.kafka_params", "barrierflow.spec.generator_params"}, loaded
