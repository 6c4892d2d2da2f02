"""Source column type names, parsed and grouped without Spark or a client library: what the
Spark mirror (spark/mirror_types.py) and the Kafka schemas (outputs/connect_schema.py) both
read a column's type by. The families come from every source's descriptor (``mirror_types``)."""

from __future__ import annotations

import functools
import re

from . import descriptors


def base_type(type_name: str) -> tuple[str, list[int], bool]:
    """('numeric', [12, 2], unsigned?) from 'numeric(12,2)'; array types keep their '[]'."""
    t = type_name.strip().lower()
    unsigned = " unsigned" in t
    found = re.search(r"\(([\d,\s]+)\)", t)
    params = [int(p) for p in re.findall(r"\d+", found[1] if found else "")]
    base = re.sub(r"\([^)]*\)", "", t).replace(" unsigned", "").replace(" zerofill", "")
    return re.sub(r"\s+", " ", base).strip(), params, unsigned


@functools.cache
def family(name: str) -> frozenset[str]:
    """The source type names of a mirror type family, from every source's descriptor."""
    return frozenset(t for d in descriptors() for t, fam in d.mirror_types.items() if fam == name)
