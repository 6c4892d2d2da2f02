"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

Kept free of Airflow imports: Airflow reads it while discovering providers. Since Airflow 3.2
the connection form comes from here (``conn-fields``, ``ui-field-behaviour``) rather than
from the hook's methods; the hook reuses the same constants for older versions.
"""

from __future__ import annotations

from . import __version__

_INTEGRATION = "DBLog"

# The dblog_state connection: a local SQLite path, or ZooKeeper hosts + chroot.
STATE_UI_FIELD_BEHAVIOUR = {
    "hidden-fields": ["login", "password"],
    "relabeling": {"host": "Local path or ZooKeeper hosts", "schema": "ZooKeeper chroot", "port": "ZooKeeper port"},
    "placeholders": {
        "host": "/var/lib/dblog/state.db   or   zk1:2181,zk2:2181,zk3:2181",
        "schema": "/dblog",
        "port": "2181 (only when host is a single name without a port)",
    },
}
STATE_CONN_FIELDS = {
    "store": {
        "label": "Store",
        "description": "local (SQLite file at the path in Host) or zookeeper; empty: a Host starting "
        "with / . or ~ is a path, anything else ZooKeeper hosts.",
        "schema": {"type": ["string", "null"], "enum": ["local", "zookeeper", None]},
    },
    "session_timeout": {
        "label": "ZooKeeper session timeout (s)",
        "description": "Bounds how fast a standby capture takes over after the leader dies.",
        "schema": {"type": ["number", "null"]},
    },
}


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-provider-dblog",
        "name": "DBLog",
        "description": "DBLog change-data capture: lock-free watermark dumps interleaved with "
        "MySQL/MariaDB binlog and PostgreSQL logical replication, landed into Delta Lake.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://arxiv.org/abs/2010.12597",
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": ["airflow_provider_dblog.hooks.dblog"]}],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_provider_dblog.operators.capture",
                    "airflow_provider_dblog.operators.dump",
                    "airflow_provider_dblog.operators.land",
                    "airflow_provider_dblog.operators.verify",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_provider_dblog.triggers.capture",
                    "airflow_provider_dblog.triggers.dump",
                    "airflow_provider_dblog.triggers.changelog",
                    "airflow_provider_dblog.triggers.land",
                ],
            }
        ],
        # dblog://changelog/<lake>, dblog://commits/<lake>, dblog://mirror/<mirrors>/<source>/<table>
        # (assets/dblog.py): Airflow normalises and checks the URI of every such Asset with the
        # handler, and OpenLineage names it as lineage.py names the changelog and the mirrors
        "asset-uris": [
            {
                "schemes": ["dblog"],
                "handler": "airflow_provider_dblog.assets.dblog.sanitize_uri",
                "factory": "airflow_provider_dblog.assets.dblog.create_asset",
                "to_openlineage_converter": "airflow_provider_dblog.assets.dblog.convert_asset_to_openlineage",
            }
        ],
        # the capture task's link to the status page (ui/); the page's plugin is the
        # "airflow.plugins" entry point, which Airflow loads whatever lazy_load_providers says
        # (listed here as well, it would be registered twice and warned about)
        "extra-links": ["airflow_provider_dblog.ui.links.DBLogStatusLink"],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_dblog.hooks.dblog.DBLogHook",
                "hook-name": "DBLog state store",
                "connection-type": "dblog_state",
                "ui-field-behaviour": STATE_UI_FIELD_BEHAVIOUR,
                "conn-fields": STATE_CONN_FIELDS,
            }
        ],
    }
