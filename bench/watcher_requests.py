"""The changelog watcher's requests to an object store while nothing is committed (issue 32
part 5): ``ChangelogCommitTrigger`` (dblog_land's asset watcher) polling a changelog on the
test S3 store for ``--seconds``, with ``--poll-interval``. Counted from the store's own
request log (moto's, ``$DBLOG_SERVICES_DIR/logs/s3.log``): the lines naming this run's
prefix, by method. Printed: requests per minute idle, and per poll. ``--sources``: how many
sources' changelog tables the lake holds (a table each; the trigger watches them all and
lists the lake for new ones every ``--discover-interval`` seconds).

    eval "$(scripts/services env)"
    python -m bench.watcher_requests [--seconds 60] [--poll-interval 5] [--sources 1]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import time
import uuid
from pathlib import Path


def _requests(log: Path, start: int, prefix: str) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    with log.open("rb") as f:
        f.seek(start)
        for line in f.read().decode(errors="replace").splitlines():
            m = re.search(r'"(GET|PUT|HEAD|POST|DELETE) (\S+)', line)
            if m and prefix in m.group(2):
                out[m.group(1)] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--poll-interval", type=float, default=5)
    ap.add_argument("--sources", type=int, default=1)
    ap.add_argument("--discover-interval", type=float, default=60)
    args = ap.parse_args()

    from tests.support.s3_env import aws_env

    os.environ.update(aws_env())
    from airflow_provider_dblog.core.events import ChangeEvent, Op, Position
    from airflow_provider_dblog.outputs import make_output
    from airflow_provider_dblog.triggers.changelog import ChangelogCommitTrigger

    prefix = f"watch-{uuid.uuid4().hex[:8]}"
    lake = f"s3://{os.environ['DBLOG_S3_BUCKET']}/{prefix}/lake"
    out = make_output(lake)
    out.open()
    for i in range(args.sources):
        out.write([ChangeEvent(f"s{i}", "public.t", Op.CREATE, (1,), None, {"id": 1}, Position("0" * 16))], epoch=1)
    log = Path(os.environ.get("DBLOG_SERVICES_DIR", ".services")) / "logs" / "s3.log"

    trigger = ChangelogCommitTrigger(
        lake, poll_interval=args.poll_interval, min_interval=0, discover_interval=args.discover_interval
    )

    async def watch() -> tuple[int, collections.Counter]:
        gen = trigger.run()
        await gen.__anext__()  # fires once for the version written above
        start = log.stat().st_size
        end = time.monotonic() + args.seconds
        task = asyncio.ensure_future(gen.__anext__())  # nothing more is committed: never fires
        while time.monotonic() < end:
            await asyncio.sleep(0.1)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        polls = int(args.seconds // args.poll_interval)
        time.sleep(0.5)  # the server writes its log line after the answer
        return polls, _requests(log, start, prefix)

    polls, counted = asyncio.run(watch())
    total = sum(counted.values())
    print(
        json.dumps(
            {
                "seconds": args.seconds,
                "poll_interval": args.poll_interval,
                "sources": args.sources,
                "discover_interval": args.discover_interval,
                "requests": dict(counted),
                "per_minute": round(total * 60 / args.seconds, 1),
                "per_poll": round(total / max(polls, 1), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
