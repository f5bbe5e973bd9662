"""The Spark application of the stack tiers (scheduler, Celery; run by tests/fake_spark/spark-submit).

It tells the test where it is, so the test can act "mid-Spark" without guessing from the clock:
with ``signal_dir`` set it writes ``<signal_dir>/<staging branch>.started`` (JSON: pid, try
number, target branch, time) as soon as it runs and ``.done`` when it has written its output.

Spec keys (JSON in argv[1], after ``spec=``): ``files`` ({path: text}); ``stamp_path`` (a file
whose content is the attempt's staging branch name, so every try stages a different commit);
``sleep_by_try`` ({"1": seconds}); ``sleep_by_target`` ({target branch: seconds}, before
``sleep_by_try``); ``signal_dir``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from airflow_lakefence.core.names.staging_names import parse_staging_branch_name
from airflow_lakefence.spark import lakefence_locations


def write_signal(signal_dir: str | None, name: str, payload: dict[str, object]) -> None:
    if not signal_dir:
        return
    path = Path(signal_dir) / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    tmp.replace(path)  # atomic: the reader never sees half a file


def main() -> None:
    spec = json.loads(sys.argv[1].removeprefix("spec=")) if len(sys.argv) > 1 else {}
    loc = lakefence_locations()
    staging = loc.staging_branch or "read-only"
    info = parse_staging_branch_name(staging)
    try_number = info.try_number if info is not None else 0
    signal_dir = spec.get("signal_dir")
    facts = {"pid": os.getpid(), "try": try_number, "target": os.environ.get("LAKEFENCE_TARGET_BRANCH")}
    write_signal(signal_dir, f"{staging}.started", {**facts, "time": time.time()})
    target = os.environ.get("LAKEFENCE_TARGET_BRANCH", "")
    sleep = spec.get("sleep_by_target", {}).get(target, spec.get("sleep_by_try", {}).get(str(try_number), 0))
    time.sleep(float(sleep))
    files = dict(spec.get("files", {}))
    if spec.get("stamp_path"):
        files[spec["stamp_path"]] = staging
    for path, text in files.items():
        target = loc.output_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    write_signal(signal_dir, f"{staging}.done", {**facts, "time": time.time()})
    print("SCHED-JOB-DONE", staging, len(files))


if __name__ == "__main__":
    main()
