"""The package installs and works as a user gets it, without a checkout or a Rust toolchain
(docs/install.md): ``scripts/dist`` builds the sdist, the manylinux wheel and the pure wheel;
the manylinux wheel goes into a fresh venv; then, from a directory outside the checkout with
no cargo on PATH, Airflow lists the provider, the example DAGs copied by ``dblog
example-dags`` parse, ``dblog spark-jars`` resolves the jars, ``dblog doctor`` passes, and a
capture + dump + ``dblog verify`` runs on the compiled decoder. The pure wheel then replaces
it and says, once, that the slow path runs; a native build without cargo stops with the fix.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.databases import env, mysql_root
from tests.support.spark_jars import spark_jars

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SLOW_PATH = "runs without its compiled decoder"


def run(cmd, *, cwd, environ, timeout=600, check=True) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    environ = {**os.environ, "DIST_DIR": str(out), "DIST_TARGETS": "x86_64", "PY": sys.executable}
    run([str(REPO / "scripts" / "dist")], cwd=REPO, environ=environ, timeout=1200)
    return out


@pytest.fixture(scope="module")
def fresh(tmp_path_factory, dist):
    """A fresh venv with the manylinux wheel, and an environment without the checkout or cargo."""
    root = tmp_path_factory.mktemp("fresh")
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root, environ=dict(os.environ))
    [wheel] = dist.glob("*manylinux_2_28_x86_64.whl")
    # uv: the same resolution as `pip install` (docs/install.md gives both), three times faster
    run(
        [str(VENV_BIN / "uv"), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(wheel)],
        cwd=root,
        environ={**os.environ, "UV_CACHE_DIR": str(root / "uv-cache")},
        timeout=1200,
    )
    shutil.rmtree(root / "uv-cache", ignore_errors=True)
    keep = ("HOME", "LANG", "JAVA_HOME", "TMPDIR")
    environ = {k: v for k, v in os.environ.items() if k in keep or k.startswith("DBLOG_")}
    environ.update(
        PATH=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",  # no ~/.cargo/bin, no pyenv shims
        AIRFLOW_HOME=str(root / "airflow"),
        DBLOG_SPARK_JARS_DIR=str(root / "jars"),
    )
    assert shutil.which("cargo", path=environ["PATH"]) is None
    work = root / "work"
    work.mkdir()
    return venv, environ, work, dist


def test_the_wheels_are_what_their_names_say(dist):
    names = sorted(p.name for p in dist.iterdir())
    assert any(n.endswith(".tar.gz") for n in names), names
    [native] = [n for n in names if n.endswith("-cp310-abi3-manylinux_2_28_x86_64.whl")]
    [pure] = [n for n in names if n.endswith("-py3-none-any.whl")]
    out = run([str(VENV_BIN / "auditwheel"), "show", str(dist / native)], cwd=dist, environ=dict(os.environ))
    assert 'consistent with the following platform tag: "manylinux_2_28_x86_64"' in " ".join(out.stdout.split())
    listing = run([sys.executable, "-m", "zipfile", "-l", str(dist / pure)], cwd=dist, environ=dict(os.environ))
    assert "_rows_native" not in listing.stdout and "example_dags/dblog_land.py" in listing.stdout
    sdist = run(
        [sys.executable, "-c", f"import tarfile; print(tarfile.open('{dist / names[-1]}').getnames())"],
        cwd=dist,
        environ=dict(os.environ),
    )
    assert "native/src/lib.rs" in sdist.stdout and "native/target" not in sdist.stdout


def test_the_installed_package_works_without_a_checkout(fresh):
    venv, environ, work, _ = fresh
    py, dblog, airflow = (str(venv / "bin" / n) for n in ("python", "dblog", "airflow"))
    found = run(
        [py, "-c", "import airflow_provider_dblog, sys; print(airflow_provider_dblog.__file__)"],
        cwd=work,
        environ=environ,
    )
    assert str(venv) in found.stdout and str(REPO) not in found.stdout
    native = run(
        [py, "-c", "import airflow_provider_dblog.sources.native as n; print(n.compiled())"], cwd=work, environ=environ
    )
    assert native.stdout.strip() == "True" and SLOW_PATH not in native.stderr

    providers = run([airflow, "providers", "get", "airflow-provider-dblog", "-o", "json"], cwd=work, environ=environ)
    assert "airflow-provider-dblog" in providers.stdout, providers.stdout

    run([dblog, "example-dags", "--dir", str(work / "dags")], cwd=work, environ=environ)
    parse = (
        "import json, sys\nfrom airflow.dag_processing.dagbag import DagBag\n"
        "bag = DagBag(dag_folder=sys.argv[1])\n"
        "print(json.dumps({'errors': {k: v[-400:] for k, v in bag.import_errors.items()}, 'dags': sorted(bag.dag_ids)}))"
    )
    bag = json.loads(run([py, "-c", parse, str(work / "dags")], cwd=work, environ=environ).stdout.splitlines()[-1])
    assert bag["errors"] == {} and {"dblog_capture", "dblog_land", "dblog_repair_dump"} <= set(bag["dags"]), bag

    assert run([dblog, "spark-jars", "--package"], cwd=work, environ=environ).stdout.strip().startswith("io.delta:")
    # Maven resolves from a local repository that already holds the artifacts (the checkout's,
    # which the Spark tests need anyway): the command's whole path runs, nothing is downloaded
    spark_jars()
    checkout_jars = Path(os.environ.get("DBLOG_SPARK_JARS_DIR") or REPO / ".spark-jars")
    if (checkout_jars / "m2").is_dir():
        shutil.copytree(checkout_jars / "m2", Path(environ["DBLOG_SPARK_JARS_DIR"]) / "m2", copy_function=os.link)
    jars = run([dblog, "spark-jars", "--no-s3a"], cwd=work, environ=environ, timeout=900).stdout.strip().split(",")
    assert jars and all(Path(j).is_file() and j.startswith(environ["DBLOG_SPARK_JARS_DIR"]) for j in jars), jars

    capture_dump_verify(dblog, environ, work)


def test_the_pure_wheel_says_it_runs_the_slow_path(fresh):
    venv, environ, work, dist = fresh
    [pure] = dist.glob("*-py3-none-any.whl")
    run(
        [
            str(VENV_BIN / "uv"),
            "pip",
            "install",
            "-q",
            "--reinstall",
            "--no-deps",
            "--python",
            str(venv / "bin" / "python"),
            str(pure),
        ],
        cwd=work,
        environ={**os.environ, "UV_CACHE_DIR": str(work / "uv-cache")},
    )
    py = str(venv / "bin" / "python")
    out = run(
        [py, "-c", "import airflow_provider_dblog.sources.native as n; print(n.compiled())"], cwd=work, environ=environ
    )
    assert out.stdout.strip() == "False" and out.stderr.count(SLOW_PATH) == 1, out.stderr
    doctor = run(
        [str(venv / "bin" / "dblog"), "doctor", "--skip", "spark", "--skip", "jars", "--skip", "java"],
        cwd=work,
        environ=environ,
    )
    assert "[warn] compiled decoder: not installed" in doctor.stdout, doctor.stdout
    capture_dump_verify(str(venv / "bin" / "dblog"), environ, work)


def test_a_native_build_without_cargo_stops_with_the_fix(dist, tmp_path):
    [sdist] = dist.glob("*.tar.gz")
    environ = {**os.environ, "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin"}
    environ.pop("CARGO", None)
    out = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(sdist)],
        cwd=tmp_path,
        environ=environ,
        check=False,
    )
    assert out.returncode != 0 and not list(tmp_path.glob("*.whl"))
    text = out.stdout + out.stderr
    assert "'cargo' is not on PATH" in text and "DBLOG_PURE_PYTHON=1" in text, text[-2000:]


def capture_dump_verify(dblog: str, environ: dict, work: Path) -> None:
    """A MariaDB table dumped by a capture, then `dblog verify` against the changelog."""
    root = mysql_root()
    tag = uuid.uuid4().hex[:8]
    db = f"inst_{tag}"
    cur = root.cursor()
    cur.execute(f"CREATE DATABASE {db}")
    cur.execute(f"CREATE TABLE {db}.t (id int PRIMARY KEY, v varchar(20), d datetime(6), x decimal(10,2))")
    cur.executemany(f"INSERT INTO {db}.t VALUES (%s, %s, NOW(6), %s)", [(i, f"v{i}", i / 4) for i in range(1, 201)])
    config = work / f"{tag}.toml"
    config.write_text(
        "[source]\n"
        f'type = "mysql"\nid = "inst{tag}"\nhost = "{env("DBLOG_MYSQL_HOST")}"\nport = {env("DBLOG_MYSQL_PORT")}\n'
        f'user = "{env("DBLOG_MYSQL_USER")}"\npassword_env = "DBLOG_MYSQL_PASSWORD"\ntables = ["{db}.t"]\n'
        f'[state]\npath = "{work / tag}-state.db"\n[output]\nurl = "jsonl://{work / tag}-out"\n'
    )
    base = [dblog, "--config", str(config)]
    capture = subprocess.Popen(
        [*base, "capture", "--max-seconds", "40"],
        cwd=work,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while run([*base, "status"], cwd=work, environ=environ, check=False).returncode != 0:
            assert capture.poll() is None and time.monotonic() < deadline, "the capture did not start"
            time.sleep(0.5)
        run([*base, "dump", "--table", f"{db}.t"], cwd=work, environ=environ)
        cur.execute(f"UPDATE {db}.t SET v = 'changed' WHERE id <= 10")  # captured from the binlog
        while not re.search(r"dump \S+ done", s := run([*base, "status"], cwd=work, environ=environ).stdout):
            assert time.monotonic() < deadline + 60 and capture.poll() is None, s
            time.sleep(1)
        time.sleep(3)  # the update's event reaches the changelog
    finally:
        capture.terminate()
        log, _ = capture.communicate(timeout=60)
    verify = run([*base, "verify"], cwd=work, environ=environ, check=False)
    assert verify.returncode == 0, f"{verify.stdout}\n{verify.stderr}\ncapture log:\n{log[-3000:]}"
    assert "200" in verify.stdout, verify.stdout
    cur.execute(f"DROP DATABASE {db}")
    root.close()
