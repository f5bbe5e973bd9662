"""The seeded scoped race sweep in CI: many writers on one branch, on real lakeFS, with both fences.

Each seed (:class:`~tests.reliability.scoped_race.ScopedScenario`) starts three or four writers (one
publication key each, every try in its own process) on one target branch, with disjoint and
overlapping write sets, read sets, crashes after publishing, zombie tries and lost merge answers, and
a foreign writer; :func:`~tests.reliability.scoped_race.check_scoped_invariants` judges the end state.
CI runs a fixed set of seeds per fence mode (``python -m tests.reliability.sweep --family scoped
--seeds 200 --fence both --lakefs-backend real`` for the long sweep, whose latest figures
docs/reliability.md records). A failure names its seed: rerun it with ``--first SEED --seeds 1 --keep``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import TIER_FIGURES_PROPERTY
from tests.reliability.harness import ForkServer, Lake
from tests.reliability.sweep import run_sweep, summarize_scoped

pytestmark = [pytest.mark.scoped, pytest.mark.real_lakefs]

#: The seeds CI runs per fence mode (the long sweep runs 0..199): five consecutive ones (overlapping
#: writers, read sets, lost answers, zombies) and five picked from 2010..2199 because one writer
#: crashes after publishing in a partition nobody else writes, so its retry most likely replaces its
#: own publication under the others' (a crash in an overlapped scope usually fails closed before it).
CI_SCOPED_SEEDS = (2000, 2001, 2002, 2003, 2006, 2018, 2034, 2063, 2091, 2106)
#: Scenarios run at a time.
WORKERS = 4


@pytest.mark.parametrize("fence", ["soft", "hard"])
def test_scoped_seeded_interleavings(
    launcher: ForkServer,
    lake: Lake,
    airflow_home: Path,
    tmp_path: Path,
    fence: str,
    record_property: pytest.RecordProperty,
) -> None:
    """Every invariant holds on every CI seed; with the hard fence not even a documented soft-fence hole."""
    started = time.monotonic()
    reports = run_sweep(launcher, lake, list(CI_SCOPED_SEEDS), WORKERS, tmp_path, airflow_home, fence, "scoped")
    summary = summarize_scoped(reports)
    record_property(
        f"{TIER_FIGURES_PROPERTY}scoped race sweep ({fence} fence)",
        json.dumps({"seeds": len(reports), "wall_seconds": round(time.monotonic() - started, 1)}),
    )
    failed = {r.scenario.seed: r.summary() for r in reports if not r.verdict.ok}
    assert not failed, json.dumps(failed, indent=1)[:20000]
    if fence == "hard":
        assert not summary["holes"], summary["holes"]
    # Not vacuous: writers landed and were refused, and a crashed or answer-lost try's publication was
    # replaced or recognised.
    outcomes, decisions = summary["outcomes"], summary["decisions"]
    print(json.dumps({k: summary[k] for k in ("outcomes", "decisions", "holes", "live_publications")}))
    refused = sum(n for name, n in outcomes.items() if name.endswith("Error") and name != "StaleAttemptError")
    assert outcomes.get("success", 0) >= 10 and refused >= 3, summary
    assert outcomes.get("crash", 0) >= 2 and outcomes.get("StaleAttemptError", 0) >= 1, summary
    assert decisions.get("merge", 0) >= 10 and decisions.get("replace", 0) >= 1 and decisions.get("idempotent", 0) >= 1
    assert summary["live_publications"] >= 10


#: Repetitions CI runs of the simultaneous release per fence (the benchmark runs 20 or more:
#: python benchmarks/race_sweep.py --family simultaneous --seeds 20 --fence both).
CI_SIMULTANEOUS_RUNS = 3


@pytest.mark.parametrize("fence", ["soft", "hard"])
def test_three_writers_of_one_partition_released_together(
    launcher: ForkServer,
    lake: Lake,
    airflow_home: Path,
    tmp_path: Path,
    fence: str,
    record_property: pytest.RecordProperty,
) -> None:
    """Three runs of one date partition, each in its own process, released at the same instant, with
    per-run file names (their merges never conflict): exactly one run's output ends in the partition,
    the other two fail closed with ScopeOverlapError and keep their evidence; no documented hole."""
    started = time.monotonic()
    seeds = list(range(CI_SIMULTANEOUS_RUNS))
    reports = run_sweep(launcher, lake, seeds, 1, tmp_path, airflow_home, fence, "simultaneous")
    summary = summarize_scoped(reports)
    record_property(
        f"{TIER_FIGURES_PROPERTY}simultaneous release ({fence} fence)",
        json.dumps({"runs": len(reports), "wall_seconds": round(time.monotonic() - started, 1)}),
    )
    failed = {r.scenario.seed: r.summary() for r in reports if not r.verdict.ok}
    assert not failed, json.dumps(failed, indent=1)[:20000]
    assert not summary["holes"], summary["holes"]
    for report in reports:
        assert len(report.verdict.notes["live"]) == 1, report.summary()
        outcomes = sorted(report.outcomes.values())
        assert outcomes == ["ScopeOverlapError", "ScopeOverlapError", "success"], report.outcomes
