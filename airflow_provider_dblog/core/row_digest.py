"""The row text and hash both sides of ``dblog verify --ranges`` compute (core/range_verify.py):
one rendering per column joined by a separator, NULL as a marker of its own, and the first 60
bits of the text's MD5 as a number. A source computes the same in SQL (postgres_digest.py,
mysql_digest.py), so that a key range is compared by its row count and the sum of its rows'
hashes without moving the rows; 60 bits keep the sum of a range exact in a 64-bit or decimal
SUM."""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

from .events import Row

NULL = "\x1e"  # a NULL column (no rendering produces this character alone)
SEPARATOR = "\x1f"
HEX_DIGITS = 15  # 60 bits of the MD5


def text_hash(text: str) -> int:
    return int(hashlib.md5(text.encode("utf-8")).hexdigest()[:HEX_DIGITS], 16)


def row_hasher(renderers: Sequence[tuple[str, Callable[[Any], str]]]) -> Callable[[Row], int]:
    """A function from a row (canonical values) to its hash, given (column, rendering) pairs
    in the table's column order."""

    def row_hash(row: Row) -> int:
        return text_hash(SEPARATOR.join(NULL if row.get(n) is None else r(row[n]) for n, r in renderers))

    return row_hash
