"""Which Kafka client settings a spec may give, and what each client calls them: plain values.

The allow-list of a ``client`` block's ``options`` (:data:`CLIENT_OPTIONS`), the security
protocols that take SASL or TLS settings, and the form of a secret reference. The spec model
(:class:`barrierflow.spec.kafka_client.KafkaClientSpec`) validates against them when a spec
loads; :mod:`barrierflow.kafka_io.security` maps them onto each client. This module imports no
model library, so a Spark worker that builds a Kafka client does not pay for the spec models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["CLIENT_OPTIONS", "SASL_PROTOCOLS", "SECRET_FIELDS", "SECRET_REFERENCE", "TLS_PROTOCOLS", "ClientOption"]

#: ``env:VARIABLE`` or ``airflow:CONNECTION_ID``.
SECRET_REFERENCE = re.compile(r"^(env:[A-Za-z_][A-Za-z0-9_]*|airflow:[A-Za-z0-9_.\-]+)$")
#: Fields whose values are secrets (references): validation errors never show what was given.
SECRET_FIELDS = frozenset({"password", "ssl_key_password"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})


@dataclass(frozen=True)
class ClientOption:
    """One client setting of the allow-list: its Kafka name (what the spec says), its value kind
    (``int``: a whole number >= 0, ``bool``, ``str``, or one of ``choices``), and its name in each
    client (None: that client has no such setting and goes without it)."""

    name: str
    kind: Literal["int", "bool", "str", "choice"]
    kafka_python: str | None
    librdkafka: str | None
    choices: tuple[str, ...] = ()
    help: str = ""


#: The client settings ``options`` may give (Kafka's names, as in the Java client and librdkafka).
CLIENT_OPTIONS: dict[str, ClientOption] = {o.name: o for o in (
    ClientOption("client.rack", "str", "client_rack", "client.rack",
                 help="rack of the client (fetch from the nearest replica where the brokers allow it)"),
    ClientOption("connections.max.idle.ms", "int", "connections_max_idle_ms", "connections.max.idle.ms",
                 help="close connections idle this long (below a load balancer's idle timeout)"),
    ClientOption("metadata.max.age.ms", "int", "metadata_max_age_ms", "metadata.max.age.ms",
                 help="refresh topic metadata at least this often"),
    ClientOption("reconnect.backoff.ms", "int", "reconnect_backoff_ms", "reconnect.backoff.ms",
                 help="first wait before reconnecting to a broker"),
    ClientOption("reconnect.backoff.max.ms", "int", "reconnect_backoff_max_ms", "reconnect.backoff.max.ms",
                 help="longest wait before reconnecting to a broker (barrierflow's default: 1000)"),
    ClientOption("receive.buffer.bytes", "int", "receive_buffer_bytes", "socket.receive.buffer.bytes",
                 help="socket receive buffer"),
    ClientOption("send.buffer.bytes", "int", "send_buffer_bytes", "socket.send.buffer.bytes",
                 help="socket send buffer"),
    ClientOption("socket.keepalive.enable", "bool", None, "socket.keepalive.enable",
                 help="TCP keep-alive on broker connections (librdkafka only)"),
    ClientOption("socket.connection.setup.timeout.ms", "int", None, "socket.connection.setup.timeout.ms",
                 help="bound on connecting to a broker, TLS and SASL included (librdkafka only)"),
    ClientOption("broker.address.family", "choice", None, "broker.address.family", ("any", "v4", "v6"),
                 help="IP family of broker addresses (librdkafka only)"),
    ClientOption("client.dns.lookup", "choice", None, "client.dns.lookup",
                 ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
                 help="how bootstrap host names resolve (librdkafka only)"),
    ClientOption("ssl.cipher.suites", "str", "ssl_ciphers", "ssl.cipher.suites",
                 help="TLS cipher list (OpenSSL syntax)"),
    ClientOption("ssl.endpoint.identification.algorithm", "choice", "ssl_check_hostname",
                 "ssl.endpoint.identification.algorithm", ("https", "none"),
                 help="'https' (the default) checks that the brokers' certificate names the host connected "
                      "to; 'none' does not"),
)}
