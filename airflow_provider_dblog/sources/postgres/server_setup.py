"""What ``PostgresSource.open()`` checks on the server and creates there.

Each check fails with the setting or command that fixes it (DESIGN invariant 8). Plain
functions over a psycopg2 cursor of the source's regular connection.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ...core import names
from ...core.errors import ConfigurationError
from .catalog import captured_ancestors, quote_ident, quote_table, server_version


def check_server(cur, user: str, plugin: str) -> None:
    """wal_level, the REPLICATION attribute, and (on builds that have it) the server's list
    of loadable output plugins."""
    cur.execute("SHOW wal_level")
    wal_level = cur.fetchone()[0]
    if wal_level != "logical":
        raise ConfigurationError(
            f"the server's wal_level is '{wal_level}', so its log has no logical changes.",
            "run ALTER SYSTEM SET wal_level = logical; and restart PostgreSQL.",
        )
    cur.execute("SELECT rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user")
    repl, superuser = cur.fetchone()
    if not (repl or superuser):
        raise ConfigurationError(
            f"role {user} lacks the REPLICATION attribute needed for logical replication.",
            f"run ALTER ROLE {quote_ident(user)} REPLICATION; (as a superuser).",
        )
    cur.execute("SELECT setting FROM pg_settings WHERE name = 'output_plugin_libraries'")
    row = cur.fetchone()
    if row is not None and not plugin_allowed(row[0] or "", plugin):
        raise plugin_not_allowed_error(plugin, row[0])


def plugin_allowed(setting: str, plugin: str) -> bool:
    """Whether an ``output_plugin_libraries`` value (comma-separated, may be quoted, '*'
    for any) lets the server load ``plugin``."""
    names = [n.strip().strip('"').strip() for n in setting.split(",")]
    return "*" in names or plugin in names


def plugin_not_allowed_error(plugin: str, setting: Optional[str]) -> ConfigurationError:
    names = [n.strip() for n in (setting or "").split(",") if n.strip()]
    value = ",".join(names + [plugin]) if plugin not in names else ",".join(names)
    return ConfigurationError(
        f"the server does not allow the output plugin {plugin}: its setting "
        f"output_plugin_libraries = '{setting or ''}' does not list it.",
        f"run ALTER SYSTEM SET output_plugin_libraries = '{value}'; and restart PostgreSQL "
        "(or pass plugin='pgoutput' / 'wal2json', whichever the setting allows).",
    )


def ensure_watermark_table(cur, watermark_table: str, source_id: str) -> None:
    """The watermark table (one row per source, shared by sources) and this source's row."""
    schema = names.split_table(watermark_table)[0]
    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {quote_table(watermark_table)} ("
        "source_id text PRIMARY KEY, value text NOT NULL, updated_at timestamptz)"
    )
    cur.execute(
        f"INSERT INTO {quote_table(watermark_table)} (source_id, value, updated_at) "
        "VALUES (%s, '', now()) ON CONFLICT (source_id) DO NOTHING",
        (source_id,),
    )


def check_publication(cur, publication: str, tables: Sequence[str], partitioned: Sequence[str] = ()) -> None:
    """Read-only watermarks (``watermarks = "log"``): the publication must exist, created by
    the operator (creating it is a write), and carry every captured table; no watermark table."""
    cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,))
    if cur.fetchone() is None:
        via_root = " WITH (publish_via_partition_root = true)" if server_version(cur) >= 130000 else ""
        raise ConfigurationError(
            f"publication {publication} does not exist, and a capture with read-only watermarks "
            '(watermarks = "log") creates nothing in the database.',
            f"have the tables' owner or a superuser run CREATE PUBLICATION {quote_ident(publication)} FOR TABLE "
            f"{', '.join(quote_table(t) for t in tables)}{via_root};",
        )
    ensure_publication(cur, publication, tables, None, partitioned)


def ensure_publication(
    cur, publication: str, tables: Sequence[str], watermark_table: Optional[str], partitioned: Sequence[str] = ()
) -> None:
    """Create the publication, or check that an existing one carries every captured table and
    the watermark table, and every kind of change (DESIGN: Filters). Changes of a
    partitioned table's partitions must be published under the table's own name
    (``publish_via_partition_root``), or they would arrive under each partition's name."""
    pub = quote_ident(publication)
    wanted = list(tables) + ([watermark_table] if watermark_table is not None else [])
    version = server_version(cur)  # partitioned tables are refused before 13 (PostgresSource.open)
    via_root = "pubviaroot" if version >= 130000 else "false"
    cur.execute(
        f"SELECT pubinsert, pubupdate, pubdelete, pubtruncate, {via_root} FROM pg_publication WHERE pubname = %s",
        (publication,),
    )
    row = cur.fetchone()
    if row is None:
        # Via the root on every server that has the option, so that a partitioned table
        # added to the publication later is published as one table too.
        options = " WITH (publish_via_partition_root = true)" if version >= 130000 else ""
        cur.execute(f"CREATE PUBLICATION {pub} FOR TABLE {', '.join(quote_table(t) for t in wanted)}{options}")
        return
    if not all(row[:4]):
        # A TRUNCATE that is not published would be skipped silently.
        raise ConfigurationError(
            f"publication {publication} does not publish every kind of change (insert, update, delete, truncate).",
            f"run ALTER PUBLICATION {pub} SET (publish = 'insert, update, delete, truncate');",
        )
    if partitioned and not row[4]:
        raise ConfigurationError(
            f"publication {publication} does not publish via the partition root "
            "(publish_via_partition_root = false), so changes of the partitioned table(s) "
            f"{list(partitioned)} would reach DBLog under each partition's name instead of the table's.",
            f"run ALTER PUBLICATION {pub} SET (publish_via_partition_root = true);",
        )
    cur.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (publication,))
    have = {names.table_name(*r) for r in cur.fetchall()}
    missing = [t for t in wanted if t not in have]
    # adding a partition would not help: it stays published as its ancestor
    hidden = captured_ancestors(cur, missing, have)
    if hidden:
        table, ancestor = next(iter(hidden.items()))
        raise ConfigurationError(
            f"publication {publication} publishes the changes of partition {table} under its "
            f"ancestor {ancestor} (publish_via_partition_root), so none arrive as {table}.",
            f"capture {ancestor} instead of {table}, or use a publication without {ancestor} "
            "(pass another publication name).",
        )
    if missing:
        what = "the watermark table and " if watermark_table in missing else ""
        raise ConfigurationError(
            f"publication {publication} does not include {what}table(s) {missing}, so their "
            "changes (and the dump watermarks) would never reach DBLog.",
            f"run ALTER PUBLICATION {pub} ADD TABLE {', '.join(quote_table(t) for t in missing)};",
        )
