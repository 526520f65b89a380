"""Nexmark events of our own, deterministic from a seed.

The model is the Nexmark benchmark's (as its reference generator in Apache Beam and Flink's
nexmark define it), written here from its description:

* **Proportions**: of every 50 consecutive events, 1 is a new person, 3 are new auctions and 46
  are bids (event ``n``: ``n % 50 == 0`` a person, ``1..3`` an auction, the rest bids).
* **Ids**: persons and auctions are numbered from 1000 in order of creation; an auction's seller
  and a bid's bidder are persons, a bid's auction an auction, chosen as the benchmark does:
  **hot** with probability ``1 - 1/ratio`` (auctions 2, bidders 4, sellers 4: a hot auction is the
  first of the newest block of 100 auctions, a hot seller the first of the newest block of 100
  persons, a hot bidder the second), otherwise one of the 1,000 newest persons or 100 newest
  auctions (plus a few ids not created yet, as the benchmark allows).
* **Prices**: ``round(10 ** (U * 6) * 100)`` cents for a uniform ``U`` in [0, 1): log-uniform
  between 1 and 1,000,000 (initial bids, reserves over them, bids).
* **Time**: event ``n`` happens at ``base_time + n / rate`` (``rate`` events per second of event
  time, default 10,000 as the benchmark's first event rate); every event carries it in
  ``date_time`` (epoch milliseconds). An auction expires after a random time averaging the time
  100 auctions take to be created.
* **Text**: names, cities, item names and descriptions, in UTF-8 (``ensure_ascii=False``), a
  share of them non-ASCII (names and cities in other scripts, accents, a few emoji); ``extra``
  pads each kind to its average size (person 200, auction 500, bid 100 bytes).

Each event is one flat JSON object: ``event_type`` (0 person, 1 auction, 2 bid) and that kind's
fields only (:data:`PERSON_FIELDS`, :data:`AUCTION_FIELDS`, :data:`BID_FIELDS`); the fields of the
other kinds are absent. Both engines read the same bytes.

Deterministic: the events of each block of :data:`BLOCK` consecutive events are drawn from one
:class:`random.Random` seeded with ``(seed, block)``, in event order, so ``events(n)`` starts
with ``events(m)`` for ``m < n``, and any range of whole blocks can be drawn on its own.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

PERSON, AUCTION, BID = 0, 1, 2
#: Events per cycle, and of them persons and auctions (the rest are bids).
PROPORTION_DENOMINATOR, PERSON_PROPORTION, AUCTION_PROPORTION = 50, 1, 3
FIRST_PERSON_ID, FIRST_AUCTION_ID, FIRST_CATEGORY_ID = 1000, 1000, 10
CATEGORIES = 5
#: Probability 1 - 1/ratio of a hot auction, bidder, seller (the benchmark's defaults).
HOT_AUCTION_RATIO, HOT_BIDDERS_RATIO, HOT_SELLERS_RATIO = 2, 4, 4
#: Hot ids are the first (sellers, auctions) or second (bidders) of the newest block of this many.
HOT_BLOCK = 100
ACTIVE_PEOPLE, IN_FLIGHT_AUCTIONS, ID_LEAD = 1000, 100, 10
AVERAGE_SIZE = {PERSON: 200, AUCTION: 500, BID: 100}
DEFAULT_RATE = 10_000.0
DEFAULT_SEED = 42
BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)

PERSON_FIELDS = ("id", "name", "email_address", "credit_card", "city", "state", "date_time", "extra")
AUCTION_FIELDS = ("id", "item_name", "description", "initial_bid", "reserve", "date_time", "expires", "seller",
                  "category", "extra")
BID_FIELDS = ("auction", "bidder", "price", "channel", "url", "date_time", "extra")

FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Walter",
               "Jürgen", "Zoë", "Łukasz", "François", "Søren", "José", "Дмитрий", "Ελένη", "太郎", "민준"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
              "Müller", "Çelik", "Dupré", "Álvarez", "Иванов", "山田", "Nguyễn"]
CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent",
          "Cheyenne", "München", "Zürich", "São Paulo", "Kraków", "Malmö", "東京", "Москва"]
STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
CHANNELS = ["Google", "Facebook", "百度", "Apple", "Яндекс"]
#: Letters of generated words: mostly ASCII, some accented and other scripts, an emoji.
_LETTERS = "abcdefghijklmnopqrstuvwxyz" * 6 + "éèüößøåçñł" + "дфжλπ東京" + "🎉"
_PAD_TEXT_LENGTH = 1 << 16
#: Events drawn from one seeded random stream (a multiple of :data:`PROPORTION_DENOMINATOR`).
BLOCK = 50_000


_URL_PARTS = ["shop", "items", "deals", "auctions", "market", "lots", "bids", "sale"]
#: Every text the generator writes is made of these lists and letters: nothing to escape in JSON.
_JSON_SAFE = not any(c in '"\\' or ord(c) < 0x20 for text in (*FIRST_NAMES, *LAST_NAMES, *CITIES, *STATES,
                                                             *CHANNELS, *_URL_PARTS, _LETTERS) for c in text)
assert _JSON_SAFE


@dataclass(frozen=True)
class GeneratorConfig:
    """What the events depend on besides their number: ``seed`` and ``rate`` (events per second of
    event time; event ``n`` at ``base_time + n / rate``)."""

    seed: int = DEFAULT_SEED
    rate: float = DEFAULT_RATE
    base_time: datetime = BASE_TIME

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError(f"the Nexmark event rate must be > 0 events/s of event time (got {self.rate})")
        if self.base_time.tzinfo is None:
            raise ValueError("the Nexmark base time must be timezone-aware")

    def timestamp_ms(self, n: int) -> int:
        """Event ``n``'s time, epoch milliseconds."""
        return int(self.base_time.timestamp() * 1000) + int(n * 1000 / self.rate)


def kind(n: int) -> int:
    """The kind of event ``n``: :data:`PERSON`, :data:`AUCTION` or :data:`BID`."""
    offset = n % PROPORTION_DENOMINATOR
    if offset < PERSON_PROPORTION:
        return PERSON
    return AUCTION if offset < PERSON_PROPORTION + AUCTION_PROPORTION else BID


def last_person(n: int) -> int:
    """The newest person id (base 0) at event ``n`` (event ``n``'s own, for a person)."""
    cycle, offset = divmod(n, PROPORTION_DENOMINATOR)
    return cycle * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def last_auction(n: int) -> int:
    """The newest auction id (base 0) at event ``n`` (event ``n``'s own, for an auction; -1 none yet)."""
    cycle, offset = divmod(n, PROPORTION_DENOMINATOR)
    if offset < PERSON_PROPORTION:
        return cycle * AUCTION_PROPORTION - 1
    return cycle * AUCTION_PROPORTION + min(offset - PERSON_PROPORTION, AUCTION_PROPORTION - 1)


class _Draw:
    """The random draws of one event stream (one :class:`random.Random`, in event order)."""

    def __init__(self, config: GeneratorConfig) -> None:
        self.config = config
        self.rng = random.Random(f"nexmark-text:{config.seed}")
        # words and padding are slices of two fixed random texts (fast; a share of them non-ASCII)
        self.words = "".join(self.rng.choices(_LETTERS, k=_PAD_TEXT_LENGTH))
        self.pad = "".join(self.rng.choices("abcdefghijklmnopqrstuvwxyz " * 8 + "éüø語", k=_PAD_TEXT_LENGTH))
        # auctions last 1 + U(0, 2h) ms, h the event time 100 new auctions take
        self.horizon_ms = max(1, int(IN_FLIGHT_AUCTIONS * PROPORTION_DENOMINATOR / AUCTION_PROPORTION
                                     * 1000 / config.rate))

    def price(self) -> int:
        return round(10 ** (self.rng.random() * 6) * 100)

    def block(self, number: int) -> None:
        """Draw block ``number``'s events from here on."""
        self.rng = random.Random(f"nexmark:{self.config.seed}:{number}")

    def word(self, longest: int) -> str:
        length = self.rng.randint(3, longest)
        start = self.rng.randrange(_PAD_TEXT_LENGTH - length)
        return self.words[start:start + length]

    def extra(self, current: int, average: int) -> str:
        """Padding so that the event averages ``average`` bytes (the benchmark's ``extra``)."""
        want = average - current
        if want <= 0:
            return ""
        length = self.rng.randint(want * 4 // 5, want * 6 // 5)
        start = self.rng.randrange(_PAD_TEXT_LENGTH - length)
        return self.pad[start:start + length]

    def person_id(self, n: int) -> int:
        people = last_person(n) + 1
        active = min(people, ACTIVE_PEOPLE)
        return people - active + self.rng.randrange(active + ID_LEAD)

    def auction_id(self, n: int) -> int:
        newest = max(last_auction(n), 0)
        low = max(newest - IN_FLIGHT_AUCTIONS, 0)
        return low + self.rng.randrange(newest - low + 1 + ID_LEAD)


def _person(n: int, ts: int, d: _Draw) -> dict[str, Any]:
    rng = d.rng
    name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    email = f"{d.word(7)}@{d.word(5)}.com"
    card = " ".join(f"{rng.randrange(10000):04d}" for _ in range(4))
    city, state = rng.choice(CITIES), rng.choice(STATES)
    size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
    return {"event_type": PERSON, "id": FIRST_PERSON_ID + last_person(n), "name": name, "email_address": email,
            "credit_card": card, "city": city, "state": state, "date_time": ts,
            "extra": d.extra(size, AVERAGE_SIZE[PERSON])}


def _auction(n: int, ts: int, d: _Draw) -> dict[str, Any]:
    rng = d.rng
    if rng.randrange(HOT_SELLERS_RATIO) > 0:
        seller = (last_person(n) // HOT_BLOCK) * HOT_BLOCK
    else:
        seller = d.person_id(n)
    category = FIRST_CATEGORY_ID + rng.randrange(CATEGORIES)
    initial = d.price()
    expires = ts + 1 + rng.randrange(2 * d.horizon_ms)
    item, description = d.word(20), " ".join(d.word(12) for _ in range(rng.randint(2, 8)))
    reserve = initial + d.price()
    size = 8 + len(item) + len(description) + 40
    return {"event_type": AUCTION, "id": FIRST_AUCTION_ID + last_auction(n), "item_name": item,
            "description": description, "initial_bid": initial, "reserve": reserve, "date_time": ts,
            "expires": expires, "seller": FIRST_PERSON_ID + seller, "category": category,
            "extra": d.extra(size, AVERAGE_SIZE[AUCTION])}


def _bid(n: int, ts: int, d: _Draw) -> dict[str, Any]:
    rng = d.rng
    if rng.randrange(HOT_AUCTION_RATIO) > 0:
        auction = (max(last_auction(n), 0) // HOT_BLOCK) * HOT_BLOCK
    else:
        auction = d.auction_id(n)
    if rng.randrange(HOT_BIDDERS_RATIO) > 0:
        bidder = (last_person(n) // HOT_BLOCK) * HOT_BLOCK + 1
    else:
        bidder = d.person_id(n)
    price = d.price()
    if rng.randrange(HOT_BIDDERS_RATIO) > 0:
        channel = rng.choice(CHANNELS)
    else:
        channel = f"channel-{rng.randrange(10_000)}"
    url = f"https://www.nexmark.com/{rng.choice(_URL_PARTS)}/item.htm?query=1&channel_id={rng.randrange(1 << 20)}"
    return {"event_type": BID, "auction": FIRST_AUCTION_ID + auction, "bidder": FIRST_PERSON_ID + bidder,
            "price": price, "channel": channel, "url": url, "date_time": ts,
            "extra": d.extra(32 + len(channel) + len(url), AVERAGE_SIZE[BID])}


def events(count: int, config: GeneratorConfig | None = None, start: int = 0) -> Iterator[dict[str, Any]]:
    """Events ``0 .. count - 1`` as dicts (module docstring); ``start`` > 0 skips the first ones
    (they are still drawn, so the events are the same)."""
    config = config or GeneratorConfig()
    draw = _Draw(config)
    make = {PERSON: _person, AUCTION: _auction, BID: _bid}
    first_block = start // BLOCK
    for n in range(first_block * BLOCK, count):
        if n % BLOCK == 0:
            draw.block(n // BLOCK)
        event = make[kind(n)](n, config.timestamp_ms(n), draw)
        if n >= start:
            yield event


def encode(event: dict[str, Any]) -> bytes:
    """One event as the topic's record value: compact JSON, UTF-8 text unescaped (what
    ``json.dumps(event, separators=(",", ":"), ensure_ascii=False)`` gives, written directly:
    the generated text never needs escaping, :data:`_JSON_SAFE`)."""
    e = event
    kind_ = e["event_type"]
    if kind_ == BID:
        text = (f'{{"event_type":2,"auction":{e["auction"]},"bidder":{e["bidder"]},"price":{e["price"]},'
                f'"channel":"{e["channel"]}","url":"{e["url"]}","date_time":{e["date_time"]},'
                f'"extra":"{e["extra"]}"}}')
    elif kind_ == AUCTION:
        text = (f'{{"event_type":1,"id":{e["id"]},"item_name":"{e["item_name"]}",'
                f'"description":"{e["description"]}","initial_bid":{e["initial_bid"]},"reserve":{e["reserve"]},'
                f'"date_time":{e["date_time"]},"expires":{e["expires"]},"seller":{e["seller"]},'
                f'"category":{e["category"]},"extra":"{e["extra"]}"}}')
    else:
        text = (f'{{"event_type":0,"id":{e["id"]},"name":"{e["name"]}","email_address":"{e["email_address"]}",'
                f'"credit_card":"{e["credit_card"]}","city":"{e["city"]}","state":"{e["state"]}",'
                f'"date_time":{e["date_time"]},"extra":"{e["extra"]}"}}')
    return text.encode("utf-8")


def values(count: int, config: GeneratorConfig | None = None) -> list[bytes]:
    """The first ``count`` events, encoded (:func:`encode`)."""
    return [encode(e) for e in events(count, config)]
