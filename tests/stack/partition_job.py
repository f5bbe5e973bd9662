"""The job of the scoped backfill (tests/celery/test_scoped_backfill.py, benchmarks/backfill_throughput.py).

Run by the fake spark-submit (tests/fake_spark), it writes one date partition:
``<table>/date=<date>/part-t<try>.txt`` (text: the date and the staging branch). The file is named
after the try, so two tries' publications stacked in one partition show as two files.

Arguments: ``spec=<JSON>`` and ``date=<YYYY-MM-DD>``. Spec keys: ``table`` (default
``tables/daily``); ``sleep`` (seconds: the job's fixed duration, standing for a remote cluster);
``block_dates`` (dates whose job waits, up to 600 s, until ``<signal_dir>/<date>.unblock`` exists:
a try the test clears while it runs); ``signal_dir``: the job writes ``<staging branch>.started``
(JSON: pid, try, date, time) when it starts and ``.done`` when its output is written
(:class:`tests.stack.tier.Signals` reads them).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

# Run as a script: its folder is sys.path[0].
from sched_job import write_signal

from airflow_lakefence.core.names.staging_names import parse_staging_branch_name
from airflow_lakefence.spark import lakefence_locations

BLOCK_LIMIT_S = 600.0


def main() -> None:
    args = dict(arg.split("=", 1) for arg in sys.argv[1:])
    spec = json.loads(args.get("spec") or "{}")
    date = args["date"]
    loc = lakefence_locations()
    staging = loc.staging_branch or "read-only"
    info = parse_staging_branch_name(staging)
    try_number = info.try_number if info is not None else 0
    signal_dir = spec.get("signal_dir")
    facts = {"pid": os.getpid(), "try": try_number, "date": date}
    write_signal(signal_dir, f"{staging}.started", {**facts, "time": time.time()})
    if signal_dir and date in spec.get("block_dates", []):
        unblock = Path(signal_dir) / f"{date}.unblock"
        deadline = time.monotonic() + BLOCK_LIMIT_S
        while not unblock.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    time.sleep(float(spec.get("sleep", 0)))
    output = loc.output_path(f"{spec.get('table', 'tables/daily')}/date={date}/part-t{try_number}.txt")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(f"{date} {staging}")
    write_signal(signal_dir, f"{staging}.done", {**facts, "time": time.time()})
    print("PARTITION-JOB-DONE", staging, date)


if __name__ == "__main__":
    main()
