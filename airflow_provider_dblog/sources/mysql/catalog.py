"""Connections and catalog queries for the MySQL/MariaDB source.

Every connection DBLog opens for chunk SELECTs, watermark writes and catalog reads is
autocommit with READ COMMITTED and session time zone UTC: each statement then sees
everything committed before it (DESIGN "Non-stale read") and TIMESTAMPs come back in UTC,
as the binlog carries them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import re
import ssl
import threading
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar

import pymysql

from ...core import names
from ...core.errors import ConfigurationError, DBLogError, RequestError, SourceUnavailable
from ...core.events import Column, TableSchema
from ..tls import TLSSettings, tls_error_fix
from .select_native import query_packets

# Connection lost / server gone away: safe to reconnect and retry a read or an idempotent write.
_LOST = (2006, 2013, 2055)
# ER_PARSE_ERROR: a statement the server does not know (MySQL 8.4 removed SHOW MASTER STATUS
# and SHOW SLAVE STATUS; MySQL before 8.2 and MariaDB lack the new spellings). Only this error
# sends a query to its other spelling: access denied and the rest are the caller's to see.
_PARSE_ERROR = 1064
log = logging.getLogger(__name__)
SYSTEM_DATABASES = ("mysql", "information_schema", "performance_schema", "sys")


@dataclasses.dataclass(frozen=True)
class ConnectionSettings:
    host: str
    port: int
    user: str
    password: str = dataclasses.field(repr=False)  # never printed
    connect_timeout: float = 10
    tls: TLSSettings = dataclasses.field(default_factory=TLSSettings)

    def pymysql_kwargs(self) -> dict:
        return {
            "host": self.host,
            "port": int(self.port),
            "user": self.user,
            "password": self.password,
            "connect_timeout": self.connect_timeout,
            "charset": "utf8mb4",
            **self._tls_kwargs(),
        }

    def _tls_kwargs(self) -> dict:
        # One SSLContext per settings object (building it loads the CA and the client key).
        cached = self.__dict__.get("_tls_cache")
        if cached is None:
            cached = self.tls.pymysql()
            object.__setattr__(self, "_tls_cache", cached)
        return cached

    def where(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


def library_connection_settings(settings: ConnectionSettings, **extra: Any) -> dict:
    """connection_settings for mysql-replication's BinLogStreamReader (a fresh dict: it
    mutates it)."""
    return {**settings.pymysql_kwargs(), **extra}


class _Connection(pymysql.connections.Connection):
    """PyMySQL's connection, with the TLS context of its PREFERRED mode (no TLS settings:
    TLS when the server offers it, unverified) made once per process instead of once per
    connection: making it loads the system's CA bundle (about 0.3 s here), which an
    unverified context never reads. A new leader opens several connections before its first
    row (issue 39 part 6), and parallel chunk readers one each."""

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if isinstance(sslp, dict) and not sslp:
            return _preferred_context()
        context: ssl.SSLContext = super()._create_ssl_ctx(sslp)
        return context


@functools.cache
def _preferred_context() -> ssl.SSLContext:
    context: ssl.SSLContext = pymysql.connections.Connection._create_ssl_ctx(None, {})
    return context


def _open(**kwargs: Any) -> pymysql.connections.Connection:
    """A logged-in connection. caching_sha2_password (MySQL 8.4's default plugin; 9.0 has no
    mysql_native_password) logs in by a hash while the server has the account cached; after
    a restart or FLUSH PRIVILEGES it wants the password itself, which without TLS PyMySQL
    encrypts with the server's RSA key, and that takes the ``cryptography`` package."""
    try:
        return _Connection(**kwargs)
    except RuntimeError as exc:
        if "cryptography" not in str(exc):
            raise
        where = f"{kwargs.get('user')}@{kwargs.get('host')}:{kwargs.get('port')}"
        raise ConfigurationError(
            f"MySQL asked {where} for a full caching_sha2_password login (MySQL 8.4's default "
            "authentication), which over a connection without TLS sends the password encrypted "
            "with the server's RSA key, and the Python package 'cryptography' is not installed.",
            "install it (pip install 'PyMySQL[rsa]'), or connect with TLS (sslmode = 'require' "
            "or stricter), which carries the password without RSA.",
        ) from None


def library_connect(**kwargs: Any) -> pymysql.connections.Connection:
    """pymysql.connect for mysql-replication, which still passes the deprecated ``db``: the
    binlog stream and its control connection log in as ``connect`` does."""
    if "db" in kwargs:
        kwargs["database"] = kwargs.pop("db")
    return _open(**kwargs)


def connect(settings: ConnectionSettings) -> pymysql.connections.Connection:
    try:
        conn = _open(autocommit=True, **settings.pymysql_kwargs())
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else None
        tls_fix = tls_error_fix(str(exc), settings.tls)
        if code == 1045:
            raise ConfigurationError(
                f"MySQL refused the login of {settings.where()} (access denied).",
                tls_fix or "check the user name and password of the connection.",
            ) from None
        if tls_fix is not None:  # a TLS handshake that cannot succeed: retrying will not help
            raise ConfigurationError(
                f"cannot connect to MySQL at {settings.where()}: {exc.args[-1]}.", tls_fix
            ) from None
        # Not a login problem: the server may be down or restarting, and the engine retries.
        raise SourceUnavailable(
            f"cannot connect to MySQL at {settings.host}:{settings.port} "
            f"(error {code}: {exc.args[1] if len(exc.args) > 1 else exc}).",
            "check that the server is running and the host and port are right.",
        ) from None
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        # Works on MySQL and MariaDB alike (their variable names differ:
        # transaction_isolation vs tx_isolation).
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn


_T = TypeVar("_T")


def snapshot_position(session: "Session") -> tuple[str, int]:
    """(binlog file, position) of a consistent snapshot taken now (MariaDB's
    binlog_snapshot_file / binlog_snapshot_position): every transaction before it is
    committed in InnoDB, none after it is (read-only watermarks, mysql/log_markers.py)."""

    def read(conn: pymysql.connections.Connection) -> tuple[str, int]:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            try:
                cur.execute("SHOW SESSION STATUS LIKE 'binlog\\_snapshot\\_%'")
                values = {str(k).lower(): v for k, v in cur.fetchall()}
            finally:
                conn.rollback()
        return str(values["binlog_snapshot_file"]), int(values["binlog_snapshot_position"])

    return session.read(read)


class Session:
    """One PyMySQL connection with reconnect-and-retry on connection loss. One thread each."""

    def __init__(self, settings: ConnectionSettings, marker: Optional[str] = None):
        self.settings = settings
        # A leader's session: each connection holds the named lock marker + its id, by which
        # the next leader ends it (sources/mysql/leader_sessions.py).
        self.marker = marker
        self._conn: Optional[pymysql.connections.Connection] = None
        self.lock = threading.RLock()

    def conn(self) -> pymysql.connections.Connection:
        if self._conn is None:
            conn = connect(self.settings)
            if self.marker is not None:
                with conn.cursor() as cur:
                    cur.execute("SELECT GET_LOCK(CONCAT(%s, CONNECTION_ID()), 0)", [self.marker])
            self._conn = conn
        return self._conn

    def _retried(self, work: Callable[[pymysql.connections.Connection], _T]) -> _T:
        """``work(connection)``, once more on a new connection if the connection was lost."""
        with self.lock:
            for attempt in (0, 1):
                try:
                    return work(self.conn())
                except pymysql.err.OperationalError as exc:
                    if attempt or not exc.args or exc.args[0] not in _LOST:
                        raise
                    self.close()
            raise AssertionError("unreachable")

    def run(self, sql: str, params: Sequence[Any] | None = None) -> tuple[list[tuple], int]:
        """Execute one statement; (rows, rowcount). Retried once on a lost connection."""

        def execute(conn: pymysql.connections.Connection) -> tuple[list[tuple], int]:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall()), cur.rowcount

        return self._retried(execute)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        return self.run(sql, params)[0]

    def query_packets(self, sql: str, params: Sequence[Any] | None = None) -> tuple[Any, str]:
        """Like ``query``, with the rows left as the packets' payloads (mysql_select_native):
        (the result, the connection's encoding). Retried once on a lost connection."""
        return self._retried(lambda conn: (query_packets(conn, sql, params), conn.encoding))

    def read(self, work: Callable[[pymysql.connections.Connection], _T]) -> _T:
        """``work(connection)`` for a statement it runs itself (mysql_select_native.query_texts).
        Retried once on a lost connection."""
        return self._retried(work)

    def read_only_query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
        """One statement in a READ ONLY transaction (a filtered dump's operator-given SQL),
        on one connection and never retried: a retry on a new connection would run outside
        the transaction. A lost connection is raised (the engine reconnects and selects again)."""
        with self.lock:
            conn = self.conn()
            with conn.cursor() as cur:
                cur.execute("START TRANSACTION READ ONLY")
                try:
                    cur.execute(sql, params)
                    return list(cur.fetchall())
                finally:
                    try:
                        conn.rollback()  # nothing was written; also ends a failed transaction
                    except pymysql.err.Error as gone:
                        log.debug("ending the read-only transaction: %s", gone)
                        self.close()

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except pymysql.err.Error as gone:  # the server closed it first
                log.debug("closing the catalog session: %s", gone)
            self._conn = None


def is_mariadb(session: Session) -> bool:
    return "mariadb" in session.conn().get_server_info().lower()


def global_variables(session: Session, names: Sequence[str]) -> dict[str, str]:
    marks = ", ".join(["%s"] * len(names))
    rows = session.query(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", list(names))
    return {str(k).lower(): str(v) for k, v in rows}


def _unknown_statement(exc: pymysql.err.MySQLError) -> bool:
    return bool(exc.args) and exc.args[0] == _PARSE_ERROR


def master_status(session: Session) -> tuple:
    """(file, position, do_db, ignore_db) of the server's current binlog."""
    try:
        rows = session.query("SHOW BINARY LOG STATUS")  # MySQL 8.2+; 8.4 removed SHOW MASTER STATUS
    except pymysql.err.MySQLError as exc:
        if not _unknown_statement(exc):  # e.g. 1227: REPLICATION CLIENT missing
            raise
        rows = session.query("SHOW MASTER STATUS")  # MySQL before 8.2, MariaDB
    if not rows:
        raise ConfigurationError(
            "the server's binary log is off (SHOW BINARY LOG STATUS, before MySQL 8.2 SHOW MASTER "
            "STATUS, returns nothing).",
            "enable it: set log_bin (e.g. log_bin=mysql-bin) and server_id in my.cnf, then restart.",
        )
    r = rows[0]
    return r[0], int(r[1]), r[2] or "", r[3] or ""


def replica_lag(session: Session) -> Optional[float]:
    """A replica's Seconds_Behind_Master (MySQL 8.0.22+: Seconds_Behind_Source); None when it
    is not replicating (not a replica, or a stopped thread)."""
    with session.lock, session.conn().cursor(pymysql.cursors.DictCursor) as cur:
        try:
            cur.execute("SHOW REPLICA STATUS")  # MySQL 8.0.22+ (8.4: the only one), MariaDB 10.5.1+
        except pymysql.err.MySQLError as exc:
            if not _unknown_statement(exc):
                raise
            cur.execute("SHOW SLAVE STATUS")
        status = cur.fetchone()
    if not status:
        return None
    lag = status.get("Seconds_Behind_Master", status.get("Seconds_Behind_Source"))
    return float(lag) if lag is not None else None


def binary_logs(session: Session) -> list[tuple[str, int]]:
    return [(r[0], int(r[1])) for r in session.query("SHOW BINARY LOGS")]


def split_table(table: str) -> tuple[str, str]:
    """(database, table) of a name in DBLog's spelling (core/names.py)."""
    return names.split_table(table)


def base_tables(session: Session, databases: Optional[Sequence[str]], exclude: Sequence[str]) -> list[str]:
    """Every base table of these databases (None: all but system and ``exclude``)."""
    sql = "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE'"
    params: list[Any] = []
    if databases is not None:
        sql += f" AND TABLE_SCHEMA IN ({', '.join(['%s'] * len(databases))})"
        params += list(databases)
    else:
        skip = list(SYSTEM_DATABASES) + list(exclude)
        sql += f" AND TABLE_SCHEMA NOT IN ({', '.join(['%s'] * len(skip))})"
        params += skip
    rows = session.query(sql + " ORDER BY TABLE_SCHEMA, TABLE_NAME", params)
    return [names.table_name(db, name) for db, name in rows]


_JSON_CHECK = re.compile(r"^json_valid\(`((?:[^`]|``)+)`\)$", re.IGNORECASE)


def _mariadb_json_columns(session: Session, db: str, name: str) -> set[str]:
    """MariaDB's JSON is LONGTEXT plus a json_valid() CHECK constraint named after the column."""
    try:
        rows = session.query(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
            [db, name],
        )
    except pymysql.err.OperationalError:  # MySQL's CHECK_CONSTRAINTS has no TABLE_NAME
        return set()
    return {col for (clause,) in rows if (col := _json_column(clause)) is not None}


def _json_column(clause: Any) -> Optional[str]:
    """The column a ``json_valid(`col`)`` CHECK clause guards, else None."""
    m = _JSON_CHECK.match(str(clause).strip())
    return m.group(1).replace("``", "`") if m else None


def _type_text(column_type: str) -> str:
    """Lower-case the type, but not the quoted ENUM/SET labels."""
    head, paren, rest = column_type.partition("(")
    if head.strip().lower() in ("enum", "set"):
        return head.lower() + paren + rest
    return column_type.lower()


def fingerprints(session: Session, tables: Sequence[str], mariadb: bool) -> dict[str, str]:
    """A digest per table of what ``read_table_schema`` reads of it (its columns' names, types,
    nullability, the primary key's columns in order, MariaDB's json_valid checks), from one
    query over the tables' databases (two on MariaDB); tables that do not exist are left out."""
    wanted = {split_table(t): t for t in tables}
    dbs = sorted({db for db, _ in wanted})
    if not dbs:
        return {}
    marks = ",".join(["%s"] * len(dbs))
    parts: dict[str, list[str]] = {}
    for db, name, *col in session.query(
        "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION, c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE, "
        "c.DATA_TYPE, k.ORDINAL_POSITION FROM information_schema.COLUMNS c JOIN information_schema.TABLES t "
        "ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME AND t.TABLE_TYPE = 'BASE TABLE' "
        "LEFT JOIN information_schema.KEY_COLUMN_USAGE k ON k.TABLE_SCHEMA = c.TABLE_SCHEMA "
        "AND k.TABLE_NAME = c.TABLE_NAME AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY' "
        f"WHERE c.TABLE_SCHEMA IN ({marks})",
        dbs,
    ):
        table = wanted.get((str(db), str(name)))
        if table is not None:
            parts.setdefault(table, []).append(":".join(map(str, col)))
    if mariadb and parts:
        for db, name, clause in _mariadb_checks(session, dbs):
            table = wanted.get((str(db), str(name)))
            if table in parts:
                parts[table].append(f"check:{clause}")
    return {t: hashlib.md5("|".join(sorted(p)).encode(), usedforsecurity=False).hexdigest() for t, p in parts.items()}


COLUMNS_SQL = (
    "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, c.IS_NULLABLE, c.DATA_TYPE "
    "FROM information_schema.COLUMNS c JOIN information_schema.TABLES t "
    "ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME "
    "WHERE {where} AND t.TABLE_TYPE = 'BASE TABLE' "
    "ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION"
)
PRIMARY_KEYS_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
    "WHERE {where} AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION"
)


def read_table_schema(session: Session, table: str, key_columns: Optional[Sequence[str]], mariadb: bool) -> TableSchema:
    db, name = split_table(table)
    where = "c.TABLE_SCHEMA = %s AND c.TABLE_NAME = %s"
    rows = [r[2:] for r in session.query(COLUMNS_SQL.format(where=where), [db, name])]
    json_cols = _mariadb_json_columns(session, db, name) if mariadb else set()
    pk_where = "TABLE_SCHEMA = %s AND TABLE_NAME = %s"
    pk = [r[2] for r in session.query(PRIMARY_KEYS_SQL.format(where=pk_where), [db, name])]
    return _table_schema(table, rows, json_cols, pk, key_columns)


def read_table_schemas(
    session: Session, tables: Sequence[str], key_columns: Mapping[str, Sequence[str]], mariadb: bool
) -> dict[str, TableSchema | DBLogError]:
    """``read_table_schema`` of many tables in three queries over their databases, not three
    per table (a source of a thousand tables opens in a second, not in half a minute); for a
    table it would fail on, the error."""
    wanted = {split_table(t): t for t in tables}
    dbs = sorted({db for db, _ in wanted})
    if not dbs:
        return {}
    marks = ",".join(["%s"] * len(dbs))
    columns: dict[str, list[tuple]] = {t: [] for t in tables}
    for db, name, *col in session.query(COLUMNS_SQL.format(where=f"c.TABLE_SCHEMA IN ({marks})"), dbs):
        table = wanted.get((str(db), str(name)))
        if table is not None:
            columns[table].append(tuple(col))
    pks: dict[str, list[str]] = {t: [] for t in tables}
    for db, name, col in session.query(PRIMARY_KEYS_SQL.format(where=f"TABLE_SCHEMA IN ({marks})"), dbs):
        table = wanted.get((str(db), str(name)))
        if table is not None:
            pks[table].append(str(col))
    json_cols: dict[str, set[str]] = {t: set() for t in tables}
    if mariadb:
        for db, name, clause in _mariadb_checks(session, dbs):
            table, json_col = wanted.get((str(db), str(name))), _json_column(clause)
            if table is not None and json_col is not None:
                json_cols[table].add(json_col)
    out: dict[str, TableSchema | DBLogError] = {}
    for t in tables:
        try:
            if columns[t]:
                out[t] = _table_schema(t, columns[t], json_cols[t], pks[t], key_columns.get(t))
            else:  # not matched by name (a server that folds names' case): read alone
                out[t] = read_table_schema(session, t, key_columns.get(t), mariadb)
        except SourceUnavailable:
            raise
        except DBLogError as exc:
            out[t] = exc
    return out


def _mariadb_checks(session: Session, dbs: Sequence[str]) -> list[tuple]:
    """(database, table, clause) of the CHECK constraints in ``dbs``."""
    try:
        return session.query(
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
            f"WHERE CONSTRAINT_SCHEMA IN ({','.join(['%s'] * len(dbs))})",
            list(dbs),
        )
    except pymysql.err.OperationalError:  # as in _mariadb_json_columns
        return []


def _table_schema(
    table: str, rows: Sequence[tuple], json_cols: set[str], pk: list[str], key_columns: Optional[Sequence[str]]
) -> TableSchema:
    """The schema from the catalog's rows of one table: (name, COLUMN_TYPE, IS_NULLABLE,
    DATA_TYPE) per column in order, its JSON columns (MariaDB) and its primary key."""
    if not rows:
        raise RequestError(
            f"table {table} does not exist on the source (or is a view).",
            "check the database.table name (names are case sensitive on most servers) "
            "and that the source's user can see it.",
        )
    columns = []
    for col, col_type, nullable, data_type in rows:
        text = _type_text(str(col_type))
        if col in json_cols and str(data_type).lower() == "longtext":
            text = "json"
        columns.append(Column(str(col), text, str(nullable).upper() == "YES"))
    if not pk:
        if not key_columns:
            raise ConfigurationError(
                f"table {table} has no primary key, so DBLog cannot chunk it for dumps nor "
                "tell its rows apart in the change log.",
                f"add a primary key (ALTER TABLE {table} ADD PRIMARY KEY (...)), or pass "
                f"key_columns={{'{table}': ['col', ...]}} naming the columns of a unique, "
                "NOT NULL key of the table.",
            )
        names = {c.name for c in columns}
        missing = [k for k in key_columns if k not in names]
        if missing:
            raise ConfigurationError(
                f"key_columns for {table} name columns that do not exist: {missing}.",
                f"use columns of the table: {sorted(names)}.",
            )
        pk = list(key_columns)
    return TableSchema(table, tuple(columns), tuple(pk))


def _binlog_type(col: Any) -> str:
    """A catalog-like type name from a binlog table-map column (mysql-replication Column)."""
    from pymysqlreplication.constants import FIELD_TYPE as F

    binary = getattr(col, "character_set_name", None) == "binary"
    unsigned = " unsigned" if getattr(col, "unsigned", False) else ""
    names = {
        F.TINY: "tinyint",
        F.SHORT: "smallint",
        F.INT24: "mediumint",
        F.LONG: "int",
        F.LONGLONG: "bigint",
        F.FLOAT: "float",
        F.DOUBLE: "double",
        F.YEAR: "year",
        F.DATE: "date",
        F.NEWDATE: "date",
        F.BIT: "bit",
        F.JSON: "json",
        F.DATETIME: "datetime",
        F.DATETIME2: "datetime",
        F.TIMESTAMP: "timestamp",
        F.TIMESTAMP2: "timestamp",
        F.TIME: "time",
        F.TIME2: "time",
    }
    t = col.type
    if t in names:
        return names[t] + (unsigned if t in (F.TINY, F.SHORT, F.INT24, F.LONG, F.LONGLONG) else "")
    if t == F.NEWDECIMAL:
        return f"decimal({col.precision},{col.decimals}){unsigned}"
    if t in (F.ENUM, F.SET):
        labels = (col.enum_values or [""])[1:] if t == F.ENUM else (col.set_values or [])
        quoted = ",".join("'" + v.replace("'", "''") + "'" for v in labels)
        return f"{'enum' if t == F.ENUM else 'set'}({quoted})"
    if t == F.STRING:
        return f"binary({col.max_length})" if binary else f"char({col.max_length})"
    if t in (F.VARCHAR, F.VAR_STRING):
        return "varbinary" if binary else "varchar"
    if t in (F.BLOB, F.TINY_BLOB, F.MEDIUM_BLOB, F.LONG_BLOB):
        return "blob" if binary else "text"
    return "unknown"


def schema_from_table_map(table: str, columns: Sequence[Any], catalog: Optional[TableSchema]) -> TableSchema:
    """The schema of rows written before a later ALTER/DROP TABLE (read again after a
    restart): names from the binlog's table map (binlog_row_metadata=FULL), types from the
    catalog where the column still exists, otherwise from the table map."""
    known = {c.name: c for c in catalog.columns} if catalog else {}
    cols = tuple(known.get(c.name) or Column(c.name, _binlog_type(c), True) for c in columns)
    names = [c.name for c in cols]
    key: list[str] = list(catalog.key) if catalog and all(k in names for k in catalog.key) else []
    if not key:
        key = [c.name for c in columns if getattr(c, "is_primary", False)]
    if not key:
        raise ConfigurationError(
            f"binlog rows of {table} were written with columns {names}, which have no key "
            "DBLog can identify (the table changed or was dropped since).",
            "restart the capture from the current end of the log and run a full dump of "
            "the table (`dblog capture --reset-position`, `dblog dump --table ...`).",
        )
    return TableSchema(table, cols, tuple(key))
