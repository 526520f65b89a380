"""barrierflow's JVM decoder of ``format: json`` records gives Spark's ``from_json`` rows for every
record: hand-picked edges and seeded random documents (random layout, types, nesting and
corruptions; and real text: 2, 3 and 4-byte UTF-8, escapes in keys and values, surrogate pairs,
malformed UTF-8) decoded both ways in one job each; and it reads the plain records, text
included, itself."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from barrierflow.jvm.helper import FLAT_JSON_CLASS, helper_instance
from barrierflow.sources.flat_json import decoded_record
from pyspark.sql import functions as F
from pyspark.sql.column import Column

FIELDS = {"key": "STRING", "value": "BIGINT", "ratio": "DOUBLE", "ok": "BOOLEAN", "at": "STRING"}
DDL = ", ".join(f"{name} {kind}" for name, kind in FIELDS.items())

EDGES: list[bytes | None] = [
    b'{"key":"a","value":1,"ratio":1.5,"ok":true,"at":"2026-01-01T00:00:00"}',
    b' {\n\t"key" : "b" ,\r\n "value" : -2 } ', b"{}", b"{ }", b"", b" ", b"null", b"[1,2]", b'"x"', b"12", b"nope",
    b'{"key":"c","value":1.5}', b'{"key":"d","value":"5"}', b'{"key":"e","value":012}', b'{"key":"f","value":-0}',
    b'{"key":"g","value":9223372036854775807}', b'{"key":"h","value":9223372036854775808}',
    b'{"key":"i","value":123456789012345678}', b'{"key":"j","value":1e3}', b'{"key":5,"at":1767225602000}',
    b'{"key":-7,"at":-0}', b'{"key":1.5}', b'{"key":true}', b'{"key":{"a":1}}', b'{"key":[1]}', b'{"key":null}',
    b'{"KEY":"x","value":3}', b'{"Value":3}', b'{"key":"k","key":"l"}', b'{"value":1,"value":null}',
    b'{"key":"\\u00e9\\"q","value":7}', '{"key":"é","value":4}'.encode(), b'{"key":"\xff"}',
    b'{"key":"\\ud83d\\ude00 \\uD83D","value":8}', b'{"key":"\\ude00\\ud83dx","at":"\\ud83d\\u0041"}',
    b'{"k\\u0065y":"\\/\\b\\f\\n\\r\\t\\\\","v\\u0061lue":9}', b'{"k\\ud83dy":"x","value":1}',
    '{"key":"日本😀","x":"é","value":2}'.encode(), b'{"key":"\xc3\xa9\xed\xa0\x80"}', b'{"key":"\xf4\x90\x80\x80"}',
    b'{"key":"\xe2\x82","value":1}', b'{"key":"a","x":"\xc0\xaf"}', b'{"key":"a\xc3"}', b'{"k\xc3\xa9y":1}',
    '{"KEY":"é","\u212aey":"b","value":3}'.encode(), '{"\u212aey":"b"}'.encode(), b'{"key":"\\u0000"}',
    b'{"key":"m","x":{"a":[1,{"b":"}\\"]"}],"c":[]},"value":5}', b'{"key":"n","x":"\\ud83d\\ude00","value":6}',
    b'{"key":"o","x":"\\q","value":6}', b'{"key":"p","value":1}{', b'{"key":"q","value":1}  x', b'{"key":"r",}',
    b'{"key":"s" "value":1}', b'{"key":"t"', b'{"key":"u\x01"}', b'{"key":"v","ratio":-0.0}',
    b'{"ratio":1e400}', b'{"ratio":-1E-400}', b'{"ratio":12345678901234567890}', b'{"ratio":0.1}',
    b'{"ratio":1.}', b'{"ratio":.5}', b'{"ratio":+1}', b'{"ratio":NaN}', b'{"ratio":"1.5"}', b'{"ok":"true"}',
    b'{"ok":false,"value":0}', b'{"ok":tru}', b'{"ok":nul}', b'{"ok":null}', b'{"x":[[[[[[[[[[1]]]]]]]]]]}',
    b'{"x":' + b"[" * 40 + b"]" * 40 + b', "value":3}', b'{"value":1 /* c */}', b"{'key':'w'}", None,
]


def _frame(spark: Any, values: list[bytes | None]) -> Any:
    return spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, value binary")


def _assert_same(spark: Any, values: list[bytes | None]) -> Any:
    """Decodes ``values`` both ways in one job and compares the records in Spark (as JSON text:
    exact for doubles, 0.0 and -0.0 differ, a NaN equals a NaN; a null record only equals a null
    one); only the first differing records reach the driver, for the message. Returns the frame
    of the records as barrierflow's decoder gives them (column ``ours``)."""
    both = _frame(spark, values).select(
        "i", F.from_json(F.col("value").cast("string"), DDL).alias("spark"),
        decoded_record(spark, F.col("value"), FIELDS).alias("ours"))
    differ = both.filter(~F.to_json("spark").eqNullSafe(F.to_json("ours")))
    count = differ.count()
    assert count == 0, f"{count} records decode otherwise than from_json, e.g. " \
                       f"{[(values[r.i], r.spark, r.ours) for r in differ.orderBy('i').limit(5).collect()]}"
    return both


def _assert_json(spark: Any, actual: Any, expected: list[str | None]) -> None:
    """``actual`` (columns ``i``, ``r``: a record as JSON text) holds exactly ``expected[i]`` for
    each ``i`` in range, compared in Spark; the driver gets a count and, for the message, the
    range of the differing record numbers (an aggregate), never the records."""
    wanted = spark.createDataFrame(list(enumerate(expected)), "i int, want string").withColumn("wanted", F.lit(True))
    joined = wanted.join(actual.withColumn("given", F.lit(True)), "i", "full_outer")
    differ = joined.filter(~F.col("want").eqNullSafe(F.col("r")) | F.col("wanted").isNull() | F.col("given").isNull())
    count = differ.count()
    if count:
        lowest, highest = differ.selectExpr("min(i)", "max(i)").head()
        pytest.fail(f"{count} records differ from from_json's, numbers {lowest} to {highest} of the input")


def test_the_edges_decode_as_from_json_decodes_them(spark: Any) -> None:
    both = _assert_same(spark, EDGES)
    _assert_json(spark, both.filter("i = 0").select("i", F.to_json("ours").alias("r")),
                 ['{"key":"a","value":1,"ratio":1.5,"ok":true,"at":"2026-01-01T00:00:00"}'])


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(10 if depth < 3 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 7, 2**53, 2**63 - 1, -(2**63), 2**63, 10**19, rng.randrange(-10**6, 10**6)])
    if kind == 3:
        return rng.choice([0.0, -0.0, 0.1, 1e-300, 1.7976931348623157e308, rng.uniform(-1e6, 1e6), 5e-324])
    if kind in (4, 5, 6):
        return "".join(rng.choice(['a', 'Z', ' ', '"', '\\', '/', '\n', 'é', '😀', '{', '}', ',', ':', '\x01'])
                       for _ in range(rng.randrange(6)))
    if kind in (7, 8):
        return {rng.choice(["a", "key", "b"]): _random_value(rng, depth + 1) for _ in range(rng.randrange(3))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(3))]


def _random_document(rng: random.Random) -> bytes:
    names = ["key", "value", "ratio", "ok", "at", "Key", "VALUE", "other", "nested"]
    document = {rng.choice(names): _random_value(rng) for _ in range(rng.randrange(6))}
    if rng.random() < 0.5:  # the common shape: each wanted field of its own type
        document.update({"key": f"k{rng.randrange(100)}", "value": rng.randrange(-10**12, 10**12),
                         "ratio": rng.uniform(-1e3, 1e3), "ok": rng.random() < 0.5})
    separators = rng.choice([(",", ":"), (", ", ": "), (" ,\n", " :\t")])
    text = json.dumps(document, ensure_ascii=rng.random() < 0.5, separators=separators)
    raw = text.encode()
    cut = rng.random()
    if cut < 0.1:  # a corruption: a byte dropped, doubled or replaced
        at = rng.randrange(len(raw))
        raw = rng.choice([raw[:at] + raw[at + 1:], raw[:at] + raw[at:at + 1] + raw[at:],
                          raw[:at] + bytes([rng.choice(b'{}[]",:0-.eE \\x')]) + raw[at + 1:]])
    elif cut < 0.15:
        raw = raw + rng.choice([b" ", b"\n", b"x", b"}", b","])
    return raw


@pytest.mark.parametrize("seed", [20261129, 7])
def test_random_documents_decode_as_from_json_decodes_them(spark: Any, seed: int) -> None:
    rng = random.Random(seed)
    values: list[bytes | None] = [_random_document(rng) for _ in range(3000)]
    both = _assert_same(spark, values)
    assert both.filter(F.col("ours.key").isNotNull()).count() > 1000  # the documents hold data


def test_the_decoder_reads_plain_records_itself(spark: Any) -> None:
    """With a fallback that gives null, what the decoder decides itself shows: plain records
    are read without Spark; a record it leaves to Spark comes back from the fallback."""
    schema = spark.createDataFrame([], DDL).schema
    decoder = helper_instance(spark, FLAT_JSON_CLASS)
    nothing = F.lit(None).cast(schema)

    def ours(column: Any) -> Any:
        return Column(decoder.decode(column._jc, nothing._jc, schema.json()))

    values = [b'{"key":"a","value":1,"ratio":2.5,"ok":false}', b' { "value" : -3 , "nested":{"x":[1,"]"]} } ',
              b'{"key":"b","value":"1"}', b'{"key":"\\u00e9"}', b"[1]", '{"k\\u0065y":"ж😀","x":"日"}'.encode(),
              b'{"key":"\\ud83d\\ude00\\ud83d"}', b'{"key":"\xc3"}']
    decided = _frame(spark, values).select("i", ours(F.col("value")).alias("r")).select("i", F.to_json("r").alias("r"))
    _assert_json(spark, decided, ['{"key":"a","value":1,"ratio":2.5,"ok":false}', '{"value":-3}', None,
                                  '{"key":"é"}', None, '{"key":"ж😀"}', '{"key":"😀?"}', None])


#: Wanted keys of real text too: 2, 3 and 4-byte characters; one made of every character a JSON
#: string escapes short (a key that cannot be written without escapes).
TEXT_FIELDS = {"name": "STRING", "url": "STRING", "größe": "STRING", "n": "BIGINT", "x": "DOUBLE", "ok": "BOOLEAN",
               "名前😀": "STRING", "𝄞€": "BIGINT", 'q"\\/\b\f\n\r\t': "DOUBLE"}
TEXT_DDL = ", ".join(f"`{name}` {kind}" for name, kind in TEXT_FIELDS.items())
#: Characters of 1, 2, 3 and 4 bytes in UTF-8 (the last ones a surrogate pair when escaped).
CHARACTERS = ["a", "Z", "0", " ", "-", ".", ":", "?", "&", "é", "ñ", "ß", "Ω", "ж", "ع", "中", "日", "本", "€", "☃",
              "\u2028", "\ufeff", "\ufffd", "😀", "🎉", "𝄞", "👩‍💻", "\U0010ffff"]
SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                 "\t": "\\t"}


def _escaped(rng: random.Random, text: str) -> str:
    """``text`` as a JSON string literal, each character raw or escaped at random (a short escape,
    or \\uXXXX in either case of hex digits: a surrogate pair above U+FFFF)."""
    parts = ['"']
    for char in text:
        if char in SHORT_ESCAPES and (char not in "/" or rng.random() < 0.5):
            parts.append(SHORT_ESCAPES[char] if rng.random() < 0.8 else f"\\u{ord(char):04x}")
        elif ord(char) < 0x20 or rng.random() < 0.2:
            units = char.encode("utf-16-be")
            hex_case = str.upper if rng.random() < 0.5 else str.lower
            parts.extend("\\u" + hex_case(f"{units[k]:02x}{units[k + 1]:02x}") for k in range(0, len(units), 2))
        else:
            parts.append(char)
    parts.append('"')
    return "".join(parts)


def _text(rng: random.Random) -> str:
    pool = CHARACTERS + list(SHORT_ESCAPES) + ["\x00", "\x01", "\x1f"]
    return "".join(rng.choice(pool) for _ in range(rng.randrange(12)))


def _text_document(rng: random.Random, plain: bool) -> bytes:
    """A JSON object of the text fields (each of its type, null or missing), unknown fields of text
    and nested text, in shuffled order, keys and values escaped at random. Not ``plain``: besides,
    a wanted field of a wrong type, a lone surrogate, malformed UTF-8, a key twice or in another case."""
    fields: list[tuple[str, str]] = []
    for name, kind in TEXT_FIELDS.items():
        roll = rng.random()
        if roll < 0.1:
            continue
        if roll < 0.2:
            fields.append((name, "null"))
        elif kind == "STRING":
            fields.append((name, _escaped(rng, _text(rng)) if rng.random() < 0.95 else str(rng.randrange(-999, 999))))
        elif kind == "BIGINT":
            fields.append((name, str(rng.choice([rng.randrange(-10**17, 10**17), 0, -1, 10**18 - 1, 1 - 10**18]))))
        elif kind == "DOUBLE":
            fields.append((name, rng.choice([repr(rng.choice([rng.uniform(-1e6, 1e6), 0.0, -0.0, 1e-300, 2.5, 5e-324,
                                                              1.7976931348623157e308])),
                                             str(rng.randrange(-10**6, 10**6)), "1E5", "-2.5e-3", "0e0", "1e+2",
                                             "-0.0E-0", "1e400", "0.1000000000000000055511151231257827"])))
        else:
            fields.append((name, rng.choice(["true", "false"])))
    for _ in range(rng.randrange(4)):
        inner = json.dumps({_text(rng): [_text(rng), 1, None]}, ensure_ascii=rng.random() < 0.5)
        fields.append((_text(rng), rng.choice([_escaped(rng, _text(rng)), inner, "[]", "-1.5e3", "true"])))
    if not plain:
        name = rng.choice(list(TEXT_FIELDS))
        fields.append(rng.choice([(name, '"x"' if TEXT_FIELDS[name] != "STRING" else "1.5"), (name, '"\\ud83dz"'),
                                  (name, '"a\\udc00"'), (name.upper(), '"y"'), (name, "true"), (name, "-0"),
                                  (name, "12345678901234567890"), (name, "1.0"), (name, '{"a":"é"}')]))
    rng.shuffle(fields)
    separator, colon = rng.choice([(",", ":"), (", ", ": "), (" ,\n", " :\t")])
    raw = ("{" + separator.join(f"{_escaped(rng, key)}{colon}{value}" for key, value in fields) + "}").encode()
    if not plain and rng.random() < 0.3:  # a malformed UTF-8 sequence somewhere inside a string
        at = raw.find(b'"', rng.randrange(len(raw)))
        bad = rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\x80"])
        raw = raw[:at + 1] + bad + raw[at + 1:] if at >= 0 else raw + bad
    return raw


def test_utf8_text_and_escapes_decode_as_from_json_decodes_them_by_repr(spark: Any) -> None:
    """Seeded random documents of real text (2, 3 and 4-byte UTF-8 raw and escaped, every JSON escape
    and surrogate pairs in either case of hex digits, in wanted and unknown keys and in values;
    numbers in their JSON forms, nulls, booleans) decode to rows equal by ``repr`` to
    ``from_json``'s, in one job; the decoder reads every plain document itself (no fallback), and
    the others are compared too."""
    rng = random.Random(20261202)
    plain = [_text_document(rng, plain=True) for _ in range(800)]
    other = [_text_document(rng, plain=False) for _ in range(400)]
    values: list[bytes | None] = [*plain, *other]
    corpus = b"\n".join(plain)  # what the documents hold, so a generator change cannot thin the test silently
    for escape in [*SHORT_ESCAPES.values(), "\\uD83D\\uDE00", "\\ud83d\\ude00", "😀", "𝄞", "中", "é"]:
        assert escape.encode() in corpus, escape
    assert sum(1 for d in plain if b'"q\\"\\\\' in d) > 100  # the wanted key written with its short escapes
    schema = spark.createDataFrame([], TEXT_DDL).schema
    decoder = helper_instance(spark, FLAT_JSON_CLASS)
    nothing = F.lit(None).cast(schema)
    alone = Column(decoder.decode(F.col("value")._jc, nothing._jc, schema.json()))
    rows = _frame(spark, values).select(
        "i", F.from_json(F.col("value").cast("string"), TEXT_DDL).alias("spark"),
        decoded_record(spark, F.col("value"), TEXT_FIELDS).alias("ours"), alone.isNull().alias("fell_back"),
    ).orderBy("i").collect()
    assert [r.i for r in rows] == list(range(len(values)))
    differ = [(values[r.i], r.spark, r.ours) for r in rows if repr(r.spark) != repr(r.ours)]
    assert not differ, f"{len(differ)} records decode otherwise than from_json, e.g. {differ[:3]}"
    fell_back = [r.fell_back for r in rows]
    plain_fallbacks, other_fallbacks = sum(fell_back[:len(plain)]), sum(fell_back[len(plain):])
    print(f"fallback to from_json: {plain_fallbacks} of {len(plain)} plain documents, "
          f"{other_fallbacks} of {len(other)} others")
    assert plain_fallbacks == 0, [values[k] for k in range(len(plain)) if fell_back[k]][:3]
    assert sum(1 for r in rows[:len(plain)] if r.ours.name and not r.ours.name.isascii()) > 100  # real text decoded
    for key in ["名前😀", "𝄞€", 'q"\\/\b\f\n\r\t']:  # the fields of escaped and non-ASCII keys were found
        assert sum(1 for r in rows[:len(plain)] if r.ours[key] is not None) > 300, key


def test_a_field_type_the_decoder_does_not_read_is_refused_naming_it(spark: Any) -> None:
    from barrierflow.errors import SourceError

    with pytest.raises(SourceError, match=r"'at': 'TIMESTAMP'.*STRING, BIGINT, DOUBLE, BOOLEAN \(a timestamp as"):
        decoded_record(spark, F.col("value"), {"key": "STRING", "at": "TIMESTAMP"})
