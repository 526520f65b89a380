"""A spec's ``client`` block (:class:`~barrierflow.spec.kafka_client.KafkaClientSpec`) as the
settings of both Kafka clients, and clear errors when a secured connection fails.

One mapping for every client barrierflow builds: :func:`kafka_python_config` (topic metadata,
offsets, the Kafka sink's marker reads, channel topic creation) and :func:`librdkafka_config`
(range reads, the channel writer, the transactional Kafka sink). Both resolve the secret
references where they are called, so a secret exists only in the process that builds a client,
in the settings it hands that client: never in a spec, a settings object (those carry the
references; they are pickled to Spark executors), a log record, an error message, or anything
written to the checkpoint store. The executors resolve the references themselves: in local mode
they inherit the driver's environment; on a cluster every executor needs the variables (or the
Airflow connection) too: see docs/pipeline-spec.md, "Kafka client settings".

Failures: a kafka-python client that cannot bootstrap reports only that it timed out (its
reasons are logged, not raised), and librdkafka reports authentication and TLS failures
through its error callback while its calls time out. :func:`security_failure` turns what a
client said into a :class:`~barrierflow.kafka_io.errors.KafkaSecurityError` naming the brokers
and the setting to check; :func:`diagnose` asks the brokers once more with librdkafka, after a
kafka-python failure, to find out whether security was the cause. :func:`connect_kafka_python`
does that after a short first bootstrap of a secured client, so a refused login fails within
seconds, not at the end of the client's whole timeout.

Contract: the dicts these functions return hold secrets. Pass them to a client constructor and
nowhere else (no logging, no repr, no error message). A client library may still log them
(kafka-python logs its admin client's configuration, and the bytes of a SASL/PLAIN login, at
DEBUG): every secret resolved here is concealed in every log record of the process from then on
(:func:`conceal`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from barrierflow.kafka_io.errors import KafkaSecurityError
from barrierflow.spec.client_options import CLIENT_OPTIONS, TLS_PROTOCOLS

if TYPE_CHECKING:
    from barrierflow.spec.kafka_params import KafkaClient

log = logging.getLogger(__name__)

KafkaPythonKind = Literal["consumer", "producer", "admin"]
_Client = TypeVar("_Client")
#: librdkafka's error codes of a failed authentication and of no broker answering
#: (``KafkaError._AUTHENTICATION``, ``KafkaError._ALL_BROKERS_DOWN``).
_AUTHENTICATION, _ALL_BROKERS_DOWN = -169, -187


# --------------------------------------------------------------------------- secrets in logs

#: The resolved secrets of this process, in the forms a log line may carry them (as they are, and
#: as they show inside the repr of bytes: kafka-python logs its admin client's configuration and
#: the bytes of its requests, a SASL/PLAIN login included, at DEBUG).
_CONCEALED: set[str] = set()
#: Shorter secrets are not concealed (replacing every occurrence of a few letters would garble logs).
MIN_CONCEALED = 4
_MASK = "***"


def _conceal_text(text: str) -> str:
    for secret in sorted(_CONCEALED, key=len, reverse=True):
        text = text.replace(secret, _MASK)
    return text


def _conceal_exception(exc: BaseException | None) -> None:
    """Replace the secrets in the string arguments of ``exc`` and of the exceptions it chains."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        try:
            current.args = tuple(_conceal_text(a) if isinstance(a, str) else a for a in current.args)
        except (AttributeError, TypeError):  # an exception type whose args cannot be set
            pass
        pending += [current.__cause__, current.__context__]


def _concealing_factory(previous: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not format: the handler reports it
            return record
        if any(secret in message for secret in _CONCEALED):
            record.msg, record.args = _conceal_text(message), ()
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            if any(secret in text for secret in _CONCEALED):
                record.exc_text = _conceal_text(text)
                # Formatters that render the exception object themselves (structured/JSON ones)
                # read exc_info, not exc_text: conceal the exception's own arguments, and where
                # that is not enough, leave only the concealed text.
                _conceal_exception(record.exc_info[1])
                if any(secret in logging.Formatter().formatException(record.exc_info) for secret in _CONCEALED):
                    record.exc_info = None
        return record

    factory.barrierflow_conceals = True  # type: ignore[attr-defined]
    return factory


def conceal(secret: str) -> None:
    """Keep ``secret`` out of every log record this process makes from now on (any logger, the
    Kafka clients' included): it is replaced by ``***`` in the message and in a logged exception."""
    if len(secret) < MIN_CONCEALED:
        return
    raw = secret.encode()
    # As they are, and as the reprs of str, bytes and bytearray show them (quotes and backslashes
    # escaped, other bytes as \x..): kafka-python logs request bytes with %r.
    _CONCEALED.update({secret, repr(raw)[2:-1], repr(bytearray(raw))[12:-2],
                       secret.replace("\\", "\\\\").replace("'", "\\'")})
    current = logging.getLogRecordFactory()
    if not getattr(current, "barrierflow_conceals", False):
        logging.setLogRecordFactory(_concealing_factory(current))


# --------------------------------------------------------------------------- secrets


def reference_source(reference: str) -> str:
    """Where a secret reference points, for messages: ``environment variable X`` or
    ``Airflow connection 'x'`` (never the value)."""
    kind, _, name = reference.partition(":")
    if kind == "env":
        return f"environment variable {name}"
    if kind == "airflow":
        return f"Airflow connection {name!r}"
    return "the spec"  # a literal username


def _airflow_connection(conn_id: str, field: str) -> Any:
    try:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
    except ImportError as exc:
        raise KafkaSecurityError(
            f"{field} 'airflow:{conn_id}' needs Airflow where this Kafka client runs (pid {os.getpid()}), and it is "
            "not installed here; use 'env:VARIABLE' instead, or install apache-airflow there") from exc
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException as exc:
        raise KafkaSecurityError(
            f"{field} 'airflow:{conn_id}': Airflow connection {conn_id!r} is not defined where this Kafka client "
            f"runs (pid {os.getpid()}). Outside an Airflow task, Airflow finds connections through its secrets "
            f"backends only: export AIRFLOW_CONN_{conn_id.upper().replace('-', '_').replace('.', '_')} (the "
            "connection as JSON or a URI) to the driver and the executors, or configure a secrets backend") from exc


def resolve_secret(reference: str, *, field: str, login: bool = False) -> str:
    """The value behind ``reference`` (``env:VAR``; ``airflow:ID``: the connection's password, or
    with ``login`` its login). A username that is not a reference is returned as it is.

    Raises:
        KafkaSecurityError: the variable is unset or empty, the connection is unknown or has no
            password (login); the message names the reference, never a value.
    """
    kind, sep, name = reference.partition(":")
    if sep and kind == "env":
        value = os.environ.get(name, "")
        if not value:
            raise KafkaSecurityError(
                f"{field} 'env:{name}': environment variable {name} is not set (or empty) where this Kafka client "
                f"runs (pid {os.getpid()}). Export it before the pipeline starts; on a Spark cluster every executor "
                "needs it too (e.g. spark.executorEnv or the cluster's secret mechanism)")
        if not login:
            conceal(value)
        return value
    if sep and kind == "airflow":
        connection = _airflow_connection(name, field)
        value = connection.login if login else connection.password
        if not value:
            raise KafkaSecurityError(f"{field} 'airflow:{name}': Airflow connection {name!r} has no "
                                     f"{'login' if login else 'password'}")
        if not login:
            conceal(str(value))
        return str(value)
    if login:
        return reference
    raise KafkaSecurityError(f"{field} is not a secret reference (env:VAR or airflow:CONN_ID)")  # validated before


def username(client: KafkaClient) -> str | None:
    """The SASL user name of ``client`` (resolved when it is a reference), or None without SASL."""
    reference = client.effective_username
    return None if reference is None else resolve_secret(reference, field="username", login=True)


def _tls_file(path: str, field: str) -> str:
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise KafkaSecurityError(f"{field} {path}: no such readable file where this Kafka client runs (pid "
                                 f"{os.getpid()}); on a Spark cluster the file must be on every executor too")
    return path


# --------------------------------------------------------------------------- client settings


@dataclass(frozen=True)
class _SecurityNames:
    """What one Kafka client calls each security setting of a :class:`KafkaClientSpec`."""

    security_protocol: str
    sasl_mechanism: str
    sasl_username: str
    sasl_password: str
    ssl_cafile: str
    ssl_certfile: str
    ssl_keyfile: str
    ssl_key_password: str


_LIBRDKAFKA = _SecurityNames("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
                             "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password")
_KAFKA_PYTHON = _SecurityNames("security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
                               "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")


def _security_settings(client: KafkaClient, names: _SecurityNames, *, protocol: str,
                       system_cas: str | None) -> dict[str, Any]:
    """The security settings of ``client`` under one client's ``names``, secrets resolved:
    ``protocol`` as that client spells it; the SASL mechanism, user and password with SASL; with
    TLS the CA file (``system_cas`` without ``ssl_cafile``; None: that client's own default), the
    client certificate and key when both are given, and the key's password.

    Raises:
        KafkaSecurityError: a secret reference does not resolve, or a TLS file is missing.
    """
    config: dict[str, Any] = {names.security_protocol: protocol}
    if client.sasl_mechanism is not None:
        config[names.sasl_mechanism] = client.sasl_mechanism
        config[names.sasl_username] = username(client)
        assert client.password is not None  # the spec requires it with SASL
        config[names.sasl_password] = resolve_secret(client.password, field="password")
    if client.security_protocol in TLS_PROTOCOLS:
        if client.ssl_cafile is not None:
            config[names.ssl_cafile] = _tls_file(client.ssl_cafile, "ssl_cafile")
        elif system_cas is not None:
            config[names.ssl_cafile] = system_cas
        if client.ssl_certfile is not None and client.ssl_keyfile is not None:
            config[names.ssl_certfile] = _tls_file(client.ssl_certfile, "ssl_certfile")
            config[names.ssl_keyfile] = _tls_file(client.ssl_keyfile, "ssl_keyfile")
        if client.ssl_key_password is not None:
            config[names.ssl_key_password] = resolve_secret(client.ssl_key_password, field="ssl_key_password")
    return config


def librdkafka_config(client: KafkaClient | None) -> dict[str, Any]:
    """The librdkafka (confluent-kafka) settings of ``client``, secrets resolved; empty for None.

    Raises:
        KafkaSecurityError: a secret reference does not resolve, or a TLS file is missing.
    """
    if client is None:
        return {}
    # Without ssl_cafile, the system's CA certificates ('probe' finds them where the bundled
    # OpenSSL would not look).
    config = _security_settings(client, _LIBRDKAFKA, protocol=client.security_protocol.lower(), system_cas="probe")
    for name, value in client.options.items():
        target = CLIENT_OPTIONS[name].librdkafka
        if target is not None:
            config[target] = value
    return config


def librdkafka_client_config(servers: str, client_id: str, client: KafkaClient | None,
                             settings: dict[str, Any]) -> dict[str, Any]:
    """The whole configuration of one librdkafka client: the brokers ``servers`` and ``client_id``,
    the client kind's own ``settings`` (librdkafka names), what every barrierflow client sets
    (a reconnect backoff of at most 1 s, topics never created by the client), then the ``client``
    block's settings (:func:`librdkafka_config`) last, so an allowed option such as
    ``reconnect.backoff.max.ms`` overrides barrierflow's default.

    Raises:
        KafkaSecurityError: a secret reference does not resolve, or a TLS file is missing.
    """
    return {"bootstrap.servers": servers, "client.id": client_id, **settings,
            "reconnect.backoff.max.ms": 1000, "allow.auto.create.topics": False, **librdkafka_config(client)}


def _kafka_python_keys(kind: KafkaPythonKind) -> frozenset[str]:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    cls = {"consumer": KafkaConsumer, "producer": KafkaProducer, "admin": KafkaAdminClient}[kind]
    return frozenset(cls.DEFAULT_CONFIG)


def kafka_python_config(client: KafkaClient | None, kind: KafkaPythonKind = "consumer") -> dict[str, Any]:
    """The kafka-python settings of ``client`` for a ``KafkaConsumer``, ``KafkaProducer`` or
    ``KafkaAdminClient`` (an allowed option that client has no setting for is left out), secrets
    resolved; empty for None.

    Raises:
        KafkaSecurityError: a secret reference does not resolve, or a TLS file is missing.
    """
    if client is None:
        return {}
    # Without ssl_cafile, kafka-python's default (the system's CA certificates).
    config = _security_settings(client, _KAFKA_PYTHON, protocol=client.security_protocol, system_cas=None)
    for name, value in client.options.items():
        target = CLIENT_OPTIONS[name].kafka_python
        if target == "ssl_check_hostname":
            config[target] = value == "https"
        elif target is not None:
            config[target] = value
    accepted = _kafka_python_keys(kind)
    return {k: v for k, v in config.items() if k in accepted}


#: Allowed client options the Java client has no setting for (librdkafka only): left out for it.
_NOT_JAVA = frozenset({"socket.keepalive.enable", "broker.address.family"})
#: The JAAS login module of each SASL mechanism (Kafka's Java client).
_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pem_text(path: str, field: str) -> str:
    with open(_tls_file(path, field), encoding="ascii") as handle:
        return handle.read()


def java_client_config(client: KafkaClient | None) -> dict[str, str]:
    """The settings of Kafka's Java client (Spark's Kafka connector, without its ``kafka.``
    prefix) for ``client``, secrets resolved; empty for None. SASL becomes ``sasl.jaas.config``
    (PLAIN or SCRAM login module); TLS files stay PEM: the CA file as a PEM trust store, the
    client certificate and key as an inline PEM key store (the Java client reads no separate
    certificate and key files). ``ssl.endpoint.identification.algorithm: none`` is the Java
    client's empty value. Options the Java client does not have are left out.

    Raises:
        KafkaSecurityError: a secret reference does not resolve, or a TLS file is missing.
    """
    if client is None:
        return {}
    config: dict[str, str] = {"security.protocol": client.security_protocol}
    if client.sasl_mechanism is not None:
        assert client.password is not None  # the spec requires it with SASL
        user = username(client) or ""
        password = resolve_secret(client.password, field="password")
        config["sasl.mechanism"] = client.sasl_mechanism
        config["sasl.jaas.config"] = (f"{_JAAS_MODULES[client.sasl_mechanism]} required "
                                      f"username={_jaas_quoted(user)} password={_jaas_quoted(password)};")
    if client.security_protocol in TLS_PROTOCOLS:
        if client.ssl_cafile is not None:
            config["ssl.truststore.type"] = "PEM"
            config["ssl.truststore.location"] = _tls_file(client.ssl_cafile, "ssl_cafile")
        if client.ssl_certfile is not None and client.ssl_keyfile is not None:
            config["ssl.keystore.type"] = "PEM"
            config["ssl.keystore.certificate.chain"] = _pem_text(client.ssl_certfile, "ssl_certfile")
            config["ssl.keystore.key"] = _pem_text(client.ssl_keyfile, "ssl_keyfile")
        if client.ssl_key_password is not None:
            config["ssl.key.password"] = resolve_secret(client.ssl_key_password, field="ssl_key_password")
    for name, value in client.options.items():
        if name in _NOT_JAVA:
            continue
        if name == "ssl.endpoint.identification.algorithm":
            config[name] = "" if value == "none" else str(value)
        else:
            config[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return config


# --------------------------------------------------------------------------- failures


def describe(client: KafkaClient | None) -> str:
    """The connection settings of ``client`` for a message: protocol, mechanism, TLS files (no secret)."""
    if client is None or client.is_plaintext:
        return "security_protocol PLAINTEXT"
    parts = [f"security_protocol {client.security_protocol}"]
    if client.sasl_mechanism is not None:
        parts.append(f"sasl_mechanism {client.sasl_mechanism}")
    if client.security_protocol in TLS_PROTOCOLS:
        parts.append(f"ssl_cafile {client.ssl_cafile}" if client.ssl_cafile else "ssl_cafile unset (the system's CAs)")
        if client.ssl_certfile:
            parts.append(f"ssl_certfile {client.ssl_certfile}")
    return ", ".join(parts)


def _user(client: KafkaClient) -> str:
    try:
        return repr(username(client))
    except KafkaSecurityError:
        return f"from {client.effective_username}"


def security_failure(client: KafkaClient | None, servers: str, detail: str) -> KafkaSecurityError | None:
    """The :class:`KafkaSecurityError` for what a client reported (``detail``: an error text of
    kafka-python or librdkafka), or None when it is not a security failure (or ``client`` is
    PLAINTEXT and the brokers did not ask for more)."""
    text = detail.lower()
    protocol = client.security_protocol if client is not None else "PLAINTEXT"
    settings = describe(client)
    if client is not None and client.sasl_mechanism is not None:
        if "unsupported sasl mechanism" in text or "unsupportedsaslmechanism" in text \
                or ("mechanism" in text and "not enabled" in text):
            return KafkaSecurityError(
                f"the brokers {servers} do not offer sasl_mechanism {client.sasl_mechanism} ({settings}): set "
                f"sasl_mechanism to one the brokers enable ({detail})")
        if "authentication failed" in text or "invalid credentials" in text or "saslauthenticationfailed" in text \
                or "sasl authentication error" in text:
            assert client.password is not None
            return KafkaSecurityError(
                f"authentication failed for user {_user(client)} on brokers {servers} ({settings}): the brokers "
                f"refused the credentials; check the password in {reference_source(client.password)} "
                f"(password: {client.password}) and that the user exists for {client.sasl_mechanism} ({detail})")
    if "certificate verify failed" in text or "certificate could not be verified" in text:
        if "mismatch" in text or ("hostname" in text and "match" in text):
            return KafkaSecurityError(
                f"the TLS certificate of brokers {servers} does not name the host connected to ({settings}): use the "
                "host name the certificate names in bootstrap_servers (client option "
                f"ssl.endpoint.identification.algorithm: none turns the check off) ({detail})")
        trusted = f"ssl_cafile {client.ssl_cafile}" if client is not None and client.ssl_cafile \
            else "the system's CA certificates (ssl_cafile unset)"
        return KafkaSecurityError(
            f"the TLS certificate of brokers {servers} is not trusted: {trusted} does not hold the CA that signed it "
            f"({settings}); set ssl_cafile to that CA's PEM file ({detail})")
    if any(s in text for s in ("certificate required", "bad certificate", "unknown ca", "certificate unknown")):
        return KafkaSecurityError(
            f"the brokers {servers} refused the client's TLS certificate ({settings}): check ssl_certfile and "
            f"ssl_keyfile, and that the brokers trust the CA that signed the certificate ({detail})")
    if "ssl.ca.location failed" in text or "ssl.certificate.location failed" in text \
            or "ssl.key.location failed" in text:
        return KafkaSecurityError(f"the client's TLS files cannot be read ({settings}): {detail}")
    if "wrong version number" in text or "incorrect security.protocol" in text or "plaintext broker listener" in text \
            or (protocol != "PLAINTEXT" and "invalid frame length" in text):
        return KafkaSecurityError(
            f"the brokers {servers} do not speak security_protocol {protocol} on that port ({settings}): check "
            f"security_protocol, and that bootstrap_servers names the brokers' {protocol} listener ({detail})")
    return None


def librdkafka_failure(client: KafkaClient | None, servers: str, error: Any) -> KafkaSecurityError | None:
    """:func:`security_failure` of a librdkafka ``KafkaError`` (from an error callback)."""
    detail = error.str()
    found = security_failure(client, servers, detail)
    if found is None and error.code() == _AUTHENTICATION:
        found = KafkaSecurityError(f"the brokers {servers} refused to authenticate this client ({describe(client)}): "
                                   f"{detail}")
    return found


def diagnose(client: KafkaClient | None, servers: str, timeout: float,
             *, clock: Callable[[], float] = time.monotonic) -> KafkaSecurityError | None:
    """Ask the brokers with librdkafka whether ``client``'s security settings are the reason a
    connection failed: the :class:`KafkaSecurityError` if they are (found within ``timeout``
    seconds, usually within one), else None (reached and authenticated, or nothing said why).
    A PLAINTEXT ``client`` is not diagnosed."""
    if client is None or client.is_plaintext:
        return None
    from confluent_kafka import KafkaException, Producer

    try:
        config = librdkafka_config(client)
    except KafkaSecurityError as exc:
        return exc
    errors: list[Any] = []
    config.update({"bootstrap.servers": servers, "client.id": "barrierflow-diagnosis", "error_cb": errors.append,
                   "logger": log, "socket.timeout.ms": max(1000, int(timeout * 1000)),
                   "reconnect.backoff.max.ms": 500})
    try:
        producer = Producer(config)
    except KafkaException as exc:
        return security_failure(client, servers, str(exc.args[0].str() if exc.args else exc))
    deadline = clock() + max(timeout, 1.0)
    while True:
        producer.poll(0.2)
        for error in errors:
            found = librdkafka_failure(client, servers, error)
            if found is not None:
                return found
            if error.code() == _ALL_BROKERS_DOWN:
                return None  # no broker refused anything: they did not answer (an outage, a wrong address)
        if clock() >= deadline:
            return None
        try:
            producer.list_topics(timeout=0.5)
            return None  # connected and authenticated: security is not what failed
        except KafkaException:
            continue


def kafka_python_failure(client: KafkaClient | None, servers: str, exc: BaseException,
                         timeout: float) -> KafkaSecurityError | None:
    """The security failure behind a kafka-python error ``exc``, or None: its text when it says
    (a refused SASL handshake), else, when it is a bootstrap timeout of a secured client,
    :func:`diagnose` (kafka-python logs why it could not bootstrap, and raises only that it timed out)."""
    if isinstance(exc, KafkaSecurityError):
        return exc
    found = security_failure(client, servers, f"{type(exc).__name__}: {exc}")
    if found is not None or client is None or client.is_plaintext:
        return found
    if getattr(exc, _DIAGNOSED, False):
        return None
    name = type(exc).__name__
    if name in ("KafkaTimeoutError", "NoBrokersAvailable", "KafkaConnectionError") or "bootstrap" in str(exc).lower():
        # At least 5 s: a loaded host may take seconds for the TLS handshake and the SCRAM exchange.
        return diagnose(client, servers, min(max(timeout, 5.0), 10.0))
    return None


#: How long the first bootstrap of a secured kafka-python client may take before librdkafka is
#: asked whether the client's security settings are the reason it failed (seconds; see
#: :func:`connect_kafka_python`). A login over TLS and SCRAM takes well under a second on a
#: loaded host; a bootstrap that is only slow gets the rest of its timeout after the question.
FIRST_BOOTSTRAP_SECONDS = 2.0
#: Set on a kafka-python error whose brokers :func:`diagnose` already found not to refuse the
#: client's security settings (:func:`connect_kafka_python`), so it is not asked twice.
_DIAGNOSED = "_barrierflow_security_diagnosed"


def connect_kafka_python(connect: Callable[[int], _Client], client: KafkaClient | None, servers: str,
                         timeout: float) -> _Client:
    """``connect(bootstrap_timeout_ms)``: a kafka-python client that bootstraps within ``timeout``
    seconds, failing at once when a secured ``client``'s settings are refused.

    kafka-python retries a refused login until its bootstrap timeout and then raises only that
    it timed out. For a secured ``client`` the first bootstrap is bounded to
    :data:`FIRST_BOOTSTRAP_SECONDS`; when it fails, :func:`diagnose` asks the brokers with
    librdkafka whether the security settings are the reason, and if they are that is raised
    (a wrong password fails after about 2.5 s instead of ``timeout``); else the bootstrap is
    tried again for what is left of ``timeout``. A PLAINTEXT ``client`` (or a ``timeout`` no
    longer than the first bootstrap) bootstraps once, for ``timeout``.

    Raises:
        KafkaSecurityError: the brokers refused the client's credentials or certificate (or it
            theirs), or a secret reference or TLS file does not resolve.
        Exception: whatever ``connect`` raises (kafka-python's ``KafkaTimeoutError`` when the
            brokers cannot be reached within ``timeout``).
    """
    if client is None or client.is_plaintext or timeout <= FIRST_BOOTSTRAP_SECONDS:
        return connect(max(int(timeout * 1000), 1000))
    from kafka.errors import KafkaTimeoutError

    started = time.monotonic()
    try:
        return connect(int(FIRST_BOOTSTRAP_SECONDS * 1000))
    except KafkaTimeoutError:
        left = timeout - (time.monotonic() - started)
        found = diagnose(client, servers, max(min(left, 5.0), 1.0))
        if found is not None:
            raise found from None
    left = timeout - (time.monotonic() - started)
    try:
        return connect(max(int(left * 1000), 1000))
    except KafkaTimeoutError as exc:
        setattr(exc, _DIAGNOSED, True)  # security is not why: kafka_python_failure need not ask again
        raise
