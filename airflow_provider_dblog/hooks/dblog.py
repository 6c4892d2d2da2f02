"""``DBLogHook``: the engine's source, state store and changelog output from Airflow connections.

Three things to locate, each from a connection or an argument:

* the **source**: Airflow's standard ``postgres`` or ``mysql`` connection (host, port, login,
  password, schema = database). DBLog options live in the connection's extras: ``source_id``,
  ``slot_name``, ``publication``, ``plugin``, ``server_id``, ``watermark_schema``, ``tables``
  (list or comma-separated), ``key_columns`` (``{"schema.table": ["col", ...]}``), ``databases``.
  An extra that looks like a misspelt DBLog option is an error (``check_source_extras``).
* the **state store** (checkpoints, dump requests): a ``dblog_state`` connection (a local path,
  or ZooKeeper hosts + chroot) or the ``state`` argument (a path or ``zk://`` URL).
* the **changelog**: the ``output`` argument (``delta://DIR``, ``s3://...``, ``jsonl://DIR``) or
  a connection whose extra ``url`` (or ``path``, or host) names it.

The dicts built here are exactly what ``airflow_provider_dblog.config`` takes (and what the
``dblog`` command reads from its TOML file), so the Airflow layer adds no second way to
configure the engine. That is all the hook does: requesting, controlling and reading dumps
is ``core/dump_requests.py``, shared with the ``dblog`` command. The password never enters those dicts: in this process it reaches the
source object in memory, and the capture child gets it through its environment (invariant 8).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import json
import os
import re
from typing import Any, Optional

from airflow.sdk import BaseHook

from .. import config as dblog_config
from .. import sources
from ..config_keys import SECONDS, number_option
from ..core.errors import ConfigurationError
from ..get_provider_info import STATE_CONN_FIELDS, STATE_UI_FIELD_BEHAVIOUR
from ..sources.source_descriptor import extra_object
from .object_store import AWS_CONN_TYPE, aws_output_url, aws_settings

KAFKA_CONN_TYPE = "kafka"  # apache-airflow-providers-apache-kafka's connection type (hooks/kafka.py)

# The variable that carries the source password into the capture child (see triggers/capture.py).
PASSWORD_ENV = dblog_config.DEFAULT_PASSWORD_ENV

# Extras copied verbatim into the [source] table (make_source knows them): each database's
# own (its descriptor's conn_extras) and these.
_SOURCE_EXTRAS = (
    *(key for d in sources.descriptors() for key in d.conn_extras),
    "watermark_schema",
    "watermarks",  # "table" or "log" (read-only dumps)
    "sslpassword_env",  # the client key's passphrase: a variable of the worker's environment
    "sslpassword_file",  # or a file on the worker
)
# DBLog's options in a source connection's extras: these and nothing else.
DBLOG_SOURCE_EXTRAS = (
    "source_id",
    "tables",
    "key_columns",
    *(d.conn_database_extra for d in sources.descriptors() if d.conn_database_extra),
    *_SOURCE_EXTRAS,
)
# Extras Airflow's own source connections and their drivers define (docs/connections.md), from
# each database's descriptor: they may be there for other tasks on the same connection;
# DBLog does not use them.
AIRFLOW_SOURCE_EXTRAS = frozenset(key for d in sources.descriptors() for key in d.conn_driver_extras)
# An extra this close to a DBLog option (difflib ratio) is taken for a misspelt one.
_MISSPELT = 0.75


def check_source_extras(conn_id: str, extra: dict[str, Any]) -> None:
    """Refuse an extra that looks like a misspelt DBLog option (``tabels``), naming the
    closest one. Which extras are DBLog's: ``DBLOG_SOURCE_EXTRAS``; Airflow's and the
    drivers' own (``AIRFLOW_SOURCE_EXTRAS``) are left alone, as is anything not close to a
    DBLog option (another tool's extra on a shared connection)."""
    for key in extra:
        if key in DBLOG_SOURCE_EXTRAS or key in AIRFLOW_SOURCE_EXTRAS:
            continue
        match = difflib.get_close_matches(key.lower().replace("-", "_"), DBLOG_SOURCE_EXTRAS, n=1, cutoff=_MISSPELT)
        if match:
            raise ConfigurationError(
                f"connection {conn_id} has the extra {key!r}, which is not a DBLog option.",
                f"did you mean {match[0]!r}? DBLog's extras: {', '.join(DBLOG_SOURCE_EXTRAS)} (docs/connections.md).",
            )


# ZooKeeper digest auth: copied into [state] as they are. They name where the password is
# (a variable or file on every worker and triggerer), so the child capture finds it too.
STATE_AUTH_EXTRAS = ("auth_user", "auth_password_env", "auth_password_file")
# The extras of a dblog_state connection (all DBLog's; the UI may prefix them).
STATE_EXTRAS = ("url", "path", "store", "zookeeper", "chroot", "session_timeout", *STATE_AUTH_EXTRAS)


def _as_list(value: Any) -> Optional[list[str]]:
    """Extras typed in the UI arrive as strings: accept "a.t1, a.t2" or '["a.t1"]' too."""
    if value in (None, "", []):
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = json.loads(text)
        else:
            return [t.strip() for t in re.split(r"[,\n]", text) if t.strip()]
    return [str(v) for v in value]


_as_dict = extra_object  # the source packages read their object extras (e.g. MySQL's ssl) the same way


def default_source_id(conn_id: str) -> str:
    """Slot and publication names derive from the source id: keep it to [a-z0-9_]."""
    return re.sub(r"[^a-z0-9_]", "_", conn_id.lower())[:48] or "dblog"


# Which package registers each source connection type, how to install it, and a note for the fix.
SOURCE_PROVIDERS = {d.conn_types[0]: d.airflow_provider for d in sources.descriptors()}


def _provider_installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _not_a_source(conn_id: str, conn_type: Optional[str]) -> tuple[str, str]:
    """Cause and fix for a source connection of another type. A ``generic`` one usually comes
    from `airflow connections add --conn-type mysql` without the MySQL provider: Airflow then
    stores the type as ``generic`` with only a warning, so the fix names the missing package."""
    cause = f"connection {conn_id} has type {conn_type!r}, not a DBLog source."
    fix = "use a Postgres or MySQL connection (MariaDB: the MySQL type)."
    missing = {t: (how, note) for t, (dist, how, note) in SOURCE_PROVIDERS.items() if not _provider_installed(dist)}
    if (conn_type or "generic").lower() != "generic" or not missing:
        return cause, fix
    types = " / ".join(f"--conn-type {t}" for t in missing)
    cause += (
        f" Airflow stores `airflow connections add {types}` as 'generic' when no installed provider "
        f"registers the type, and {', '.join(SOURCE_PROVIDERS[t][0] for t in missing)} is not installed."
    )
    fix = (
        f"{'; '.join(how for how, _ in missing.values())} on every Airflow machine, then "
        f"`airflow connections delete {conn_id}` and add it again"
        + "".join(note for _, note in missing.values())
        + '; or, without the provider, `airflow connections import FILE.json` with "conn_type": '
        f'"{next(iter(missing))}" keeps the type (docs/connections.md).'
    )
    return cause, fix


class DBLogHook(BaseHook):
    """Builds DBLog's source, state store and output from Airflow connections.

    :param source_conn_id: a ``postgres`` or ``mysql`` connection (DBLog options in its extras).
    :param state_conn_id: a ``dblog_state`` connection; or give ``state`` instead.
    :param state: state store as a path or ``zk://hosts/chroot`` URL (default: the
        ``DBLOG_STATE`` variable, else ``dblog-state/state.db``).
    :param output: changelog URL (``delta://DIR``, ``s3://...``, ``jsonl://DIR``).
    :param output_conn_id: a connection naming the changelog (extra ``url`` or ``path``, or host).
    :param source_id: overrides the extra ``source_id`` (default: the connection id).
    """

    conn_name_attr = "state_conn_id"
    default_conn_name = "dblog_state_default"
    conn_type = "dblog_state"
    hook_name = "DBLog state store"

    def __init__(
        self,
        source_conn_id: Optional[str] = None,
        state_conn_id: Optional[str] = None,
        *,
        state: Optional[str] = None,
        output: Optional[str] = None,
        output_conn_id: Optional[str] = None,
        source_id: Optional[str] = None,
    ) -> None:
        super().__init__()
        self.source_conn_id = source_conn_id
        self.state_conn_id = state_conn_id
        self.state = state
        self.output = output
        self.output_conn_id = output_conn_id
        self._source_id = source_id
        self._connections: dict[str, Any] = {}

    # -- connections -------------------------------------------------------------------
    def _connection(self, conn_id: str):
        if conn_id not in self._connections:
            self._connections[conn_id] = self.get_connection(conn_id)
        return self._connections[conn_id]

    async def aprefetch_connections(self) -> None:
        """Fetch every connection asynchronously (triggers call this: the sync lookup must not
        run on the triggerer's event loop)."""
        for conn_id in (self.source_conn_id, self.state_conn_id, self.output_conn_id):
            if conn_id and conn_id not in self._connections:
                self._connections[conn_id] = await self.aget_connection(conn_id)

    # -- the three config dicts (what config.py and the TOML file take) ---------------------
    @property
    def source_id(self) -> str:
        if self._source_id:
            return self._source_id
        if not self.source_conn_id:
            raise ConfigurationError("no source is configured.", "pass source_conn_id (or source_id).")
        extra = self._connection(self.source_conn_id).extra_dejson
        return str(extra.get("source_id") or default_source_id(self.source_conn_id))

    def source_config(self) -> dict[str, Any]:
        """The ``[source]`` table, without the password (``password_env`` names where it is)."""
        if not self.source_conn_id:
            raise ConfigurationError("no source connection is configured.", "pass source_conn_id.")
        conn = self._connection(self.source_conn_id)
        source = sources.for_connection(conn.conn_type or "")
        if source is None:
            raise ConfigurationError(*_not_a_source(self.source_conn_id, conn.conn_type))
        extra = conn.extra_dejson
        check_source_extras(self.source_conn_id, extra)
        src: dict[str, Any] = {"type": source.kind, "id": self.source_id, "password_env": PASSWORD_ENV}
        for key, value in (("host", conn.host), ("port", conn.port), ("user", conn.login), ("database", conn.schema)):
            if value not in (None, ""):
                src[key] = value
        for key in _SOURCE_EXTRAS:
            if extra.get(key) not in (None, ""):
                src[key] = _as_list(extra[key]) if key == "databases" else extra[key]
        if isinstance(src.get("server_id"), str) and src["server_id"].strip().isdigit():
            src["server_id"] = int(src["server_id"])  # the UI's text field; anything else is refused as it is
        database_extra = source.conn_database_extra
        if database_extra and "database" not in src and extra.get(database_extra):
            src["database"] = extra[database_extra]
        tables = _as_list(extra.get("tables"))
        if tables:
            src["tables"] = tables
        key_columns = _as_dict(extra.get("key_columns"), "key_columns")
        if key_columns:
            src["key_columns"] = {t: _as_list(c) for t, c in key_columns.items()}
        # the connection's own TLS extras as the [source] TLS keys (sources/tls.py)
        src.update(source.tls_extras(self.source_conn_id, extra))
        return src

    def source_password(self) -> Optional[str]:
        return self._connection(self.source_conn_id).password if self.source_conn_id else None

    def state_config(self) -> dict[str, Any]:
        """The ``[state]`` table: ``{"path": ...}`` or ``{"url": "zk://..."}`` (+ session_timeout)."""
        if not self.state_conn_id:
            return {"url": self.state} if self.state else {}
        conn = self._connection(self.state_conn_id)
        # form fields may be saved with Airflow's old "extra__<type>__<field>" prefix
        extra = {k.replace("extra__dblog_state__", ""): v for k, v in conn.extra_dejson.items()}
        if "auth_password" in extra:
            raise ConfigurationError(
                f"the state connection {self.state_conn_id} holds the ZooKeeper password in its extras, "
                "which Airflow shows in its UI.",
                "remove it; put the password into an environment variable named by the extra auth_password_env "
                "(default DBLOG_STATE_PASSWORD) or a file named by auth_password_file, on every worker and triggerer.",
            )
        for key in extra:
            if key not in STATE_EXTRAS:
                raise ConfigurationError(
                    f"the state connection {self.state_conn_id} has the extra {key!r}, which DBLog does not know.",
                    f"remove or correct it ({dblog_config.closest(key, STATE_EXTRAS)})",
                )
        state: dict[str, Any] = {k: extra[k] for k in STATE_AUTH_EXTRAS if extra.get(k) not in (None, "")}
        if extra.get("session_timeout") not in (None, ""):
            state["session_timeout"] = number_option(
                str(extra["session_timeout"]), f"the session_timeout of connection {self.state_conn_id}", SECONDS
            )
        if extra.get("url"):
            return {**state, "url": extra["url"]}
        host = (conn.host or "").strip()
        store = (extra.get("store") or "").lower()
        path = extra.get("path") or (host if store == "local" or host.startswith(("/", ".", "~")) else None)
        if store != "zookeeper" and path:
            return {**state, "path": os.path.expanduser(path)}
        hosts = extra.get("zookeeper") or host
        if not hosts:
            raise ConfigurationError(
                f"the state connection {self.state_conn_id} names neither a path nor ZooKeeper hosts.",
                "set its host to a local path (/var/lib/dblog/state.db) or to ZooKeeper hosts "
                "(zk1:2181,zk2:2181) with the chroot in the schema field.",
            )
        if conn.port and "," not in hosts and ":" not in hosts:
            hosts = f"{hosts}:{conn.port}"
        chroot = (extra.get("chroot") or conn.schema or "").strip()
        if chroot and not chroot.startswith("/"):
            chroot = "/" + chroot
        return {**state, "zookeeper": hosts, "chroot": chroot}

    def output_config(self) -> dict[str, Any]:
        """The ``[output]`` table: the changelog URL (a Kafka connection: the broker URL,
        its client settings go to ``output_env``)."""
        if self.output:
            return {"url": self.output}
        if not self.output_conn_id:
            return {}
        conn = self._connection(self.output_conn_id)
        if conn.conn_type == KAFKA_CONN_TYPE:
            from .kafka import kafka_output_config  # confluent-kafka only when a Kafka output is used

            return kafka_output_config(self.output_conn_id, conn)[0]
        if conn.conn_type == AWS_CONN_TYPE:  # the lake on S3; its keys go to output_env
            return {"url": aws_output_url(self.output_conn_id, conn)}
        extra = conn.extra_dejson
        url = extra.get("url") or (f"delta://{extra['path']}" if extra.get("path") else None) or conn.host
        if not url:
            raise ConfigurationError(
                f"connection {self.output_conn_id} names no changelog.",
                'set its extra "url" (e.g. delta:///data/changelog or s3://bucket/changelog).',
            )
        return {"url": url}

    def engine_config(self) -> dict[str, dict[str, Any]]:
        """The whole config file's content (no password in it)."""
        return {"source": self.source_config(), "state": self.state_config(), "output": self.output_config()}

    # -- engine objects ----------------------------------------------------------------
    def get_source(self):
        src = dict(self.source_config())
        src.pop("password_env", None)
        return dblog_config.make_source(src, password=self.source_password())

    def get_state(self):
        return dblog_config.make_state(self.state_config())

    def output_env(self) -> dict[str, str]:
        """Environment variables the capture child needs for its output: a Kafka
        connection's client settings (security, SASL), an ``aws`` connection's keys, region
        and endpoint (AWS_*), never in argv or the config file."""
        if self.output or not self.output_conn_id:
            return {}
        conn = self._connection(self.output_conn_id)
        if conn.conn_type == AWS_CONN_TYPE:
            return aws_settings(self.output_conn_id, conn)
        if conn.conn_type != KAFKA_CONN_TYPE:
            return {}
        from .kafka import kafka_output_config

        return kafka_output_config(self.output_conn_id, conn)[1]

    def get_output(self):
        if not self.output and self.output_conn_id:
            conn = self._connection(self.output_conn_id)
            if conn.conn_type == KAFKA_CONN_TYPE:
                from .kafka import kafka_output

                return kafka_output(self.output_conn_id, conn)
            if conn.conn_type == AWS_CONN_TYPE:
                from ..outputs import make_output

                url = aws_output_url(self.output_conn_id, conn)
                return make_output(url, storage_options=aws_settings(self.output_conn_id, conn))
        return dblog_config.make_output(self.output_config())

    def get_conn(self):
        return self.get_state()

    # -- connection form (the dblog_state type) ---------------------------------------
    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Airflow < 3.2 reads this; newer versions read the same data from get_provider_info."""
        b = STATE_UI_FIELD_BEHAVIOUR
        return {"hidden_fields": b["hidden-fields"], "relabeling": b["relabeling"], "placeholders": b["placeholders"]}

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The extra fields as wtforms widgets, for Airflow versions without ``conn-fields``."""
        try:
            from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
            from wtforms import StringField
        except ImportError:  # Airflow 3.2+ without FAB: the form comes from get_provider_info
            return {}
        return {
            name: StringField(field["label"], widget=BS3TextFieldWidget(), description=field.get("description"))
            for name, field in STATE_CONN_FIELDS.items()
        }
