"""How a Kafka client connects: the ``client`` block of a Kafka source, a Kafka sink and a channel.

:class:`KafkaClientSpec` holds the security settings (``security_protocol``, ``sasl_mechanism``,
the SASL user and password, the TLS files) and ``options``, other client settings from the
allow-list :data:`~barrierflow.spec.client_options.CLIENT_OPTIONS`.
:mod:`barrierflow.kafka_io.security` turns it (or the same fields as plain values,
:class:`~barrierflow.spec.kafka_params.KafkaClientParams`) into the settings of both Kafka
clients barrierflow uses (kafka-python and librdkafka).

Secrets never appear in a spec. ``password`` and ``ssl_key_password`` are references, resolved
when a client is built, in the process that builds it (a Spark executor too):

* ``env:VARIABLE``: the value of environment variable ``VARIABLE``;
* ``airflow:CONNECTION_ID``: the password of Airflow connection ``CONNECTION_ID`` (found through
  Airflow's secrets backends: ``AIRFLOW_CONN_<ID>`` in the environment, a configured backend such
  as Vault, or the metadata database inside an Airflow task).

A literal password is refused, and so is one that ``${VAR}`` put into the spec when it loaded.
``username`` may be literal, ``env:VARIABLE``, or ``airflow:CONNECTION_ID`` (the connection's
login); with an ``airflow:`` password and no username, the connection's login is the username.
A validation error never repeats the value of a secret field.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from barrierflow.spec.client_options import CLIENT_OPTIONS, SASL_PROTOCOLS, SECRET_REFERENCE, TLS_PROTOCOLS
from barrierflow.spec.kafka_params import ClientDerivations

#: Settings barrierflow sets itself, and why ``options`` may not: what a refusal says.
RESERVED_OPTIONS: dict[str, str] = {
    **dict.fromkeys(("bootstrap.servers",), "give the brokers in bootstrap_servers (or a channel's bootstrap)"),
    **dict.fromkeys(("security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
                     "sasl.jaas.config", "ssl.ca.location", "ssl.truststore.location", "ssl.certificate.location",
                     "ssl.keystore.location", "ssl.key.location", "ssl.key.password", "ssl.keystore.password",
                     "ssl.truststore.password"),
                    "use the client fields security_protocol, sasl_mechanism, username, password, ssl_cafile, "
                    "ssl_certfile, ssl_keyfile and ssl_key_password (secrets as env:VAR or airflow:CONN_ID)"),
    **dict.fromkeys(("group.id", "enable.auto.commit", "isolation.level", "auto.offset.reset", "enable.idempotence",
                     "acks", "transactional.id", "transaction.timeout.ms", "partitioner", "client.id",
                     "enable.partition.eof", "allow.auto.create.topics"),
                    "barrierflow sets it itself: exactly-once reading and writing depend on it"),
    **dict.fromkeys(("debug",), "client debug logs are not passed through (they could carry connection details)"),
}


def _check_option(name: str, value: Any) -> Any:
    option = CLIENT_OPTIONS.get(name)
    if option is None:
        reason = RESERVED_OPTIONS.get(name)
        if reason is not None:
            raise ValueError(f"client option {name!r} cannot be set here: {reason}")
        raise ValueError(f"client option {name!r} is not in the allow-list; allowed: {sorted(CLIENT_OPTIONS)} "
                         "(see docs/pipeline-spec.md, 'Kafka client settings')")
    if option.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"client option {name!r} takes a whole number >= 0, got a {type(value).__name__}")
    elif option.kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"client option {name!r} takes true or false, got a {type(value).__name__}")
    elif option.kind == "choice":
        if value not in option.choices:
            raise ValueError(f"client option {name!r} takes one of {list(option.choices)}, got {value!r}")
    elif not isinstance(value, str) or not value:
        raise ValueError(f"client option {name!r} takes a non-empty string")
    return value


def _check_reference(field: str, value: str) -> str:
    if not SECRET_REFERENCE.match(value):
        raise ValueError(
            f"{field} is never written in the spec: give 'env:VARIABLE' (the environment variable that holds it) "
            "or 'airflow:CONNECTION_ID' (an Airflow connection whose password it is). A '${VAR}' in the spec is "
            "expanded when the spec loads, which would put the secret into it: write 'env:VAR' instead")
    return value


class KafkaClientSpec(ClientDerivations, BaseModel):
    """See the module docstring. ``security_protocol`` defaults to ``PLAINTEXT``."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username: str | None = Field(None, min_length=1, description="literal, env:VAR or airflow:CONN_ID (its login)")
    password: str | None = Field(None, description="env:VAR or airflow:CONN_ID; never a literal")
    ssl_cafile: str | None = Field(None, min_length=1,
                                   description="PEM file of the CA(s) that signed the brokers' certificates; "
                                               "default: the system's CA certificates")
    ssl_certfile: str | None = Field(None, min_length=1, description="PEM file of the client's certificate")
    ssl_keyfile: str | None = Field(None, min_length=1, description="PEM file of the client's private key")
    ssl_key_password: str | None = Field(None, description="env:VAR or airflow:CONN_ID, for an encrypted key")
    options: dict[str, str | int | bool] = Field(default_factory=dict,
                                                 description="other client settings, from the allow-list")

    def __hash__(self) -> int:  # usable as (part of) a cache key: options is a dict
        return hash(self.model_dump_json())

    @field_validator("password", "ssl_key_password")
    @classmethod
    def _reference(cls, value: str | None, info: Any) -> str | None:
        return None if value is None else _check_reference(info.field_name, value)

    @field_validator("options")
    @classmethod
    def _allowed(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name, given in value.items():
            _check_option(name, given)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> KafkaClientSpec:
        protocol = self.security_protocol
        if protocol in SASL_PROTOCOLS:
            if self.sasl_mechanism is None:
                raise ValueError(f"security_protocol {protocol} needs sasl_mechanism (PLAIN, SCRAM-SHA-256 or "
                                 "SCRAM-SHA-512)")
            if self.password is None:
                raise ValueError(f"security_protocol {protocol} needs password (env:VAR or airflow:CONN_ID)")
            if self.username is None and not self.password.startswith("airflow:"):
                raise ValueError(f"security_protocol {protocol} needs username (with an airflow: password it "
                                 "defaults to the connection's login)")
        else:
            given = [f for f in ("sasl_mechanism", "username", "password") if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{given} apply to security_protocol SASL_PLAINTEXT or SASL_SSL only, not "
                                 f"{protocol}")
        if protocol not in TLS_PROTOCOLS:
            given = [f for f in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_key_password")
                     if getattr(self, f) is not None]
            given += [n for n in self.options if n.startswith("ssl.")]
            if given:
                raise ValueError(f"{given} apply to security_protocol SSL or SASL_SSL only, not {protocol}")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("a client certificate needs both ssl_certfile and ssl_keyfile")
        if self.ssl_key_password is not None and self.ssl_keyfile is None:
            raise ValueError("ssl_key_password applies to an ssl_keyfile")
        return self


#: The client fields, refused at the top of a Kafka source or sink with a pointer to ``client``.
CLIENT_FIELDS = frozenset(KafkaClientSpec.model_fields) | {"ssl_check_hostname", "sasl_plain_username",
                                                           "sasl_plain_password", "kafka_options"}


#: What every ``client`` field says of itself (the JSON schema's description, with a tail per owner).
CLIENT_DESCRIPTION = "security (SASL, TLS; secrets as env:VAR or airflow:CONN_ID) and allowed client options"

#: The ``client`` field of a Kafka source and a Kafka sink (``client: KafkaClientField = None``):
#: no block means PLAINTEXT.
KafkaClientField = Annotated[KafkaClientSpec | None, Field(description=f"{CLIENT_DESCRIPTION}; none = PLAINTEXT")]

#: The ``client`` field of a channel: its brokers' settings; the embedded broker takes none.
ChannelClientField = Annotated[KafkaClientSpec | None, Field(
    description=f"{CLIENT_DESCRIPTION} of the channel's brokers; not for 'embedded'")]


class NestedClientFields(BaseModel):
    """Mixin of every spec model with a ``client`` block (Kafka source, Kafka sink, channel): it
    refuses client fields given at the model's top level (:func:`refuse_flat_client_fields`),
    naming the block's owner ``client_owner``. It adds no field, so the subclass's field order
    (the JSON schema's and the docs') is its own."""

    client_owner: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _client_fields_nested(cls, data: Any) -> Any:
        return refuse_flat_client_fields(data, cls.client_owner)


def refuse_flat_client_fields(data: Any, where: str) -> Any:
    """Raise when ``data`` (a Kafka source, sink or channel before validation) has client fields
    at its top level instead of in its ``client`` block (the message never shows their values)."""
    if isinstance(data, dict):
        flat = sorted(k for k in data if k in CLIENT_FIELDS)
        if flat:
            raise ValueError(f"{flat} belong in the {where}'s 'client' block (client: {{security_protocol: ..., "
                             "sasl_mechanism: ..., username: ..., password: env:VAR, ssl_cafile: ...}); see "
                             "docs/pipeline-spec.md, 'Kafka client settings'")
    return data
