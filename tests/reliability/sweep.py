"""The randomized race sweep: many seeded interleavings of a zombie try, a new try and a foreign writer.

``python -m tests.reliability.sweep --seeds 200 [--first 0] [--workers 3] [--json out.json]
[--family branch|scoped|simultaneous] [--fence soft|hard|both] [--lakefs-backend local|real]
[--real-kv postgres|local]``
(or ``python benchmarks/race_sweep.py ...``)
starts the project's local lakeFS server (or real lakeFS, built from tests/real_lakefs, its KV
store on PostgreSQL unless ``--real-kv local``), runs every scenario of
:class:`~tests.reliability.harness.RaceScenario` (``--family scoped``: of
:class:`~tests.reliability.scoped_race.ScopedScenario`, several writers on one branch with the scoped
fence) for seeds ``first .. first+seeds-1``, checks the
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
from tests.reliability.scoped_race import SCOPED_CLASSES, ScopedReport, ScopedScenario, run_scoped_race


def run_sweep(
    launcher: Launcher,
    lake: Lake,
    seeds: list[int],
    workers: int,
    workdir: Path,
    home: Path,
    fence: str = "soft",
    family: str = "branch",
) -> list[Any]:
    """Run the scenarios of ``seeds``, ``workers`` at a time, with the ``soft`` or the ``hard`` fence.

    :param family: ``branch`` (:class:`RaceScenario`: one key's tries and a foreign writer, the
        branch-wide fence), ``scoped`` (:class:`ScopedScenario`: several keys, the scoped fence) or
        ``simultaneous`` (:meth:`ScopedScenario.simultaneous`: three runs of one partition released
        at the same instant).
    :return: :class:`RaceReport` or :class:`ScopedReport` per seed, in order.
    """

    def one(seed: int) -> Any:
        if family in ("scoped", "simultaneous"):
            scenario = ScopedScenario.from_seed(seed) if family == "scoped" else ScopedScenario.simultaneous(seed)
            return run_scoped_race(launcher, lake, workdir / f"scoped-{fence}-seed-{seed}", home, scenario, fence=fence)
        return run_race(
            launcher, lake, workdir / f"{fence}-seed-{seed}", home, RaceScenario.from_seed(seed), fence=fence
        )

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, seeds))


#: Violation classes: what the invariants and the documented soft-fence holes count as each.
CLASSES = {
    "lost_foreign_commits": ("hard_reset_dropped_foreign_commit", "was lost"),
    "stacked_publications": ("stale_merge_stacked", "did not raise PublishRaceError", "more than one publication"),
    "stale_publications": ("data of stale try", "stale_xcom_push"),
}


def violation_classes(reports: list[RaceReport]) -> dict[str, int]:
    """Scenarios per violation class (a documented hole counts as well as a broken invariant)."""
    counts = dict.fromkeys([*CLASSES, "other_violations"], 0)
    for report in reports:
        findings = [*report.verdict.holes, *report.verdict.violations]
        hit = set()
        for name, needles in CLASSES.items():
            if any(needle in finding for finding in findings for needle in needles):
                hit.add(name)
        other = [v for v in report.verdict.violations if not any(n in v for ns in CLASSES.values() for n in ns)]
        if other:
            hit.add("other_violations")
        for name in hit:
            counts[name] += 1
    return counts


def summarize(reports: list[Any]) -> dict[str, Any]:
    """Aggregate figures of a sweep."""
    if reports and isinstance(reports[0], ScopedReport):
        return summarize_scoped(reports)
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
        "violation_classes": violation_classes(reports),
        "outcomes": dict(sorted(outcomes.items())),
        "decisions": dict(sorted(decisions.items())),
        "with_foreign_writer": sum(bool(r.scenario.foreign) for r in reports),
        "seconds_total": round(sum(r.seconds for r in reports), 1),
    }


def scoped_violation_classes(reports: list[ScopedReport]) -> dict[str, int]:
    """Scoped scenarios per finding class (a documented hole counts as well as a broken invariant)."""
    counts = dict.fromkeys([*SCOPED_CLASSES, "other_violations"], 0)
    for report in reports:
        findings = [*report.verdict.holes, *report.verdict.violations]
        hit = {name for name, needles in SCOPED_CLASSES.items() if any(n in f for f in findings for n in needles)}
        if any(not any(n in v for ns in SCOPED_CLASSES.values() for n in ns) for v in report.verdict.violations):
            hit.add("other_violations")
        for name in hit:
            counts[name] += 1
    return counts


def summarize_scoped(reports: list[ScopedReport]) -> dict[str, Any]:
    """Aggregate figures of a scoped sweep: outcomes per try, decisions per action, fates, overlaps."""
    holes: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    decisions: Counter[str] = Counter()
    fates: Counter[str] = Counter()
    for report in reports:
        holes.update(report.verdict.holes)
        outcomes.update(report.outcomes.values())
        decisions.update(d.rsplit(":", 1)[1] for d in report.decisions)
        fates.update(w.fate for w in report.scenario.writers)
    return {
        "family": "scoped",
        "scenarios": len(reports),
        "passed": sum(r.verdict.ok for r in reports),
        "violations": {r.scenario.seed: r.verdict.violations for r in reports if not r.verdict.ok},
        "holes": dict(holes),
        "violation_classes": scoped_violation_classes(reports),
        "writers": sum(len(r.scenario.writers) for r in reports),
        "live_publications": sum(len(r.verdict.notes.get("live", [])) for r in reports),
        "with_overlapping_scopes": sum(bool(r.scenario.overlaps()) for r in reports),
        "with_read_sets": sum(any(w.read for w in r.scenario.writers) for r in reports),
        "with_foreign_writer": sum(bool(r.scenario.foreign) for r in reports),
        "fates": dict(sorted(fates.items())),
        "outcomes": dict(sorted(outcomes.items())),
        "decisions": dict(sorted(decisions.items())),
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
    parser.add_argument(
        "--fence",
        choices=("soft", "hard", "both"),
        default="soft",
        help="the soft fence, the hard fence (lakeFS pre-merge hook, merge-only replacement), or both side by side",
    )
    parser.add_argument(
        "--family",
        choices=("branch", "scoped", "simultaneous"),
        default="branch",
        help="branch: one key's tries and a foreign writer (the branch-wide fence, default); scoped: three or "
        "four writers of disjoint and overlapping prefixes on one branch (the scoped fence); simultaneous: "
        "three writers of one partition released at the same instant (the scoped fence)",
    )
    parser.add_argument(
        "--lakefs-backend",
        choices=("local", "real"),
        default="local",
        help="the project's local lakeFS server (default) or real lakeFS built from tests/real_lakefs",
    )
    parser.add_argument(
        "--real-kv",
        choices=("postgres", "local"),
        default=os.environ.get("LAKEFENCE_REAL_LAKEFS_KV") or "postgres",
        help="real lakeFS's KV store: a throw-away PostgreSQL (default, as in production) or its local store",
    )
    args = parser.parse_args(argv)

    import logging

    logging.getLogger("airflow.task").setLevel(logging.WARNING)  # the cleaner's per-branch lines

    root = Path(tempfile.mkdtemp(prefix="lakefence-sweep-"))
    home = root / "airflow-home"
    home.mkdir()
    fences = ["soft", "hard"] if args.fence == "both" else [args.fence]
    summaries: dict[str, dict[str, Any]] = {}
    all_reports: dict[str, list[Any]] = {}
    with _lakefs(args.lakefs_backend, root / "lakefs", args.real_kv) as server:
        lake = Lake(server.url, server.access_key_id, server.secret_access_key)
        launcher = ForkServer(attempt_env(lake, home))
        try:
            seeds = list(range(args.first, args.first + args.seeds))
            for fence in fences:
                started = time.monotonic()
                reports = run_sweep(launcher, lake, seeds, args.workers, root / "runs", home, fence, args.family)
                summaries[fence] = summarize(reports)
                summaries[fence]["wall_seconds"] = round(time.monotonic() - started, 1)
                summaries[fence]["workers"] = args.workers
                summaries[fence]["lakefence_backend"] = (
                    f"real ({args.real_kv} KV)" if args.lakefs_backend == "real" else args.lakefs_backend
                )
                all_reports[fence] = reports
        finally:
            launcher.close()
    summary = summaries[fences[0]] if len(fences) == 1 else summaries
    print(json.dumps(summary, indent=2))
    if len(fences) > 1:
        print(side_by_side(summaries), file=sys.stderr)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"summary": summary, "reports": {f: [r.summary() for r in rs] for f, rs in all_reports.items()}},
                indent=2,
            )
        )
    if args.keep:
        print(f"work directory kept: {root}", file=sys.stderr)
    else:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0 if not any(s["violations"] for s in summaries.values()) else 1


def _lakefs(backend: str, data_dir: Path, real_kv: str = "postgres") -> Any:
    """The sweep's lakeFS: a context manager with ``url``, ``access_key_id`` and ``secret_access_key``."""
    if backend == "real":
        from tests.tools.real_lakefs import RealLakeFS, ensure_lakefs_binary

        return RealLakeFS(ensure_lakefs_binary(), data_dir, log_level="ERROR", kv=real_kv)
    from lakefence_testing.lakefs_server import LakeFSServer

    return LakeFSServer(data_dir)


def side_by_side(summaries: dict[str, dict[str, Any]]) -> str:
    """A Markdown table of the violation classes per fence."""
    names = list(summaries)
    rows = ["| figure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    rows.append(
        "| scenarios passing | " + " | ".join(f"{s['passed']} / {s['scenarios']}" for s in summaries.values()) + " |"
    )
    for cls in next(iter(summaries.values()))["violation_classes"]:
        rows.append(f"| {cls} | " + " | ".join(str(s["violation_classes"][cls]) for s in summaries.values()) + " |")
    rows.append("| holes | " + " | ".join(json.dumps(s["holes"]) for s in summaries.values()) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
    sys.exit(main())
