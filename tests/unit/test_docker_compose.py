"""docker/compose.yaml: valid for the compose client, complete, and configured like the stack
the end-to-end test and `make demo` run (scripts/airflow_stack.py, docker/airflow.env).

No Docker engine here. `docker compose config` (or Debian's `docker-compose config`, v1)
resolves and validates the file without one; when neither client is installed the same checks
run on the file parsed with PyYAML (anchors and merge keys resolved, env_file merged by hand).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from scripts import airflow_stack  # noqa: E402 - after the importorskip

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
LONG_RUNNING = AIRFLOW_SERVICES[1:] + ("airflow-db", "source-mysql", "source-postgres", "zookeeper")


def compose_client() -> list[str] | None:
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) and subprocess.run([*cmd, "version"], capture_output=True).returncode == 0:
            return cmd
    return None


def yaml_config() -> dict:
    """What `config` would print, for the parts tested here: env_file merged into environment."""
    cfg = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    for svc in cfg["services"].values():
        env = {}
        for f in svc.get("env_file", []):
            env.update(airflow_stack.shared_settings(DOCKER / f))
        env.update(svc.get("environment") or {})
        svc["environment"] = {k: str(v) for k, v in env.items()}
    return cfg


@pytest.fixture(scope="module")
def config() -> dict:
    cmd = compose_client()
    if cmd is None:
        return yaml_config()
    out = subprocess.run(
        [*cmd, "-f", str(DOCKER / "compose.yaml"), "config"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    assert out.returncode == 0, f"{' '.join(cmd)} config rejected docker/compose.yaml:\n{out.stderr}"
    return yaml.safe_load(out.stdout)


def test_compose_config_is_valid_and_complete(config):
    services = config["services"]
    assert set(AIRFLOW_SERVICES) | set(LONG_RUNNING) <= set(services)
    for name in LONG_RUNNING:
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    for name in AIRFLOW_SERVICES:
        svc = services[name]
        assert svc["build"]["dockerfile"] == "docker/Dockerfile", name
        mounts = [str(v if isinstance(v, str) else f"{v['source']}:{v['target']}") for v in svc["volumes"]]
        assert any(m.endswith("/dags:/opt/airflow/dags") or "/dags:/opt/airflow/dags:" in m for m in mounts), mounts
        deps = svc["depends_on"]
        assert deps["airflow-db"]["condition"] == "service_healthy"
        if name != "airflow-init":  # migrate first, then the components
            assert deps["airflow-init"]["condition"] == "service_completed_successfully"
    init = " ".join(services["airflow-init"]["command"])
    assert "airflow db migrate" in init and "SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in init
    commands = {n: services[n]["command"][0] for n in AIRFLOW_SERVICES[1:]}
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }
    assert any(
        str(p.get("target", p) if isinstance(p, dict) else p).endswith("8080")
        for p in services["airflow-apiserver"]["ports"]
    )


def test_sources_are_configured_for_cdc(config):
    mysql = " ".join(config["services"]["source-mysql"]["command"])
    for opt in (
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
        "--binlog-row-metadata=FULL",
        "--server-id=",
        "--log-bin",
    ):
        assert opt in mysql, opt
    pg = config["services"]["source-postgres"]["command"]
    assert "wal_level=logical" in pg


def test_compose_env_matches_the_e2e_stack(config, tmp_path):
    """Every Airflow service gets docker/airflow.env unchanged, sets the per-deployment DAG
    settings, and defines the connections under the ids airflow.env names; the stack of the
    end-to-end test and the demo gets the very same shared settings."""
    shared = airflow_stack.shared_settings()
    assert shared["DBLOG_SOURCE_CONN_ID"] and shared["DBLOG_STATE_CONN_ID"]
    stack_env = airflow_stack.Airflow(
        tmp_path / "home",
        "postgresql+psycopg2://x@h/db",
        airflow_stack.dag_env(
            source_conn={"conn_type": "mysql"},
            state_conn={"conn_type": "dblog_state"},
            changelog="delta:///tmp/lake",
            repair_tables=["a.b"],
        ),
    ).environ
    for key, value in shared.items():
        assert stack_env[key] == value, key
    for name in AIRFLOW_SERVICES:
        env = config["services"][name]["environment"]
        for key, value in shared.items():
            assert str(env.get(key)) == value, f"{name}: {key}={env.get(key)!r}, airflow.env says {value!r}"
        for key in airflow_stack.PER_DEPLOYMENT_DAG_SETTINGS:
            assert env.get(key) and stack_env.get(key), key
        # the same variable names for the connections: only their contents differ
        stack_conns = {k for k in stack_env if k.startswith("AIRFLOW_CONN_DBLOG")}
        compose_conns = {k for k in env if k.startswith("AIRFLOW_CONN_DBLOG")}
        assert stack_conns <= compose_conns, (stack_conns, compose_conns)
        source = json.loads(env[airflow_stack.conn_env_name(shared["DBLOG_SOURCE_CONN_ID"])])
        state = json.loads(env[airflow_stack.conn_env_name(shared["DBLOG_STATE_CONN_ID"])])
        assert source["conn_type"] == "mysql" and source["host"] == "source-mysql"
        assert state["conn_type"] == "dblog_state" and state["host"].startswith("zookeeper:")
        assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["conn_type"] == "spark"
        # the lake the capture writes is the volume every component mounts
        assert env["DBLOG_CHANGELOG"] == "delta:///opt/dblog/lake"
        # tokens signed by one component are checked by the others
        assert (
            env["AIRFLOW__API_AUTH__JWT_SECRET"]
            == config["services"]["airflow-apiserver"]["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"]
        )


def test_yaml_fallback_agrees_with_the_client(config):
    """The PyYAML reading (used without a compose client) sees the same environment."""
    if compose_client() is None:
        pytest.skip("no compose client: the fallback is what the other tests used")
    fallback = yaml_config()
    for name in AIRFLOW_SERVICES:
        want = {k: str(v) for k, v in config["services"][name]["environment"].items()}
        got = fallback["services"][name]["environment"]
        # ${VAR:-default} stays unresolved in the raw file; compare the rest
        assert {k: v for k, v in got.items() if "${" not in v} == {k: want[k] for k, v in got.items() if "${" not in v}


def test_dockerfile_installs_the_provider():
    text = (DOCKER / "Dockerfile").read_text()
    assert "FROM apache/airflow:${AIRFLOW_VERSION}-python3.11" in text
    assert "ARG AIRFLOW_VERSION=3." in text
    assert "pip install" in text and "/opt/dblog-src" in text
    assert "airflow providers list | grep -q airflow-provider-dblog" in text
