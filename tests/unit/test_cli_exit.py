"""``dblog``'s process exit (cli.run): main's exit code, output flushed, no native destructors."""

from __future__ import annotations

import subprocess
import sys

import pytest

RUN = """
import sys
from airflow_provider_dblog import cli
def fake():
    print("done", end="")  # no newline: still flushed before the hard exit
    print("note", file=sys.stderr, end="")
    {body}
cli.main = fake
cli.run()
raise SystemExit(99)  # never reached: run() ends the process
"""


@pytest.mark.parametrize(
    ("body", "code", "err"),
    [
        ("return 0", 0, "note"),
        ("return 1", 1, "note"),
        ("raise SystemExit(2)", 2, "note"),  # argparse's usage error
        ("raise SystemExit('bad')", 1, "bad"),
        ("raise RuntimeError('boom')", 1, "RuntimeError: boom"),
        ("raise KeyboardInterrupt", 130, "note"),
    ],
)
def test_run_exits_with_mains_code_and_flushed_output(body, code, err):
    proc = subprocess.run([sys.executable, "-c", RUN.format(body=body)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == "done"
    assert err in proc.stderr


def test_run_skips_exit_time_handlers():
    """A handler registered for interpreter exit (as native libraries' destructors run then)
    does not run: os._exit ends the process."""
    body = "import atexit; atexit.register(lambda: print('atexit ran')); return 0"
    proc = subprocess.run([sys.executable, "-c", RUN.format(body=body)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "atexit ran" not in proc.stdout


SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "-p", SECRET],
        ["status", f"-p{SECRET}"],
        ["dump", "--all", f"--password={SECRET}"],
        ["dump", "--all", "--password", SECRET],
        ["status", "--passwd", SECRET],
        ["status", "--sslpassword", SECRET],
        ["status", "--pasword", SECRET],  # a typo of a credential option: unknown, value not shown
        ["status", "--whatever", SECRET],
        ["status", "--host", f"dblog:{SECRET}@127.0.0.1"],
        ["status", "--output", f"kafka://user:{SECRET}@broker:9092"],
        ["status", "--output", f"s3x://KEY:{SECRET}@bucket/x"],
        ["status", "--output", f"delta://user:{SECRET}@host/lake"],
        ["status", "--state", f"redis://user:{SECRET}@host/0"],
    ],
)
def test_credentials_in_argv_are_refused_and_never_repeated(argv, capsys, tmp_path, monkeypatch):
    from airflow_provider_dblog import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DBLOG_CONFIG", raising=False)
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's usage error
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and "error:" in err
    assert SECRET not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing created under a name holding the password


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["capture", "--heartbeat-interval", "-1"], "--heartbeat-interval: must be a number >= 0"),
        (["capture", "--status-interval", "0"], "--status-interval: must be a number >= 0.001"),
        (["capture", "--max-seconds", "-1"], "--max-seconds: must be a number >= 0.001"),
        (["capture", "--max-seconds", "inf"], "--max-seconds: must be a number"),
        (["capture", "--schema-check-interval", "-2"], "--schema-check-interval: must be a number >= 0"),
        (["capture", "--port", "5432.9"], "--port: must be an integer from 1 to 65,535, not '5432.9'"),
        (["capture", "--port", "0"], "--port: must be an integer from 1 to 65,535"),
        (["capture", "--server-id", "0"], "--server-id: must be an integer from 1 to 4,294,967,295"),
        (["dump", "--all", "--chunk-size", "0"], "--chunk-size: must be an integer from 1 to 1,000,000"),
        (["dump", "--all", "--delay-ms", "-5"], "--delay-ms: must be an integer >= 0"),
        (["dump", "--all", "--readers", "17"], "--readers: must be an integer from 1 to 16"),
        (["dump", "--all", "--readers", "0"], "--readers: must be an integer from 1 to 16"),
        (["throttle", "d1", "--chunk-size", "-3"], "--chunk-size: must be an integer from 1"),
        (["throttle", "d1", "--delay-ms", "1.5"], "--delay-ms: must be an integer >= 0 (milliseconds), not '1.5'"),
        (["verify", "--show", "-1"], "--show: must be an integer >= 0"),
    ],
)
def test_numeric_options_out_of_range_are_usage_errors(argv, needle, capsys):
    from airflow_provider_dblog import cli

    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert needle in capsys.readouterr().err


def test_an_empty_tables_option_is_refused_not_every_table(capsys, monkeypatch):
    from airflow_provider_dblog import cli

    monkeypatch.delenv("DBLOG_CONFIG", raising=False)
    assert cli.main(["status", "--tables", ","]) == 2
    assert "leave tables out to capture every table" in capsys.readouterr().err
