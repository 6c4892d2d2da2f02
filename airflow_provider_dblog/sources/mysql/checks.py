"""Start-up validation of the MySQL/MariaDB source (DESIGN invariant 8: clear failure).

Each check raises ConfigurationError naming the setting or privilege and the command that
fixes it, before any capture starts.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import RotateEvent

from ...core.chunks import MYSQL
from ...core.errors import ConfigurationError
from ...core.names import table_name
from . import catalog
from .catalog import ConnectionSettings, Session

_ACCESS_DENIED = (1044, 1045, 1142, 1143, 1227)


class StartupChecks:
    def __init__(self, session: Session, settings: ConnectionSettings, mariadb: bool):
        self.session = session
        self.settings = settings
        self.mariadb = mariadb

    def grantee(self) -> str:
        user, _, host = str(self.session.query("SELECT CURRENT_USER()")[0][0]).rpartition("@")
        return f"'{user}'@'{host}'"

    def binlog_settings(self) -> None:
        v = catalog.global_variables(
            self.session,
            [
                "log_bin",
                "binlog_format",
                "binlog_row_image",
                "binlog_row_metadata",
                "log_bin_compress",
                "binlog_transaction_compression",
                "binlog_row_value_options",
            ],
        )

        if "log_bin" in v and "binlog_format" not in v:
            # Deprecated since MySQL 8.0.34, for removal: a server without it logs rows only.
            v["binlog_format"] = "ROW"

        def need(name: str, want: str, why: str, fix: str) -> None:
            have = v.get(name, "").upper()
            if have != want:
                raise ConfigurationError(
                    f"the server's global {name} is {have or 'unset'}, but DBLog needs {want}: {why}",
                    fix,
                )

        need(
            "log_bin",
            "ON",
            "changes are read from the binary log.",
            "enable the binary log in my.cnf (log_bin=mysql-bin and a server_id) and restart "
            "the server; log_bin cannot be changed at runtime.",
        )
        need(
            "binlog_format",
            "ROW",
            "DBLog reads row images, not SQL statements.",
            "run SET GLOBAL binlog_format=ROW and put binlog_format=ROW in my.cnf so it survives "
            "a restart (connections opened before keep their old format until they reconnect).",
        )
        need(
            "binlog_row_image",
            "FULL",
            "updates and deletes must carry the whole row.",
            "run SET GLOBAL binlog_row_image=FULL and put binlog_row_image=FULL in my.cnf.",
        )
        # Without FULL metadata mysql-replication ignores the column signedness and character
        # sets (unsigned values and binary columns would decode wrongly), so this is an error.
        need(
            "binlog_row_metadata",
            "FULL",
            "the binlog must carry column names, signedness and character sets.",
            "run SET GLOBAL binlog_row_metadata=FULL and put binlog_row_metadata=FULL in my.cnf.",
        )
        if v.get("log_bin_compress", "OFF").upper() == "ON":
            raise ConfigurationError(
                "the server compresses binlog events (log_bin_compress=ON), which the binlog reader cannot decode.",
                "run SET GLOBAL log_bin_compress=OFF and remove it from my.cnf.",
            )
        if v.get("binlog_transaction_compression", "OFF").upper() == "ON":
            raise ConfigurationError(
                "the server compresses binlog transactions (binlog_transaction_compression=ON), "
                "which the binlog reader cannot decode.",
                "run SET GLOBAL binlog_transaction_compression=OFF and remove it from my.cnf.",
            )
        if "PARTIAL_JSON" in v.get("binlog_row_value_options", "").upper():
            raise ConfigurationError(
                "binlog_row_value_options=PARTIAL_JSON logs JSON updates as diffs, not full values.",
                "run SET GLOBAL binlog_row_value_options='' and remove it from my.cnf.",
            )

    def gtid_mode(self) -> None:
        """GTID positions need a GTID on every transaction: always so on MariaDB; MySQL needs
        gtid_mode = ON (a replica that logs what it applies, log_replica_updates, for failover)."""
        if self.mariadb:
            return
        have = catalog.global_variables(self.session, ["gtid_mode"]).get("gtid_mode", "").upper()
        if have != "ON":
            raise ConfigurationError(
                f"use_gtid is set, but the server's gtid_mode is {have or 'unset'}: its transactions have no GTIDs.",
                "turn GTIDs on (gtid_mode = ON, enforce_gtid_consistency = ON) or set use_gtid = false.",
            )

    def _privilege_error(self, what: str) -> ConfigurationError:
        monitor = "BINLOG MONITOR" if self.mariadb else "REPLICATION CLIENT"
        return ConfigurationError(
            f"the user {self.settings.user} lacks a replication privilege: {what}",
            f"as an administrator run: GRANT REPLICATION SLAVE, {monitor} ON *.* TO {self.grantee()};",
        )

    def privileges(self, server_id: int) -> None:
        try:
            file, pos, _, _ = catalog.master_status(self.session)
            catalog.binary_logs(self.session)
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] in _ACCESS_DENIED:
                raise self._privilege_error(f"reading the binlog position was refused ({exc.args[1]}).") from None
            raise
        # REPLICATION SLAVE only shows when asking for the binlog itself: a non-blocking dump
        # from the current end returns at once.
        probe = BinLogStreamReader(
            connection_settings=catalog.library_connection_settings(self.settings),
            server_id=server_id,
            log_file=file,
            log_pos=pos,
            resume_stream=True,
            blocking=False,
            only_events=[RotateEvent],
            enable_logging=False,
            pymysql_wrapper=catalog.library_connect,
        )
        try:
            probe.fetchone()
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] in _ACCESS_DENIED:
                raise self._privilege_error(f"the binlog stream was refused ({exc.args[1]}).") from None
            raise
        finally:
            probe.close()

    def resolve_tables(self, configured: Optional[list[str]], databases: Optional[list[str]], wm_db: str) -> list[str]:
        s, wm_table = self.session, table_name(wm_db, "watermarks")
        if configured is not None:
            tables = list(dict.fromkeys(configured))
            for t in tables:
                catalog.split_table(t)
            existing = set(catalog.base_tables(s, sorted({catalog.split_table(t)[0] for t in tables}), []))
            unknown = [t for t in tables if t not in existing]
            if unknown:
                raise ConfigurationError(
                    f"configured tables do not exist on the source (or are views): {unknown}.",
                    "fix the table list; name tables as database.table, with the exact case.",
                )
        else:
            if databases is not None:
                have = {r[0] for r in s.query("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")}
                missing = [d for d in databases if d not in have]
                if missing:
                    raise ConfigurationError(
                        f"configured databases do not exist on the source: {missing}.",
                        "fix the database list (names are case sensitive on most servers).",
                    )
            tables = catalog.base_tables(s, databases, [wm_db])
        if wm_table in tables:
            raise ConfigurationError(
                f"the watermark table {wm_table} is listed as a captured table.",
                "remove it from the tables, or use another watermark_database.",
            )
        if configured is None:  # DBLog's own database is never captured implicitly
            tables = [t for t in tables if catalog.split_table(t)[0] != wm_db]
        return tables

    def filters(self, tables: list[str], wm_db: Optional[str]) -> None:
        """DESIGN "Filters": a binlog filter must not hide the watermark or captured tables
        (``wm_db`` None: read-only watermarks, no watermark table)."""
        _, _, do_db, ignore_db = catalog.master_status(self.session)
        needed = sorted({catalog.split_table(t)[0] for t in tables} | ({wm_db} if wm_db else set()))
        do = {d.strip() for d in do_db.split(",") if d.strip()}
        ignored = {d.strip() for d in ignore_db.split(",") if d.strip()}
        hidden = [d for d in needed if (do and d not in do) or d in ignored]
        if hidden:
            raise ConfigurationError(
                f"the server's binlog filters (binlog_do_db={sorted(do)}, "
                f"binlog_ignore_db={sorted(ignored)}) keep databases {hidden} out of the binlog, "
                "so their changes (and DBLog's watermarks) would never be seen.",
                f"remove those binlog_do_db / binlog_ignore_db lines from my.cnf (or add "
                f"binlog_do_db lines for {hidden}) and restart the server.",
            )

    def snapshot_position(self) -> None:
        """Read-only watermarks need the binlog position of a consistent snapshot, which only
        MariaDB gives (mysql/log_markers.py)."""
        if not self.mariadb:
            raise ConfigurationError(
                'watermarks = "log" (read-only dumps) needs MariaDB: MySQL gives no binlog position '
                "that matches a consistent snapshot (binlog_snapshot_position), and the executed GTID "
                "set read around a chunk's SELECT can hold a transaction InnoDB has not committed yet.",
                'use watermarks = "table" on MySQL, with INSERT and UPDATE on the watermark table (docs/sources.md).',
            )
        catalog.snapshot_position(self.session)

    def watermark_row(self, wm_db: str, source_id: str) -> None:
        db, wm_table = MYSQL.quote(wm_db), f"{wm_db}.watermarks"
        try:
            if not self.session.query(
                "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'watermarks'",
                [wm_db],
            ):
                self.session.run(f"CREATE DATABASE IF NOT EXISTS {db}")
                self.session.run(
                    f"CREATE TABLE IF NOT EXISTS {db}.`watermarks` ("
                    "source_id varchar(255) NOT NULL PRIMARY KEY, value varchar(64) NOT NULL, "
                    "updated_at timestamp(6) NULL DEFAULT NULL) ENGINE=InnoDB"
                )
            self.session.run(
                f"INSERT IGNORE INTO {db}.`watermarks` (source_id, value, updated_at) VALUES (%s, '', NOW(6))",
                [source_id],
            )
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] in _ACCESS_DENIED:
                raise ConfigurationError(
                    f"the user {self.settings.user} cannot create or write the watermark table "
                    f"{wm_table} ({exc.args[1]}).",
                    f"run: GRANT CREATE, SELECT, INSERT, UPDATE ON {db}.* TO {self.grantee()}; "
                    "or create the table in advance.",
                ) from None
            raise

    def readable_all(self, tables: Sequence[str], batch: int = 200) -> None:
        """``readable`` for every table, ``batch`` tables per statement (a UNION of ``LIMIT 0``
        SELECTs: a start must not cost a query per table); a refused batch is checked table by
        table, so that the error names the table and its GRANT."""
        for at in range(0, len(tables), batch):
            part = tables[at : at + batch]
            try:
                self.session.query(" UNION ALL ".join(f"(SELECT 1 FROM {MYSQL.table(t)} LIMIT 0)" for t in part))
            except pymysql.err.MySQLError as exc:
                if not (exc.args and exc.args[0] in _ACCESS_DENIED):
                    raise
                for table in part:
                    self.readable(table)
                raise  # refused, yet every table alone is readable: say what the server said

    def readable(self, table: str) -> None:
        try:
            self.session.query(f"SELECT 1 FROM {MYSQL.table(table)} LIMIT 0")
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] in _ACCESS_DENIED:
                raise ConfigurationError(
                    f"the user {self.settings.user} cannot SELECT from {table} ({exc.args[1]}).",
                    f"run: GRANT SELECT ON {MYSQL.table(table)} TO {self.grantee()};",
                ) from None
            raise
