"""The randomized race sweep: many seeded interleavings of a zombie try, a new try and a foreign writer.

``python -m tests.reliability.sweep --seeds 200 [--first 0] [--workers 3] [--json out.json]``
(or ``python benchmarks/race_sweep.py ...``) starts a local lakeFS server, runs every scenario of
:class:`~tests.reliability.harness.RaceScenario` for seeds ``first .. first+seeds-1``, checks the
invariants and prints a summary: how many scenarios passed, every violation with its seed (rerun
one with ``--first SEED --seeds 1``), and how often each documented soft-fence limit was observed.
The exit code is 1 when any invariant was violated.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.reliability.harness import ForkServer, Lake, Launcher, RaceReport, RaceScenario, attempt_env, run_race


def run_sweep(
    launcher: Launcher, lake: Lake, seeds: list[int], workers: int, workdir: Path, home: Path
) -> list[RaceReport]:
    """Run the scenarios of ``seeds``, ``workers`` at a time."""

    def one(seed: int) -> RaceReport:
        return run_race(launcher, lake, workdir / f"seed-{seed}", home, RaceScenario.from_seed(seed))

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, seeds))


def summarize(reports: list[RaceReport]) -> dict[str, Any]:
    """Aggregate figures of a sweep."""
    holes: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    decisions: Counter[str] = Counter()
    for report in reports:
        holes.update(set(report.verdict.holes))
        for name in ("try1", "try2"):
            o = report.outcomes[name]
            outcomes[f"{name}:{o.get('type') or o['status']}"] += 1
        decisions.update(report.outcomes.get("decisions", []))  # type: ignore[arg-type]
    return {
        "scenarios": len(reports),
        "passed": sum(r.verdict.ok for r in reports),
        "violations": {r.scenario.seed: r.verdict.violations for r in reports if not r.verdict.ok},
        "holes": dict(holes),
        "outcomes": dict(sorted(outcomes.items())),
        "decisions": dict(sorted(decisions.items())),
        "with_foreign_writer": sum(bool(r.scenario.foreign) for r in reports),
        "seconds_total": round(sum(r.seconds for r in reports), 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the sweep from the command line; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="number of seeds (default 200)")
    parser.add_argument("--first", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--workers", type=int, default=3, help="scenarios run at a time (default 3)")
    parser.add_argument("--json", help="write every scenario's report and the summary here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, registries)")
    args = parser.parse_args(argv)

    import logging

    from airflow_lakefence.testing.lakefs_server import LakeFSServer

    logging.getLogger("airflow.task").setLevel(logging.WARNING)  # the cleaner's per-branch lines

    root = Path(tempfile.mkdtemp(prefix="lakefence-sweep-"))
    home = root / "airflow-home"
    home.mkdir()
    started = time.monotonic()
    with LakeFSServer(root / "lakefs") as server:
        lake = Lake(server.url, server.access_key_id, server.secret_access_key)
        launcher = ForkServer(attempt_env(lake, home))
        try:
            seeds = list(range(args.first, args.first + args.seeds))
            reports = run_sweep(launcher, lake, seeds, args.workers, root / "runs", home)
        finally:
            launcher.close()
    summary = summarize(reports)
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    summary["workers"] = args.workers
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"summary": summary, "reports": [r.summary() for r in reports]}, indent=2)
        )
    if args.keep:
        print(f"work directory kept: {root}", file=sys.stderr)
    else:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0 if not summary["violations"] else 1


if __name__ == "__main__":
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
    sys.exit(main())
