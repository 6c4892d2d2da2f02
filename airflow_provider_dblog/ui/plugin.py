"""The provider's Airflow plugin (declared in get_provider_info): the status page's app on the
API server, and the capture task's extra link."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .links import DBLogStatusLink
from .status_page import PREFIX, StatusApp


class DBLogPlugin(AirflowPlugin):
    name = "dblog"
    fastapi_apps = [{"app": StatusApp(), "url_prefix": PREFIX, "name": "DBLog status"}]
    operator_extra_links = [DBLogStatusLink()]
