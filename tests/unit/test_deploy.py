"""Pure parts of the deployment commands (deploy/, spark/jars.py)."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_dblog.deploy import doctor
from airflow_provider_dblog.deploy.examples import copy_examples, example_dags
from airflow_provider_dblog.spark import jars, kafka_changelog

REPO = Path(__file__).resolve().parents[2]


def test_java_major_reads_old_and_new_version_strings():
    assert doctor.java_major('openjdk version "17.0.13" 2024-10-15') == 17
    assert doctor.java_major('openjdk version "21" 2023-09-19') == 21
    assert doctor.java_major('java version "1.8.0_402"') == 8
    assert doctor.java_major("no java here") is None


def test_the_resolver_reads_the_kafka_coordinate_the_job_uses():
    assert jars.packages()["kafka"] == kafka_changelog.KAFKA_PACKAGE


def test_the_shipped_example_dags_are_the_checkouts_and_copies_keep_edits(tmp_path):
    assert [p.name for p in example_dags()] == sorted(p.name for p in (REPO / "dags").glob("dblog_*.py"))
    copy_examples(tmp_path)
    edited = tmp_path / "dblog_land.py"
    edited.write_text("# mine\n")
    copy_examples(tmp_path)
    assert edited.read_text() == "# mine\n"  # kept without --force
    copy_examples(tmp_path, force=True)
    assert edited.read_text() == (REPO / "dags" / "dblog_land.py").read_text()
