"""Reading the Prometheus text exposition back in tests: ``{(name, labels): value}``."""

from __future__ import annotations

import re
import urllib.request

_LINE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$')
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    """The samples of ``text`` and each family's ``# TYPE``; raises AssertionError on a malformed line."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        match = _LINE.match(line)
        assert match is not None, f"not an exposition line: {line!r}"
        labels = frozenset((m["key"], m["value"].replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
                           for m in _LABEL.finditer(match["labels"] or ""))
        key = (match["name"], labels)
        assert key not in samples, f"sample repeated: {line!r}"
        samples[key] = float(match["value"])
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample ``name{labels}`` (KeyError naming what exists when it is missing)."""
    key = (name, frozenset(labels.items()))
    if key not in samples:
        raise KeyError(f"{name}{labels} not among {sorted(k[0] for k in samples)}")
    return samples[key]


def scrape(url: str) -> tuple[str, str]:
    """GET ``url``: its body and Content-Type."""
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode(), response.headers["Content-Type"]
