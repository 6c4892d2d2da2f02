"""core/names.py: the one spelling of table names, read back exactly."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.core.errors import RequestError
from airflow_provider_dblog.core.names import canonical, split_table, table_name


@pytest.mark.parametrize(
    "parts,name",
    [
        (("edge", "plain"), "edge.plain"),
        (("edge", "dot.ted"), 'edge."dot.ted"'),
        (("edge.dot", "ted"), '"edge.dot".ted'),
        (("s", 'a"b'), 's."a""b"'),
        (("my schema", "Orders"), "my schema.Orders"),  # nothing else quoted or folded
        (("a.b", "c.d"), '"a.b"."c.d"'),
    ],
)
def test_every_pair_has_one_spelling_that_reads_back(parts, name):
    assert table_name(*parts) == name
    assert split_table(name) == parts


def test_dotted_names_no_longer_collide():
    assert table_name("edge", "dot.ted") != table_name("edge.dot", "ted")


def test_needless_quotes_are_dropped():
    assert canonical('"edge"."plain"') == "edge.plain"
    assert canonical('edge."dot.ted"') == 'edge."dot.ted"'


@pytest.mark.parametrize(
    "name,cause",
    [
        ("edge", "not schema-qualified"),
        ("edge.dot.ted", "3 parts"),
        ("edge.", "ends with a dot"),
        (".t", "empty part"),
        ('s.""', "empty part"),
        ('s."dot.ted', "unclosed double quote"),
        ('s.a"b', "double quote inside an unquoted part"),
        ('"s"x.t', "text after a quoted part"),
    ],
)
def test_malformed_names_are_refused_with_the_spelling(name, cause):
    with pytest.raises(RequestError, match=cause) as info:
        split_table(name)
    assert 'edge."dot.ted"' in info.value.fix
