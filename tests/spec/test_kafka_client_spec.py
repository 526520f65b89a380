"""The ``client`` block of Kafka sources, sinks and channels: SASL and TLS settings, secrets only
as references (a literal password is refused and never repeated), and an allow-list of other
client settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.errors import SpecError
from barrierflow.spec import parse_staged_spec
from barrierflow.spec.client_options import CLIENT_OPTIONS
from barrierflow.spec.kafka_client import KafkaClientSpec
from barrierflow.spec.loader import parse_spec
from barrierflow.spec.models import KafkaSinkSpec, KafkaSourceSpec
from pydantic import ValidationError

SECRET = "hunter2-S3CR3T-literal"
SCRAM = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "username": "barrierflow",
         "password": "env:KAFKA_PASSWORD", "ssl_cafile": "/etc/kafka/ca.pem"}


def _pipeline(tmp_path: Path, client: dict[str, Any] | None = None, **source: Any) -> dict[str, Any]:
    kafka = {"type": "kafka", "bootstrap_servers": "broker-1:9093,broker-2:9093", "topics": ["orders"], **source}
    if client is not None:
        kafka["client"] = client
    return {"name": "secured", "sources": [kafka],
            "transformation": {"function": "barrierflow.transforms.projection:project"},
            "sinks": [{"type": "discard"}], "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"}}


def _problems(tmp_path: Path, client: dict[str, Any] | None = None, **source: Any) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(_pipeline(tmp_path, client, **source))
    return str(caught.value)


def test_sasl_scram_over_tls_with_an_env_password_is_a_valid_source_sink_and_channel(tmp_path: Path) -> None:
    spec = parse_spec(_pipeline(tmp_path, {**SCRAM, "options": {"client.rack": "eu-1a"}}))
    client = spec.source.client
    assert client is not None and client.security_protocol == "SASL_SSL" and client.password == "env:KAFKA_PASSWORD"
    sink = KafkaSinkSpec.model_validate({"type": "kafka", "bootstrap_servers": "b:9093", "topic": "out",
                                         "client": {**SCRAM, "password": "airflow:kafka_prod", "username": None}})
    assert sink.client is not None and sink.client.effective_username == "airflow:kafka_prod"
    staged = parse_staged_spec({
        "name": "staged", "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
        "channels": [{"name": "ab", "bootstrap": "env:KAFKA_BOOTSTRAP", "client": SCRAM}],
        "stages": [{"name": "a", "sources": [{"name": "events", "type": "generator"}],
                    "transformation": {"function": "barrierflow.transforms.projection:project"},
                    "sinks": [{"type": "channel", "channel": "ab"}]},
                   {"name": "b", "sources": [{"type": "channel", "channel": "ab", "json_fields": {"key": "long"}}],
                    "transformation": {"function": "barrierflow.transforms.projection:project"},
                    "sinks": [{"type": "discard"}]}]})
    assert staged.channel("ab").client == KafkaClientSpec.model_validate(SCRAM)


def test_a_literal_password_is_refused_and_never_repeated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    message = _problems(tmp_path, {**SCRAM, "password": SECRET})
    assert "sources.0.kafka.client.password" in message
    assert "env:VARIABLE" in message and "airflow:CONNECTION_ID" in message
    assert SECRET not in message
    # '${VAR}' is expanded when the spec loads: the password would be in the spec, so it is refused too.
    monkeypatch.setenv("KAFKA_PASSWORD", SECRET)
    message = _problems(tmp_path, {**SCRAM, "password": "${KAFKA_PASSWORD}"})
    assert "write 'env:VAR' instead" in message and SECRET not in message
    with pytest.raises(ValidationError) as caught:  # pydantic's own text neither
        KafkaSourceSpec.model_validate(_pipeline(tmp_path, {**SCRAM, "password": SECRET})["sources"][0])
    assert SECRET not in str(caught.value)
    message = _problems(tmp_path, {**SCRAM, "ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem",
                                   "ssl_key_password": SECRET})
    assert "ssl_key_password" in message and SECRET not in message


def test_client_fields_at_the_top_of_a_source_point_at_the_client_block(tmp_path: Path) -> None:
    message = _problems(tmp_path, None, security_protocol="SASL_SSL", sasl_mechanism="PLAIN", password=SECRET)
    assert "belong in the Kafka source's 'client' block" in message
    assert "password" in message and "security_protocol" in message and SECRET not in message


def test_unknown_mechanism_and_protocol_are_refused_naming_the_choices(tmp_path: Path) -> None:
    message = _problems(tmp_path, {**SCRAM, "sasl_mechanism": "GSSAPI"})
    assert "client.sasl_mechanism" in message and "SCRAM-SHA-512" in message and "PLAIN" in message
    message = _problems(tmp_path, {**SCRAM, "security_protocol": "TLS"})
    assert "client.security_protocol" in message and "SASL_SSL" in message


@pytest.mark.parametrize(("client", "expected"), [
    ({"security_protocol": "SASL_SSL", "username": "u", "password": "env:P"}, "needs sasl_mechanism"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "username": "u"}, "needs password"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "password": "env:P"}, "needs username"),
    ({"security_protocol": "SSL", "sasl_mechanism": "PLAIN"}, "apply to security_protocol SASL_PLAINTEXT or SASL_SSL"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "username": "u", "password": "env:P",
      "ssl_cafile": "/ca.pem"}, "apply to security_protocol SSL or SASL_SSL only"),
    ({"security_protocol": "SSL", "ssl_certfile": "/c.pem"}, "needs both ssl_certfile and ssl_keyfile"),
    ({"security_protocol": "PLAINTEXT", "options": {"ssl.cipher.suites": "HIGH"}}, "SSL or SASL_SSL only"),
])
def test_inconsistent_security_settings_are_refused(tmp_path: Path, client: dict[str, Any], expected: str) -> None:
    assert expected in _problems(tmp_path, client)


def test_options_come_from_the_allow_list(tmp_path: Path) -> None:
    spec = parse_spec(_pipeline(tmp_path, {**SCRAM, "options": {
        "client.rack": "eu-1a", "connections.max.idle.ms": 540_000, "socket.keepalive.enable": True,
        "ssl.endpoint.identification.algorithm": "none"}}))
    assert spec.source.client is not None and spec.source.client.options["connections.max.idle.ms"] == 540_000
    message = _problems(tmp_path, {"options": {"fetch.max.bytes": 1}})
    assert "'fetch.max.bytes' is not in the allow-list" in message and "client.rack" in message
    message = _problems(tmp_path, {"options": {"isolation.level": "read_uncommitted"}})
    assert "barrierflow sets it itself" in message
    message = _problems(tmp_path, {**SCRAM, "options": {"sasl.jaas.config": f"password='{SECRET}'"}})
    assert "use the client fields" in message and SECRET not in message
    assert "takes a whole number" in _problems(tmp_path, {"options": {"metadata.max.age.ms": "soon"}})
    assert "takes one of ['any', 'v4', 'v6']" in _problems(tmp_path, {"options": {"broker.address.family": "v5"}})
    assert "takes true or false" in _problems(tmp_path, {"options": {"socket.keepalive.enable": "yes"}})


def test_every_allowed_option_reaches_at_least_one_client() -> None:
    assert all(o.kafka_python or o.librdkafka for o in CLIENT_OPTIONS.values())


def test_a_client_block_is_hashable_and_equal_by_value() -> None:
    one = KafkaClientSpec.model_validate({**SCRAM, "options": {"client.rack": "a"}})
    two = KafkaClientSpec.model_validate({**SCRAM, "options": {"client.rack": "a"}})
    assert one == two and hash(one) == hash(two) and len({one, two}) == 1


def test_an_embedded_channel_takes_no_client_block(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        parse_staged_spec({
            "name": "staged", "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
            "channels": [{"name": "ab", "client": SCRAM}],
            "stages": [{"name": "a", "sources": [{"name": "events", "type": "generator"}],
                        "transformation": {"function": "barrierflow.transforms.projection:project"},
                        "sinks": [{"type": "channel", "channel": "ab"}]}]})
    assert "the embedded broker speaks PLAINTEXT" in str(caught.value)
