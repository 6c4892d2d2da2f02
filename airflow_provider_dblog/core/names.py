"""Table names as DBLog writes and reads them: ``schema.table`` (MySQL/MariaDB:
``database.table``), one spelling everywhere a name is written or parsed — config
``tables``, dump requests, the changelog's ``table`` column, key-column maps, the lake's
mirror paths, ``dblog status``.

A part is written as it is, unless it holds a dot or a double quote: then it is in double
quotes, an inner double quote doubled (SQL's delimited identifiers), so every name reads
back as exactly one (schema, table) pair::

    edge.plain         ("edge", "plain")
    edge."dot.ted"     ("edge", "dot.ted")
    "edge.x".t         ("edge.x", "t")
    s."a""b"           ("s", 'a"b')

Nothing else is quoted or folded: ``Shop.Orders`` names ``Shop`` and ``Orders``.
"""

from __future__ import annotations

from .errors import RequestError

_FIX = (
    "write schema.table (database.table for MySQL); a part holding a dot or a double quote goes in "
    'double quotes, an inner double quote doubled: edge."dot.ted", "my.schema".t, s."a""b" (table a"b).'
)


def quote_part(part: str) -> str:
    """One part of a name as written: quoted only when it holds a dot or a double quote."""
    return '"' + part.replace('"', '""') + '"' if ("." in part or '"' in part) else part


def table_name(schema: str, table: str) -> str:
    """The one spelling of (schema, table); ``split_table`` reads it back."""
    return f"{quote_part(schema)}.{quote_part(table)}"


def split_table(name: str) -> tuple[str, str]:
    """(schema, table) of a name spelt as ``table_name`` writes it; RequestError (cause and
    fix) for anything else: one part only, an empty part, an unclosed or stray quote."""
    parts: list[str] = []
    i, n = 0, len(name)
    while True:
        if i < n and name[i] == '"':
            j, chars = i + 1, []
            while True:
                k = name.find('"', j)
                if k < 0:
                    raise RequestError(f"table name {name!r} has an unclosed double quote.", _FIX)
                chars.append(name[j:k])
                if name[k + 1 : k + 2] == '"':  # a doubled quote: one quote in the name
                    chars.append('"')
                    j = k + 2
                    continue
                break
            part, i = "".join(chars), k + 1
            if i < n and name[i] != ".":
                raise RequestError(f"table name {name!r} has text after a quoted part.", _FIX)
        else:
            k = name.find(".", i)
            k = n if k < 0 else k
            part, i = name[i:k], k
            if '"' in part:
                raise RequestError(f"table name {name!r} has a double quote inside an unquoted part.", _FIX)
        if not part:
            raise RequestError(f"table name {name!r} has an empty part.", _FIX)
        parts.append(part)
        if i >= n:
            break
        i += 1  # the dot
        if i >= n:
            raise RequestError(f"table name {name!r} ends with a dot.", _FIX)
    if len(parts) != 2:
        what = "is not schema-qualified" if len(parts) == 1 else f"has {len(parts)} parts, not 2"
        raise RequestError(f"table name {name!r} {what}.", _FIX)
    return parts[0], parts[1]


def canonical(name: str) -> str:
    """``name`` in the one spelling (a part quoted without need loses its quotes)."""
    return table_name(*split_table(name))
