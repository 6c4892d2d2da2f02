"""Row filters of dumps (``dblog dump --where``): the operator-trusted predicate's shape.

The text goes into every chunk SELECT of the dump as ``AND (<predicate>)``. It comes from an
operator, not an end user, but a typo must not become another statement: here it must be one
expression, with no statement separator and no comment outside its string literals and
quoted names, and with balanced parentheses (so ``AND (...)`` cannot be closed early). The
source then checks it in full: its database plans the chunk query (EXPLAIN) before the dump
is recorded, and the chunks run in read-only transactions.
"""

from __future__ import annotations

from .errors import RequestError

MAX_LENGTH = 4000
_QUOTES = {"'": "'", '"': '"', "`": "`"}


def check_predicate(text: str) -> str:
    """The predicate, stripped; RequestError naming what is wrong with its shape."""
    predicate = (text or "").strip()
    fix = "pass one boolean expression over the table's columns, e.g. --where \"region = 'eu'\"."
    if not predicate:
        raise RequestError("the dump's row filter (--where) is empty.", fix)
    if len(predicate) > MAX_LENGTH:
        raise RequestError(f"the dump's row filter is longer than {MAX_LENGTH} characters.", fix)
    depth, i, n = 0, 0, len(predicate)
    while i < n:
        c = predicate[i]
        if c in _QUOTES:  # a literal or a quoted name: skip to its end
            i = _end_of_quoted(predicate, i)
            if i < 0:
                raise RequestError(f"the dump's row filter has an unterminated {c} quote.", fix)
            continue
        two = predicate[i : i + 2]
        if c == ";":
            raise RequestError("the dump's row filter holds a ';': one expression only, not statements.", fix)
        if two in ("--", "/*", "*/") or c == "#":
            raise RequestError(f"the dump's row filter holds a comment ({two if c != '#' else '#'}).", fix)
        if c == "$" and "$" in predicate[i + 1 :]:  # PostgreSQL dollar quoting could hide anything
            raise RequestError("the dump's row filter holds dollar quoting ($...$).", fix)
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise RequestError("the dump's row filter closes a parenthesis it did not open.", fix)
        i += 1
    if depth:
        raise RequestError("the dump's row filter leaves a parenthesis open.", fix)
    return predicate


def _end_of_quoted(text: str, start: int) -> int:
    """The index after the quoted part opened at ``start``, or -1. A doubled quote escapes
    itself (both databases); a backslash escapes the next character (MySQL's default; on
    PostgreSQL that may end a literal later than the server does, which only refuses more)."""
    q, i, n = text[start], start + 1, len(text)
    while i < n:
        if text[i] == "\\" and q == "'":
            i += 2
        elif text[i] == q:
            if i + 1 < n and text[i + 1] == q:
                i += 2
            else:
                return i + 1
        else:
            i += 1
    return -1
