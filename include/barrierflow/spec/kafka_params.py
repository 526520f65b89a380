"""A Kafka source's (or a channel's) options as its Spark workers read them: plain values.

The driver validates a Kafka source once, when the spec is loaded
(:class:`barrierflow.spec.sources.KafkaSourceSpec`, its ``client`` block a
:class:`barrierflow.spec.kafka_client.KafkaClientSpec`), and hands it to the data source as that
model's JSON (the ``spec`` option). Validating it again in every Python process Spark starts for
the source (the streaming source runner, the data source planners, the readers of its
partitions; a stage's channel source is one in every multi-stage pipeline) would import the spec
models there: pydantic and the building of their validators, 0.10-0.11 core-seconds per process
on 2 cores. :meth:`KafkaSourceParams.from_json` reads the same JSON into frozen dataclasses with
the same field names instead; :mod:`barrierflow.kafka_io` reads either.

Contract: :meth:`KafkaSourceParams.from_json` of a ``KafkaSourceSpec``'s ``model_dump_json()``
has every field this class declares equal to the model's, and its ``client`` every field of the
model's ``client`` (``tests/spec/test_kafka_params.py`` holds them together); a JSON that lacks
a field raises :class:`~barrierflow.errors.SourceError` naming it (a spec written by another
version). Secrets stay references here (``env:VAR``, ``airflow:CONN_ID``), resolved where a
client is built, as with the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from barrierflow.errors import SourceError

__all__ = ["KAFKA_METADATA_COLUMNS", "ClientDerivations", "KafkaClient", "KafkaClientParams", "KafkaSource",
           "KafkaSourceParams", "dead_letters_malformed", "effective_username", "fields_of", "source_kind"]

#: The columns a Kafka (or channel) source gives before its ``json_fields``; a field may not be named like one.
KAFKA_METADATA_COLUMNS = ("topic", "partition", "offset", "timestamp")


def dead_letters_malformed(malformed: str | None, reader: str) -> bool:
    """Whether malformed records (format ``json``) go to the dead-letter output rather than
    become rows of nulls: ``malformed: dead_letter``, or by default with ``reader: python``."""
    return malformed == "dead_letter" or (malformed is None and reader == "python")


def effective_username(username: str | None, password: str | None) -> str | None:
    """A ``client`` block's SASL user: ``username``, or the ``airflow:`` reference of the
    password (the connection's login), or None."""
    if username is not None:
        return username
    if password is not None and password.startswith("airflow:"):
        return password
    return None


def source_kind(reader: str) -> str:
    """The registered source kind that reads a Kafka source (:mod:`barrierflow.sources.registry`):
    ``kafka`` (barrierflow's reader) or ``spark_kafka`` (Spark's connector)."""
    return "spark_kafka" if reader == "spark" else "kafka"


def fields_of(json_fields: Mapping[str, str], topic_fields: Mapping[str, list[str]], topic: str) -> dict[str, str]:
    """The ``json_fields`` the records of ``topic`` must carry (all, unless ``topic_fields``
    names the topic)."""
    names = topic_fields.get(topic)
    if names is None:
        return dict(json_fields)
    return {name: kind for name, kind in json_fields.items() if name in names}


class KafkaClient(Protocol):
    """A ``client`` block as :mod:`barrierflow.kafka_io` reads it: the model the driver
    validated (:class:`~barrierflow.spec.kafka_client.KafkaClientSpec`) or the
    :class:`KafkaClientParams` a worker read."""

    @property
    def security_protocol(self) -> str: ...
    @property
    def sasl_mechanism(self) -> str | None: ...
    @property
    def password(self) -> str | None: ...
    @property
    def ssl_cafile(self) -> str | None: ...
    @property
    def ssl_certfile(self) -> str | None: ...
    @property
    def ssl_keyfile(self) -> str | None: ...
    @property
    def ssl_key_password(self) -> str | None: ...
    @property
    def options(self) -> Mapping[str, str | int | bool]: ...
    @property
    def is_plaintext(self) -> bool: ...
    @property
    def effective_username(self) -> str | None: ...


class KafkaSource(Protocol):
    """A Kafka source as :mod:`barrierflow.kafka_io` and the readers read it: the model the
    driver validated (:class:`~barrierflow.spec.sources.KafkaSourceSpec`) or the
    :class:`KafkaSourceParams` a worker read."""

    @property
    def name(self) -> str: ...
    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def topics(self) -> list[str]: ...
    @property
    def format(self) -> str: ...
    @property
    def json_fields(self) -> Mapping[str, str]: ...
    @property
    def poll_timeout(self) -> float: ...
    @property
    def unavailable_timeout(self) -> float: ...
    @property
    def client(self) -> KafkaClient | None: ...
    def fields_of(self, topic: str) -> dict[str, str]: ...


class ClientDerivations:
    """What a ``client`` block derives from its fields, the same for the spec model and the
    params (both inherit it; it adds no field)."""

    if TYPE_CHECKING:  # the fields of the class that inherits it (never fields of this one)
        security_protocol: str
        username: str | None
        password: str | None

    @property
    def is_plaintext(self) -> bool:
        """No TLS and no SASL (the default)."""
        return self.security_protocol == "PLAINTEXT"

    @property
    def effective_username(self) -> str | None:
        """``username``, or the ``airflow:`` reference of the password (the connection's login)."""
        return effective_username(self.username, self.password)


@dataclass(frozen=True)
class KafkaClientParams(ClientDerivations):
    """The fields of ``KafkaClientSpec`` (security settings, secrets as references, and the
    allowed client ``options``), as :mod:`barrierflow.kafka_io.security` reads them."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = None
    options: dict[str, str | int | bool] = field(default_factory=dict)

    def __hash__(self) -> int:  # usable as (part of) a cache key, as the model: options is a dict
        return hash((self.security_protocol, self.sasl_mechanism, self.username, self.password, self.ssl_cafile,
                     self.ssl_certfile, self.ssl_keyfile, self.ssl_key_password,
                     tuple(sorted(self.options.items()))))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KafkaClientParams:
        """The params of a validated ``client`` block (its JSON, parsed)."""
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name != "options"},
                   options=dict(data["options"]))


@dataclass(frozen=True)
class KafkaSourceParams:
    """The fields of ``KafkaSourceSpec`` that the Kafka and channel sources' readers and
    :mod:`barrierflow.kafka_io` use."""

    name: str
    reader: str
    bootstrap_servers: str
    topics: list[str]
    starting_offsets: str | dict[str, dict[str, int]]
    max_records_per_batch: int
    format: str
    json_fields: dict[str, str]
    topic_fields: dict[str, list[str]]
    malformed: str | None
    poll_timeout: float
    unavailable_timeout: float
    client: KafkaClientParams | None

    @classmethod
    def from_json(cls, text: str) -> KafkaSourceParams:
        """The params of a validated spec's JSON (the data source's ``spec`` option)."""
        data: dict[str, Any] = json.loads(text)
        try:
            client = data["client"]
            return cls(
                name=str(data["name"]),
                reader=str(data["reader"]),
                bootstrap_servers=str(data["bootstrap_servers"]),
                topics=[str(t) for t in data["topics"]],
                starting_offsets=data["starting_offsets"],
                max_records_per_batch=int(data["max_records_per_batch"]),
                format=str(data["format"]),
                json_fields=dict(data["json_fields"]),
                topic_fields={str(t): list(names) for t, names in data["topic_fields"].items()},
                malformed=data["malformed"],
                poll_timeout=float(data["poll_timeout"]),
                unavailable_timeout=float(data["unavailable_timeout"]),
                client=None if client is None else KafkaClientParams.from_dict(client),
            )
        except KeyError as missing:
            raise SourceError(
                f"the Kafka source's options lack {missing}: the driver and its Spark workers run different "
                "versions of barrierflow; install one version on both and start the pipeline again") from None

    @property
    def dead_letters_malformed(self) -> bool:
        """See :func:`dead_letters_malformed`."""
        return dead_letters_malformed(self.malformed, self.reader)

    @property
    def kind(self) -> str:
        """See :func:`source_kind`."""
        return source_kind(self.reader)

    def fields_of(self, topic: str) -> dict[str, str]:
        """See :func:`fields_of`."""
        return fields_of(self.json_fields, self.topic_fields, topic)

