"""The Source contract (tests/contract/source_contract.py) against the in-memory source the
engine's unit tests use (tests/unit/memory_capture.py): the fake behaves like the real ones."""

from __future__ import annotations

from typing import Sequence

import pytest

from airflow_provider_dblog.core.events import Column, TableSchema
from tests.contract.source_contract import ITEMS, PAIRS, Change, SourceContract, SourceHarness

from .memory_capture import MemoryDatabase, MemorySource

SHAPES = {
    ITEMS: ((Column("id", "integer", False), Column("v", "text")), ("id",)),
    PAIRS: (
        (Column("region", "varchar(8)", False), Column("n", "integer", False), Column("v", "text")),
        ("region", "n"),
    ),
}


class MemoryHarness(SourceHarness):
    missing_table = "app.no_such_table"
    bad_filter = "v == == 1"  # the fake's filters are Python expressions

    def __init__(self) -> None:
        self.db = MemoryDatabase(())
        self.sources: list[MemorySource] = []

    def create_table(self, name: str, shape: str) -> str:
        columns, key = SHAPES[shape]
        self.db.create(TableSchema(f"app.{name}", columns, key))
        return f"app.{name}"

    def write(self, table: str, *changes: Change) -> None:
        schema = self.db.schemas[table]
        with self.db.transaction():
            for kind, *args in changes:
                if kind == "insert":
                    self.db.upsert(table, args[0])
                elif kind == "update":
                    self.db.update(table, schema.key_of(args[0]), args[1])
                else:
                    self.db.delete(table, schema.key_of(args[0]))

    def drop_table(self, table: str) -> None:
        self.db.drop(table)

    def equals(self, column: str, value: str) -> str:
        return f"{column} == {value!r}"

    def source(self, tables: Sequence[str]) -> MemorySource:
        assert set(tables) == set(self.db.schemas)  # the fake captures every table it has
        src = MemorySource(self.db)
        src.open()
        self.sources.append(src)
        return src


class TestMemorySourceContract(SourceContract):
    @pytest.fixture
    def harness(self):
        h = MemoryHarness()
        yield h
        for s in h.sources:
            s.close()
