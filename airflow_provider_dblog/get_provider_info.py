"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""
from __future__ import annotations

from . import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-provider-dblog",
        "name": "DBLog",
        "description": "DBLog change-data capture: lock-free watermark dumps interleaved with "
        "MySQL/MariaDB binlog and PostgreSQL logical replication, landed into Delta Lake.",
        "versions": [__version__],
        # Hooks, operators, triggers and connection types are added with the Airflow layer.
    }
