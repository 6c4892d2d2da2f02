"""Row images as the changelog's JSON text: the one encoding, and a chunk's rows kept in it.

The changelog format is public (docs/changelog-format.md): keys and row images are compact
JSON with UTF-8 kept as is. ``dumps`` is that encoding for every output.

A dumped chunk waits in memory twice (in the watermark window until its HW, then in the
writer's buffer), and a 30-column row is about 2.4 kB as a dict of Python values but 0.8 kB
as its JSON text. For an output that stores images as this text anyway
(``Output.takes_row_text``: the Delta changelog), a chunk's rows are encoded as soon as they
are read: by the source, a few thousand rows at a time (``ChunkTexts``), so that a chunk is
never in memory as dicts all at once; or by the engine (``encode_rows``). ``DumpRows`` gives
any other reader the rows back as dicts (``loads_row``). Issue 13: the peak RSS of a dump of
30-column rows in 50k-row chunks.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from .events import Key, Row, TableSchema

# Rows made into dicts at a time when a source encodes a chunk part by part.
PART_ROWS = 2_000

_LONG_DIGITS = re.compile(rb"\d{19}")


def dumps(value: Any) -> str:
    """The one JSON encoding of keys and row images (public format: keep it stable).

    orjson gives the same compact UTF-8 JSON as ``json.dumps(separators=(",", ":"),
    ensure_ascii=False)`` several times faster; values it refuses (integers beyond 64 bits)
    fall back to the standard library.
    """
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode_rows(rows: list[Any]) -> None:
    """Replace each row of ``rows`` by its ``dumps`` text, in place: each dict is freed as
    soon as its text exists, so the rows are never held in both forms."""
    for i, row in enumerate(rows):
        rows[i] = dumps(row)


def loads(raw: bytes) -> Any:
    """The value a ``dumps`` text (as UTF-8) was made of. orjson reads an integer beyond 64
    bits as a float: a text with 19 digits in a row goes to ``json.loads``, which keeps it
    exact."""
    return json.loads(raw) if _LONG_DIGITS.search(raw) else orjson.loads(raw)


def loads_row(text: str) -> Row:
    """The dict a ``dumps`` text was made of (``loads``)."""
    value = loads(text.encode())
    if not isinstance(value, dict):
        raise ValueError(f"a row text that is not a JSON object: {text[:80]!r}")
    return value


def as_row(image: Row | str | None) -> Row | None:
    """A change's row image as a dict, whichever form the source gave it in (ChangeEvent)."""
    return loads_row(image) if isinstance(image, str) else image


class ChunkTexts:
    """A chunk's keys and row texts, collected part by part as a source reads it."""

    def __init__(self, schema: TableSchema):
        self._schema = schema
        self.keys: list[Key] = []
        self.rows: list[str] = []

    def add(self, part: list[Any]) -> None:
        """Rows in key order, after those added before (``part`` is emptied into texts)."""
        self.keys.extend(self._schema.keys_of(part))
        encode_rows(part)
        self.rows.extend(part)
