"""The ``dblog`` command: capture, dump, status, pause/resume/cancel/throttle, verify."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import faulthandler
import functools
import json
import logging
import os
import signal
import sys
import threading
import traceback
from typing import Any, Callable, Optional

from . import config, sources, verification
from .cli_args import (
    CHUNK_SIZE,
    DELAY_MS,
    MEBIBYTES,
    SECONDS,
    SECONDS_OR_OFF,
    Parser,
    number,
    option_names,
    refuse_credentials,
)
from .core import dump_requests as requests
from .core.dumps import MAX_READERS
from .core.errors import DBLogError
from .core.scheduler import describe_wait
from .parent_pipe import stop_with_parent
from .state.lease import make_lease

log = logging.getLogger("dblog")


def _source_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("source (overrides the config file's [source])")
    g.add_argument("--source-type", choices=[name for d in sources.descriptors() for name in (d.kind, *d.aliases)])
    g.add_argument("--source-id")
    g.add_argument("--host")
    g.add_argument("--port", type=number(int, 1, 65535))
    g.add_argument("--user")
    g.add_argument("--database")
    g.add_argument("--password-env", help="name of the environment variable holding the password")
    g.add_argument("--password-file", help="file holding the password")
    g.add_argument("--tables", help="comma-separated schema.table list to capture (default: all)")
    g.add_argument("--plugin", choices=["pgoutput", "wal2json"])
    g.add_argument("--server-id", type=number(int, 1, 2**32 - 1))
    g.add_argument("--watermark-schema")
    p.add_argument(
        "--state",
        help="state store: a file (default dblog-state/state.db) or zk://host:port[,host:port]/chroot for ZooKeeper",
    )
    p.add_argument("--output", help="changelog: delta://DIR (default), jsonl://DIR, python:mod:fn")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="dblog", description="DBLog change-data capture.")
    parser.add_argument("--config", help="TOML config file (or DBLOG_CONFIG)")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("capture", help="capture the log and run requested dumps")
    _source_options(p)
    p.add_argument("--max-seconds", type=SECONDS, help="stop after this many seconds")
    p.add_argument("--status-interval", type=SECONDS, default=5.0)
    p.add_argument("--reset-position", action="store_true", help="forget the checkpoint (then run a full dump)")
    p.add_argument("--identity", help="this instance's name in the leader lease (default host:pid)")
    p.add_argument(
        "--heartbeat-interval",
        type=SECONDS_OR_OFF,
        default=10.0,
        help="seconds without log activity before a heartbeat watermark (0: off)",
    )
    p.add_argument(
        "--redump-on-position-lost",
        action="store_true",
        help="when the log position is lost (slot dropped, binlog purged), start at the log's end and "
        "dump every table instead of stopping",
    )
    p.add_argument(
        "--schema-check-interval",
        type=SECONDS_OR_OFF,
        default=10.0,
        help="seconds between comparisons of the tables' schemas with the catalog; a changed "
        "table is dumped again (0: only when the log shows a new shape)",
    )
    p.add_argument(
        "--buffer-mb",
        type=MEBIBYTES,
        default=64.0,
        help="about this many MiB of events read from the log and not yet written; beyond it the "
        "log waits (a slow or unreachable output), plus the batch being written (at most 20 MiB)",
    )
    p.add_argument(
        "--output-outage-timeout",
        type=SECONDS_OR_OFF,
        default=3600.0,
        help="seconds to keep retrying a batch the output refuses (a broker or object store down) "
        "before stopping; the log waits meanwhile and nothing is lost (0: for ever)",
    )
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop as on SIGTERM when standard input ends: the process that started this one holds "
        "its other end, so its death, even by SIGKILL, ends this capture (the Airflow trigger uses it)",
    )

    p.add_argument(
        "--metrics-port",
        type=number(int, 1, 65535, " (a TCP port)"),
        help="serve the capture's metrics for Prometheus on this port (docs/operations.md); OTLP export "
        "follows the standard OTEL_EXPORTER_OTLP_* environment",
    )
    p.add_argument("--metrics-host", default="0.0.0.0", help="the address of the metrics endpoint (default all)")

    p = sub.add_parser("dump", help="request a dump (the running capture performs it)")
    _source_options(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--table", action="append", help="table to dump (repeatable)")
    g.add_argument("--all", action="store_true", help="dump every captured table")
    p.add_argument("--key", action="append", help="a key as JSON (repeatable; needs one --table)")
    p.add_argument(
        "--where",
        help="only rows this SQL expression accepts (one --table; checked by the database before the dump is recorded)",
    )
    p.add_argument("--chunk-size", type=CHUNK_SIZE, default=10_000)
    p.add_argument("--delay-ms", type=DELAY_MS, default=0)
    p.add_argument(
        "--adaptive",
        action="store_true",
        help="pace chunk size and delay by the source's health (starting from --chunk-size and --delay-ms)",
    )
    p.add_argument(
        "--readers",
        type=number(int, 1, MAX_READERS),
        default=1,
        help="connections selecting each chunk's key ranges in parallel, --chunk-size rows each (table dumps)",
    )

    p = sub.add_parser("status", help="log position, lag and dump progress")
    _source_options(p)
    p.add_argument("--json", action="store_true")

    for name, text in (("pause", "pause a dump"), ("resume", "resume a dump"), ("cancel", "cancel a dump")):
        p = sub.add_parser(name, help=text)
        _source_options(p)
        p.add_argument("dump_id")

    p = sub.add_parser("throttle", help="change a running dump's chunk size or delay")
    _source_options(p)
    p.add_argument("dump_id")
    p.add_argument("--chunk-size", type=CHUNK_SIZE)
    p.add_argument("--delay-ms", type=DELAY_MS)

    p = sub.add_parser("verify", help="replay the changelog and compare with the source")
    _source_options(p)
    p.add_argument("--table", action="append", help="table to verify (repeatable; default all)")
    p.add_argument("--show", type=number(int, 0), default=20, help="mismatches to print per table")
    p.add_argument(
        "--repair",
        action="store_true",
        help="request a dump of exactly the mismatched keys of each table (the running capture performs it)",
    )
    p.add_argument(
        "--ranges",
        action="store_true",
        help="compare key ranges by row digests computed in the database, reading only the ranges that "
        "differ (PostgreSQL, integer keys; other tables are compared whole)",
    )
    # What a deployment needs from the installed package, no checkout (docs/install.md).
    p = sub.add_parser("doctor", help="check this environment (Java, Spark, jars, source, state, connections)")
    _source_options(p)
    p.add_argument("--conn-id", action="append", default=[], help="an Airflow source connection to check (repeatable)")
    p.add_argument("--state-conn-id", help="the Airflow dblog_state connection to check")
    p.add_argument(
        "--lake", default=os.environ.get("DBLOG_LAKE"), help="the changelog's root (an s3:// lake needs S3A)"
    )
    p.add_argument("--skip", action="append", default=[], choices=["java", "spark", "jars"], help="leave a check out")

    p = sub.add_parser("spark-jars", help="resolve the Spark jobs' jars once (Delta, Kafka source, S3A)")
    from .spark import jars

    jars.add_arguments(p)

    p = sub.add_parser("example-dags", help="copy the example DAGs into a DAGs folder")
    p.add_argument("--dir", required=True, help="the Airflow DAGs folder")
    p.add_argument("--force", action="store_true", help="replace files that exist")
    return parser


def cmd_doctor(args: argparse.Namespace, src: dict, state_cfg: dict, out_cfg: dict, parts: "Parts") -> int:
    from .deploy import doctor

    checks = [doctor.check_package()]
    if "java" not in args.skip:
        checks.append(doctor.check_java())
    if "spark" not in args.skip:
        checks.append(doctor.check_spark())
    if "jars" not in args.skip:
        checks.append(doctor.check_jars(args.lake or out_cfg.get("url")))
    if src.get("type") or src.get("host"):
        checks.append(doctor.check_source(lambda: parts.source(src)))
    if state_cfg or os.environ.get("DBLOG_STATE"):
        checks.append(doctor.check_state(lambda: parts.existing_state(state_cfg)))
    if args.conn_id or args.state_conn_id:
        checks.append(doctor.check_connections(args.conn_id, args.state_conn_id))
    return doctor.run_checks(checks)


@dataclasses.dataclass(frozen=True)
class Parts:
    """How the command builds the engine's parts from the config file's tables.

    ``main`` takes another ``Parts`` to wrap them: a program embedding the command, or the
    test harness (tests/support/faults.py slows the output's commits or widens the window)."""

    source: Callable[[dict], Any] = config.make_source
    state: Callable[[dict], Any] = config.make_state
    output: Callable[[dict], Any] = config.make_output
    # The commands that read, request or control a capture's dumps: a store a capture made
    # only, so that a mistyped --state is an error, not an empty store that reports nothing.
    existing_state: Callable[[dict], Any] = functools.partial(config.make_state, create=False)


def _settings(args: argparse.Namespace) -> tuple[dict, dict, dict]:
    cfg = config.load_config(args.config)
    src = dict(cfg.get("source", {}))
    for opt, key in (
        ("source_type", "type"),
        ("source_id", "id"),
        ("host", "host"),
        ("port", "port"),
        ("user", "user"),
        ("database", "database"),
        ("password_env", "password_env"),
        ("password_file", "password_file"),
        ("plugin", "plugin"),
        ("server_id", "server_id"),
        ("watermark_schema", "watermark_schema"),
    ):
        v = getattr(args, opt, None)
        if v is not None:
            src[key] = v
    if getattr(args, "tables", None) is not None:  # "" or ",": an empty list, refused by the config check
        src["tables"] = [t.strip() for t in args.tables.split(",") if t.strip()]
    state = dict(cfg.get("state", {}))
    if args.state:
        state["path"] = args.state
    out = dict(cfg.get("output", {}))
    if args.output:
        out["url"] = args.output
    # Every command checks every setting, so that a bad one (a host with a password in it)
    # is refused even by a command that does not use it.
    config.check_config({"source": src, "state": state, "output": out}, "the command line or config file")
    return src, state, out


def cmd_capture(args, src, state_cfg, out_cfg, parts: Parts) -> int:
    from .core.engine import Engine, EngineConfig

    source, state, output = parts.source(src), parts.state(state_cfg), parts.output(out_cfg)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    # `kill -USR1 PID` prints every thread's stack to stderr, the capture going on: what a
    # capture that reports nothing is waiting for (docs/cli.md).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if args.exit_with_parent:
        stop_with_parent(stop)

    from .metrics import start_metrics

    metrics = start_metrics(source.source_id, args.metrics_port, args.metrics_host, args.identity)

    def progress(st: dict) -> None:
        if metrics is not None:
            metrics.update(st)
        dumps = [d for d in state.list_dumps(source.source_id) if not d.status.finished]
        dtext = "; ".join(
            f"dump {d.dump_id} {d.status.value} rows={sum(p.rows for p in d.progress.values())}" for d in dumps
        )
        print(
            f"[dblog] position={st['position']} checkpoint={st['checkpoint']} "
            f"events/s={st['events_per_s']} buffered={st['buffered']} buffered_mb={st.get('buffered_mb')} window={st['window']}"
            + f" lag_bytes={st.get('lag_bytes')}"
            + (f" epoch={st['leader']['epoch']}" if st.get("leader") else "")
            + (f" | {dtext}" if dtext else ""),
            flush=True,
        )
        for warning in st.get("warnings") or ():
            print(f"[dblog] WARNING: {warning}", flush=True)

    def standby(leader: Optional[dict]) -> None:
        who = f"{leader['identity']} (epoch {leader['epoch']})" if leader else "another instance"
        print(f"[dblog] standby: {who} leads source {source.source_id}; waiting for the lease", flush=True)

    engine_config = EngineConfig(
        status_interval=args.status_interval,
        reset_position=args.reset_position,  # applied once this instance holds the lease
        heartbeat_interval=args.heartbeat_interval or None,
        schema_check_interval=args.schema_check_interval,
        redump_on_position_lost=args.redump_on_position_lost,
        output_outage_timeout=args.output_outage_timeout,
        writer_buffer_bytes=int(args.buffer_mb * 2**20),
    )
    # Every capture takes the source's leader lease (a file lock for the local store, a
    # ZooKeeper lease otherwise): one writer per source, fenced by the epoch (invariant 7).
    lease = make_lease(state, source.source_id, args.identity)
    engine = Engine(
        source,
        output,
        state,
        engine_config,
        progress,
        lease=lease,
        on_standby=standby,
        on_commit=metrics.commit if metrics is not None else None,
    )
    try:
        engine.run(stop, args.max_seconds)
    finally:
        state.close()
    return 0


def cmd_dump(args, src, state_cfg, out_cfg, parts: Parts) -> int:
    state = parts.existing_state(state_cfg)
    try:
        spec = requests.request_dump(
            parts.source(src),
            state,
            None if args.all else args.table,
            args.key,
            chunk_size=args.chunk_size,
            delay_ms=args.delay_ms,
            keys_as_json=True,
            where=args.where,
            adaptive=args.adaptive,
            readers=args.readers,
        )
    finally:
        state.close()
    print(spec.dump_id)
    return 0


def cmd_status(args, src, state_cfg, out_cfg, parts: Parts) -> int:
    state = parts.existing_state(state_cfg)
    source_id = src.get("id")
    try:
        result = requests.read_status(state, source_id, make_lease(state, source_id) if source_id else None)
    finally:
        state.close()
    if args.json:
        print(json.dumps(result, indent=2, default=str))
        return 0
    capture, leader = result["capture"], result["leader"]
    print(f"source {source_id}: checkpoint {result['checkpoint']}")
    if leader:
        print(
            f"  leader {leader['identity']} epoch {leader['epoch']}"
            + (f", {leader['standby']} standby" if leader.get("standby") is not None else "")
        )
    if source_id and not (capture or leader or result["checkpoint"] or result["dumps"]):
        print(f"  no capture of source {source_id} has stored anything in this state store yet")
    if capture:
        if capture["state"] == "stopped":
            since = datetime.datetime.fromtimestamp(capture["stopped_at"]).astimezone().isoformat(timespec="seconds")
            print(f"  capture pid {capture['pid']} stopped since {since} ({capture['why']}); its last report:")
        elif capture["state"] == "silent":
            print(f"  capture pid {capture['pid']} silent: {capture['why']}; its last report:")
        else:
            print(f"  capture pid {capture['pid']} running ({capture['age_s']} s ago):")
        print(
            f"    position {capture['position']}, {capture['events_per_s']} events/s, "
            f"lag {capture.get('lag_bytes')} bytes / {capture.get('lag_seconds')} s"
        )
        outage = capture.get("output_outage")
        if outage:
            print(
                f"    output refusing writes for {outage['seconds']} s ({outage['attempts']} attempts); "
                f"holding {capture.get('buffered')} events ({capture.get('buffered_mb')} MB) and a batch of "
                f"{capture.get('in_flight')} being retried"
            )
    for warning in result["warnings"]:
        print(f"  WARNING: {warning}")
    for d in result["dumps"]:
        print(
            f"  dump {d['dump_id']} {d['status']}: tables={d['tables']} rows={d['rows']} chunks={d['chunks']}"
            + (f" where=({d['where']})" if d.get("where") else "")
            + (f" readers={d['readers']}" if (d.get("readers") or 1) > 1 else "")
            + (
                f" pace=adaptive chunk={d['pace']['chunk_size']} delay={d['pace']['delay_ms']}ms"
                f" ({d['pace']['signal']})"
                if (d.get("pace") or {}).get("mode") == "adaptive"
                else ""
            )
            + (f" eta={d['eta_seconds']}s" if d.get("eta_seconds") is not None else "")
            + (f" waiting={describe_wait(d['waiting'])}" if d.get("waiting") else "")
            + (f" error={d['error']}" if d["error"] else "")
        )
    return 0


def cmd_control(args, src, state_cfg, out_cfg, parts: Parts) -> int:
    state = parts.existing_state(state_cfg)
    try:
        c = requests.control_dump(
            state, args.dump_id, args.command, getattr(args, "chunk_size", None), getattr(args, "delay_ms", None)
        )
    finally:
        state.close()
    print(
        f"dump {args.dump_id}: paused={c.paused} cancelled={c.cancelled} chunk_size={c.chunk_size} delay_ms={c.delay_ms}"
    )
    return 0


def cmd_verify(args, src, state_cfg, out_cfg, parts: Parts) -> int:
    if args.repair:  # a repair is a dump request: refuse a store no capture made before comparing
        parts.existing_state(state_cfg).close()
    source, output = parts.source(src), parts.output(out_cfg)
    source.open()
    output.open()
    report = verification.printer("in the changelog replay", args.show)
    try:
        results = verification.verify(
            source, args.table, verification.against_replay(source, output, args.ranges), report
        )
    finally:
        source.close()
        output.close()
    if args.repair:
        verification.repair(
            results,
            lambda: parts.source(src),
            lambda: parts.existing_state(state_cfg),
            on_repair=verification.print_repair,
        )
    return 1 if verification.drifted(results) else 0


def main(argv: Optional[list[str]] = None, parts: Parts = Parts()) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    try:
        refuse_credentials(argv, option_names(parser))
    except DBLogError as exc:
        print(f"dblog: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.command == "spark-jars":
        from .spark import jars

        return jars.main_with(args)
    if args.command == "example-dags":
        from pathlib import Path

        from .deploy.examples import copy_examples

        return copy_examples(Path(args.dir), args.force)
    try:
        src, state_cfg, out_cfg = _settings(args)
        handler = {
            "doctor": cmd_doctor,
            "capture": cmd_capture,
            "dump": cmd_dump,
            "status": cmd_status,
            "verify": cmd_verify,
            "pause": cmd_control,
            "resume": cmd_control,
            "cancel": cmd_control,
            "throttle": cmd_control,
        }[args.command]
        return handler(args, src, state_cfg, out_cfg, parts)
    except DBLogError as exc:
        print(f"dblog: error: {exc}", file=sys.stderr)
        return 2


def run() -> None:
    """The ``dblog`` command (console script and ``python -m``): ``main``, then leave the
    process without running native libraries' exit-time destructors. Arrow's thread pools
    (used by deltalake's scans) can abort a normally exiting interpreter after the command
    did its work - "terminate called without an active exception", SIGABRT, exit code -6
    (apache/arrow#34314, delta-io/delta-rs#2184) - which would turn a clean ``verify`` into
    a failure. Every command has closed what it opened by the time ``main`` returns, so
    only the exit code and the flushed output must survive."""
    try:
        code = main()
    except SystemExit as exc:  # argparse: usage errors, --help
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130  # as a shell reports a SIGINT
    except BaseException:  # noqa: BLE001 - shown as Python would, then the exit code 1
        traceback.print_exc()
        code = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
