"""The changelog on an object store, the pure parts: which settings are refused, and an
Airflow ``aws`` connection turned into AWS_* settings (outputs/object_store.py,
hooks/object_store.py). Against a real store: tests/integration/test_object_store.py."""

from __future__ import annotations

import json
import os
import tempfile

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-"))  # no Airflow files in the repo

import pytest

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.outputs.object_store import _obstore_options, is_remote, refuse_unsafe_settings

SECRET = "s3-" + "5ec2e7a9d1"


@pytest.mark.parametrize(
    "options, environ, named",
    [
        ({"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}, {}, "storage option AWS_S3_ALLOW_UNSAFE_RENAME"),
        ({"aws_s3_allow_unsafe_rename": "1"}, {}, "aws_s3_allow_unsafe_rename"),
        ({}, {"AWS_S3_ALLOW_UNSAFE_RENAME": "TRUE"}, "environment variable AWS_S3_ALLOW_UNSAFE_RENAME"),
        ({}, {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}, "AWS_S3_LOCKING_PROVIDER"),
    ],
)
def test_settings_asking_for_unsafe_commits_are_refused_by_name(options, environ, named):
    with pytest.raises(ConfigurationError) as info:
        refuse_unsafe_settings(options, environ)
    assert named in str(info.value) and "Fix:" in str(info.value)


def test_safe_settings_pass():
    refuse_unsafe_settings({"AWS_S3_ALLOW_UNSAFE_RENAME": "false", "AWS_REGION": "eu-west-1"}, {"HOME": "/root"})


def test_only_object_store_urls_are_remote():
    assert is_remote("s3://b/p") and is_remote("S3A://b/p") and is_remote("abfss://c@a.dfs.core.windows.net/p")
    assert not is_remote("/data/lake") and not is_remote("file:///data/lake") and not is_remote("delta:///x")


def test_probe_options_keep_what_obstore_knows_and_the_client_switches():
    config, client = _obstore_options(
        "s3://bucket/lake",
        {"AWS_REGION": "eu-west-1", "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "false", "timeout": "30s"},
    )
    assert config == {"aws_region": "eu-west-1"}
    assert client == {"allow_http": "true", "timeout": "30s"}


# -- an Airflow aws connection ----------------------------------------------------------------
pytest.importorskip("airflow.sdk")


def set_conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def aws_conn(monkeypatch, **extra):
    set_conn(monkeypatch, "lake", conn_type="aws", login="AKIDEXAMPLE", password=SECRET, extra=extra)


def test_an_aws_connection_names_the_lake_and_gives_its_keys_only_to_the_childs_environment(monkeypatch):
    from airflow_provider_dblog.hooks.dblog import DBLogHook

    aws_conn(
        monkeypatch,
        url="s3://bucket/lake",
        region_name="eu-west-1",
        service_config={"s3": {"endpoint_url": "http://127.0.0.1:9000"}},
        aws_session_token="tok-1",
    )
    hook = DBLogHook(output_conn_id="lake")
    assert hook.output_config() == {"url": "s3://bucket/lake"}
    assert SECRET not in json.dumps(hook.output_config())
    assert hook.output_env() == {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": "tok-1",
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
    }
    out = hook.get_output()  # built here: the keys as storage options, in memory
    assert out.root == "s3://bucket/lake" and out.storage_options["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert SECRET not in repr(out)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({}, "names no changelog"),
        ({"url": "/data/lake"}, "not an object-store URL"),
        ({"url": "s3://b/l", "role_arn": "arn:aws:iam::1:role/x"}, "role_arn"),
    ],
)
def test_an_aws_connection_that_cannot_work_is_refused(monkeypatch, extra, message):
    from airflow_provider_dblog.hooks.dblog import DBLogHook

    aws_conn(monkeypatch, **extra)
    hook = DBLogHook(output_conn_id="lake")
    with pytest.raises(ConfigurationError) as info:
        hook.output_config() if message != "role_arn" else hook.output_env()
    assert message in str(info.value)


def test_the_changelog_watcher_refuses_keys_in_its_stored_arguments():
    from airflow_provider_dblog.triggers.changelog import ChangelogCommitTrigger

    for key in ("AWS_SECRET_ACCESS_KEY", "aws_session_token", "azure_storage_account_key", "google_service_account"):
        with pytest.raises(ConfigurationError) as info:
            ChangelogCommitTrigger("s3://b/lake", storage_options={key: SECRET})
        assert key in str(info.value) and SECRET not in str(info.value)
    trigger = ChangelogCommitTrigger("s3://b/lake", storage_options={"AWS_REGION": "eu-west-1"}, conn_id="lake")
    assert trigger.serialize()[1]["conn_id"] == "lake" and trigger.root == "s3://b/lake"
