"""The source registry (sources/__init__.py): one descriptor per database, and what the
config, the hook, the Kafka output and the Spark jobs read from it."""

from __future__ import annotations

import pytest

from airflow_provider_dblog import sources
from airflow_provider_dblog.config_keys import KEYS
from airflow_provider_dblog.core import chunks, key_types
from airflow_provider_dblog.outputs.kafka_format import CONNECTORS


def test_every_spelling_of_a_type_finds_its_descriptor():
    assert [d.kind for d in sources.descriptors()] == ["postgres", "mysql"]
    for name, kind in (("postgres", "postgres"), ("PostgreSQL", "postgres"), ("pg", "postgres"), ("MariaDB", "mysql")):
        assert sources.descriptor(name).kind == kind
    assert sources.descriptor("oracle") is None
    assert sources.for_connection("mariadb").kind == "mysql"
    assert sources.for_connection("generic") is None


def test_descriptors_name_the_core_side_objects():
    pg, my = sources.descriptor("postgres"), sources.descriptor("mysql")
    assert (pg.dialect, my.dialect) == (chunks.POSTGRES, chunks.MYSQL)
    assert (pg.key_types, my.key_types) == (key_types.POSTGRES_KEY_TYPES, key_types.MYSQL_KEY_TYPES)
    assert CONNECTORS == ("postgresql", "mysql")


def test_each_databases_config_keys_are_source_keys():
    for d in sources.descriptors():
        assert set(d.config_keys) <= set(KEYS["source"])
    assert KEYS["source"]["type"].accepts("mariadb") and not KEYS["source"]["type"].accepts("oracle")


def test_mirror_types_of_two_databases_never_disagree():
    seen: dict[str, str] = {}
    for d in sources.descriptors():
        for name, family in d.mirror_types.items():
            assert seen.setdefault(name, family) == family, name


@pytest.mark.parametrize(
    "position, transaction",
    [
        ("00000001A2B3C5F00000000002.000000000", "00000001A2B3C5F0"),
        ("000001" + "000000000120" + "000000000150" + "000003.000000001", "000001000000000120"),
        ("g01" + "0" * 19 + "7" + "0" * 9 + "4/abc:5.000000000", "g01" + "0" * 19 + "7"),
        ("12345.0", None),
    ],
)
def test_the_transaction_of_a_position_is_found_by_its_source(position, transaction):
    assert sources.transaction_of(position) == transaction
