"""The status view's pure parts (airflow_provider_dblog/ui/): the page rendered from a status,
the capture task's link, the login the app requires, the plugin in the provider's metadata.
The page on a real API server, reached through the link, is tested in tests/e2e."""

from __future__ import annotations

import json
import os
import tempfile

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))

import pytest

pytest.importorskip("airflow.sdk")

from airflow_provider_dblog.ui.status_page import page_path, render  # noqa: E402

STATUS = {
    "source_id": "shop",
    "checkpoint": "000001000000000000120000",  # the store's, shown beside the report's position
    "leader": {"identity": "triggerer-1:4242", "epoch": 7},
    "warnings": ["the slot's WAL is near max_slot_wal_keep_size <script>alert(1)</script>"],
    "capture": {
        "state": "running",
        "pid": 4242,
        "updated_at": 1795000000.0,
        "age_s": 2.5,
        "position": "0/1A2B3C4D",
        "checkpoint": "0/1A2B0000",
        "events_per_s": 1234.5,
        "lag_seconds": 0.8,
        "lag_bytes": 65536,
        "window": "closed",
        "buffered": 120,
        "buffered_mb": 0.1,
        "events_written": 987654,
        "output_commits": 321,
        "output_outage": None,
        "reconnects": 1,
    },
    "dumps": [
        {
            "dump_id": "d-old",
            "created_at": 1,
            "status": "done",
            "paused": False,
            "tables": ["public.orders"],
            "rows": 10,
            "chunks": 1,
            "progress": {"public.orders": {"rows": 10, "done": True}},
        },
        {
            "dump_id": "d-new",
            "created_at": 2,
            "status": "running",
            "paused": True,
            "tables": "all",
            "rows": 250,
            "chunks": 3,
            "eta_seconds": 42.0,
            "progress": {"public.lines": {"rows": 250, "done": False, "estimated_rows": 1000}},
        },
    ],
}


def test_the_page_shows_the_capture_its_warnings_and_dumps_escaped():
    page = render(STATUS, "dblog_state_default")
    assert '<code id="source">shop</code>' in page and 'data-state="running"' in page
    for text in (
        "<td>4242</td>",
        "0/1A2B3C4D",
        "000001000000000000120000",
        "1,234.5",
        "65,536",
        "triggerer-1:4242 (epoch 7)",
        "987,654",
        "closed",
    ):
        assert text in page, text
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # a warning is text
    # the newest dump first, paused, with its progress against the estimate and its ETA
    assert page.index("d-new") < page.index("d-old")
    assert "running (paused)" in page and "25.0%" in page and "42 s" in page
    assert 'href="status.json?state_conn_id=dblog_state_default&amp;source_id=shop"' in page  # relative
    assert '<meta http-equiv="refresh"' in page


def test_a_source_without_a_report_says_so():
    page = render({"source_id": "new", "capture": None, "dumps": [], "warnings": []}, "st")
    assert "No capture of this source has reported" in page and "No dumps." in page


def test_the_capture_task_links_to_its_source_page(monkeypatch):
    from airflow_provider_dblog.operators.capture import CaptureOperator
    from airflow_provider_dblog.ui.links import DBLogStatusLink

    monkeypatch.setenv("AIRFLOW_CONN_SHOP_DB", json.dumps({"conn_type": "mysql", "extra": {"source_id": "shop 1"}}))
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/af/")
    link = DBLogStatusLink()
    assert [type(x) for x in CaptureOperator.operator_extra_links] == [DBLogStatusLink]
    op = CaptureOperator(task_id="c", source_conn_id="shop_db", state_conn_id="dblog_state_default")
    assert link.get_link(op, ti_key=None) == (
        "https://airflow.example.com/af/dblog/status?state_conn_id=dblog_state_default&source_id=shop+1"
    )
    assert page_path("st", "shop", ".json") == "/dblog/status.json?state_conn_id=st&source_id=shop"
    # a state path instead of a connection: no link (the page opens stores through connections only)
    assert link.get_link(CaptureOperator(task_id="p", source_conn_id="shop_db", state="/tmp/s.db"), ti_key=None) == ""


def test_the_page_needs_an_airflow_login_and_is_built_at_its_first_request():
    from fastapi.testclient import TestClient

    from airflow_provider_dblog.ui.status_page import StatusApp

    app = StatusApp()  # what the plugin mounts: nothing built while a process only loads plugins
    assert app._app is None
    client = TestClient(app)
    for path in ("/status", "/status.json"):
        assert client.get(f"{path}?state_conn_id=st&source_id=shop").status_code == 401, path
    assert app._app is not None


def test_the_plugin_is_an_entry_point_and_the_provider_metadata_is_valid():
    import importlib
    import importlib.metadata
    import pathlib

    import airflow
    import jsonschema

    from airflow_provider_dblog.get_provider_info import get_provider_info

    info = get_provider_info()
    schema = json.loads((pathlib.Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    (entry,) = [e for e in importlib.metadata.entry_points(group="airflow.plugins") if e.name == "dblog"]
    cls = entry.load()
    assert [a["url_prefix"] for a in cls.fastapi_apps] == ["/dblog"]
    for path in info["extra-links"]:
        module, _, name = path.rpartition(".")
        assert getattr(importlib.import_module(module), name)().name == "DBLog status"
    # what Airflow's API server mounts
    from airflow import plugins_manager

    assert "/dblog" in [a["url_prefix"] for a in plugins_manager.get_fastapi_plugins()[0]]
