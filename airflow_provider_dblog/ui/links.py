"""The capture task's "DBLog status" button (an operator extra link): the status page of its
source (status_page.py), on the API server that serves the UI."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

from .status_page import page_path


class DBLogStatusLink(BaseOperatorLink):
    """Computed when the task runs (Airflow keeps it in XCom): the page of the operator's
    source in its ``state_conn_id`` store. An operator given a ``state`` path or URL instead
    gets no link: the page opens stores through connections only."""

    name = "DBLog status"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.configuration import conf

        from ..hooks.connections import DBLogConnections

        state_conn_id = getattr(operator, "state_conn_id", None)
        if not state_conn_id:
            return ""
        source_id = DBLogConnections.of_operator(operator).hook().source_id
        # the UI's own address (AIRFLOW__API__BASE_URL); unset: a path on the same host
        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
        return base + page_path(state_conn_id, source_id)
