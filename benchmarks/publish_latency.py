"""Publish overhead under injected lakeFS latency: the fenced operator vs unfenced SDK publishes.

The same publish (one object written by the "job", then made visible on a fresh target branch) is
done three ways, side by side in one run, at each injected per-request latency (default 0, 20 and
50 ms, like a network round-trip: on ``--lakefs-backend local`` the local lakeFS server sleeps that
long in every API request; on ``--lakefs-backend real`` the fault-injecting proxy in front of real
lakeFS does, its KV store on PostgreSQL unless ``--real-kv local``):

* ``FencedSparkPublishOperator`` (direct mode) under ``dag.test()`` with the fake spark-submit
  (tests/fake_spark: the job runs without a JVM). Measured: the operator's wall time minus the
  Spark step (pre_execute → failpoint ``after_staging_branch``, and failpoint ``after_job`` →
  post_execute), so the job's own writes are excluded.
* ``lakefs`` SDK ``branch.transact()``: ephemeral branch, commit, merge, delete; unfenced.
* treeverse-provider style: create branch, commit, merge with the ``lakefs`` SDK (what the
  airflow-provider-lakeFS operators call), unfenced, the branch left behind as they leave it.

For each way: the median non-job wall time over ``--repeat`` publishes per latency, the lakeFS
calls the server counted (the job's upload excluded), and the serial round-trips derived from the
slope of time against latency (least squares). Goal for the fenced operator: ≤ 0.5 s at 0 ms and
≤ serial calls × RTT + 0.5 s at every latency.

``--fences both`` measures the fenced operator twice in the same run, by default
(``hard_fence="auto"``): on an input without lakeFS's hard fence ("fenced, no hard fence") and on
one whose repository has it installed ("fenced, hard fence installed"), each against the same
unfenced ways, interleaved. ``--hard-fence`` (alone) is the fenced operator with
``hard_fence="require"`` on an input that carries the fence.

Run::

    python benchmarks/publish_latency.py [--latencies-ms 0 20 50] [--repeat 5] [--home DIR]
        [--lakefs-backend local|real] [--real-kv postgres|local] [--hard-fence | --fences both]
        [--calls-by-endpoint]
"""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import shutil
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    add_backend_arguments,
    backend_label,
    lakefs_process,
    load_module,
    machine,
    median,
    print_table,
    setup_airflow,
    temp_home,
)

REPOSITORY = "latency-bench"
DAG_FILE = Path(__file__).resolve().parent / "_bench_dags.py"
FENCED = "fenced operator"
UNFENCED = ("branch.transact()", "provider style")
#: the two fenced ways of ``--fences both``: (name, input carries the hard fence)
BOTH_FENCES = (("fenced, no hard fence", False), ("fenced, hard fence installed", True))
JOB_CALLS = {"uploadObject": 1}  # the job's own write (one object), not the publish


def fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares line through (xs, ys): (slope, intercept)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return slope, my - slope * mx


class Bench:
    """One server, one Airflow home, one repository; measures one publish of each way."""

    def __init__(self, server: Any, dags: Any, hard_fence: bool = False) -> None:
        import lakefs

        self.server = server
        self.controls = server.controls
        self.dags = dags
        self.client = server.sdk()
        self.repo = lakefs.Repository(REPOSITORY, client=self.client).create(
            storage_namespace=f"local://{REPOSITORY}", exist_ok=True
        )
        main = self.repo.branch("main")
        main.object("in/data.txt").upload(b"input", pre_sign=False)
        #: the input without the hard fence
        self.plain_input = main.commit("seed input").get_commit().id
        self.dag = dags.fenced_fake_hard_dag if hard_fence else dags.fenced_fake_dag
        # The input with the hard fence: the installer's merge on top of the plain one, so every
        # publication built on it carries the hook.
        from airflow_lakefence.hardfence import install_hard_fence
        from airflow_lakefence.lakefs_adapter.client import LakeFSClient

        adapter = LakeFSClient(server.url, server.access_key_id, server.secret_access_key)
        self.fenced_input = install_hard_fence(adapter, REPOSITORY, "main").head
        self.input_commit = self.fenced_input if hard_fence else self.plain_input
        self.job_counts: Counter[str] = Counter()
        #: lakeFS calls by endpoint (operationId) of the last publish of each way, the job's excluded.
        self.by_endpoint: dict[str, Counter[str]] = {}

    def _target(self, source: str | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:12]}"
        self.repo.branch(name).create(source or self.input_commit)
        return name

    def _publish_calls(self, way: str) -> int:
        # The job's one upload is not the publish's; the fenced publish's run-state record (also an
        # upload) is.
        counts = Counter(self.controls.counts())
        counts.subtract(JOB_CALLS)
        counts = +counts
        self.by_endpoint[way] = counts
        return sum(counts.values())

    def fenced(self, input_commit: str | None = None, way: str = FENCED) -> tuple[float, int]:
        """One fenced publish onto a fresh target at ``input_commit`` (the bench's input by default)."""
        from airflow_lakefence import failpoints
        from airflow_lakefence.core.fences.hard import forget_checks

        dags = self.dags
        input_commit = input_commit or self.input_commit
        target = self._target(input_commit)
        forget_checks()  # every Airflow task is a new process, which remembers no hard-fence check

        def spark_start() -> None:
            dags.mark("spark_start")

        def spark_end() -> None:
            dags.mark("spark_end")

        failpoints.arm("after_staging_branch", spark_start)
        failpoints.arm("after_job", spark_end)
        self.controls.reset_counts()
        job = {"files": {f"out/{target}.txt": target}}
        conf = {"repository": REPOSITORY, "target": target, "input_ref": input_commit, "job": job}
        dag_run = self.dag.test(run_conf=conf)
        if str(dag_run.state) not in ("success", "DagRunState.SUCCESS"):
            raise SystemExit(f"fenced publish failed: {dag_run.state}")
        calls = self._publish_calls(way)
        marks = dags.MARKS[-1]
        head = self.repo.branch(target).get_commit()
        if head.parents[0] != input_commit:
            raise SystemExit("fenced publish did not merge onto the input")
        seconds = (marks["spark_start"] - marks["start"]) + (marks["end"] - marks["spark_end"])
        return seconds, calls

    def transact(self) -> tuple[float, int]:
        target = self._target()
        self.controls.reset_counts()
        start = time.perf_counter()
        with self.repo.branch(target).transact(commit_message="bench transact") as tx:
            job_start = time.perf_counter()
            tx.object(f"out/{target}.txt").upload(target.encode(), pre_sign=False)
            job = time.perf_counter() - job_start
        seconds = time.perf_counter() - start - job
        calls = self._publish_calls("branch.transact()")
        if self.repo.branch(target).get_commit().parents[0] != self.input_commit:
            raise SystemExit("transact did not merge onto the input")
        return seconds, calls

    def provider_style(self) -> tuple[float, int]:
        target = self._target()
        self.controls.reset_counts()
        start = time.perf_counter()
        branch = self.repo.branch(f"{target}-work").create(target)  # CreateBranchOperator
        job_start = time.perf_counter()
        branch.object(f"out/{target}.txt").upload(target.encode(), pre_sign=False)
        job = time.perf_counter() - job_start
        branch.commit("bench provider style", metadata={"by": "bench"})  # CommitOperator
        branch.merge_into(self.repo.branch(target))  # MergeOperator
        seconds = time.perf_counter() - start - job
        calls = self._publish_calls("provider style")
        if self.repo.branch(target).get_commit().parents[0] != self.input_commit:
            raise SystemExit("provider-style publish did not merge onto the input")
        return seconds, calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latencies-ms", type=float, nargs="+", default=[0.0, 20.0, 50.0])
    parser.add_argument("--repeat", type=int, default=5, help="publishes per way and latency (median)")
    parser.add_argument("--home", type=Path, default=None, help="Airflow home and lakeFS data (default: temp)")
    parser.add_argument("--hard-fence", action="store_true", help="the fenced operator with hard_fence='require'")
    parser.add_argument(
        "--fences",
        choices=["one", "both"],
        default="one",
        help="both: the fenced operator by default (hard_fence='auto') on an input without and one with the hard fence",
    )
    parser.add_argument("--calls-by-endpoint", action="store_true", help="print each way's lakeFS calls by endpoint")
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    home = (args.home or temp_home("lakefence-latency-bench-")).resolve()
    if args.home is None:
        atexit.register(shutil.rmtree, home, True)
    (home / "lakefs").mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    if args.fences == "both" and args.hard_fence:
        parser.error("--fences both measures the default (hard_fence='auto'); leave out --hard-fence")
    both = args.fences == "both"
    fences = "both, by default (auto)" if both else "on (require)" if args.hard_fence else "off"
    print(f"lakeFS: {backend_label(args)}; hard fence {fences}")
    with lakefs_process(args.lakefs_backend, home / "lakefs", args.real_kv) as server:
        dags_folder = setup_airflow(home, [DAG_FILE], server.url, server.access_key_id, server.secret_access_key)
        dags = load_module(dags_folder / DAG_FILE.name, "lakefence_bench_dags")
        bench = Bench(server, dags, args.hard_fence)
        ways: dict[str, Callable[[], tuple[float, int]]] = {}
        if both:
            for name, fenced_input in BOTH_FENCES:
                source = bench.fenced_input if fenced_input else bench.plain_input
                ways[name] = functools.partial(bench.fenced, source, name)
        else:
            ways[FENCED] = bench.fenced
        ways["branch.transact()"] = bench.transact
        ways["provider style"] = bench.provider_style
        names = tuple(ways)
        fenced_ways = [name for name in names if name not in UNFENCED]
        for way in ways.values():  # warm-up: imports, connection pools, the first dag.test()
            way()
        times: dict[str, dict[float, float]] = {w: {} for w in names}
        calls: dict[str, set[int]] = {w: set() for w in names}
        for latency in args.latencies_ms:
            server.controls.set_latency(latency / 1000)
            samples: dict[str, list[float]] = {w: [] for w in names}
            for _ in range(args.repeat):
                for name, way in ways.items():  # interleaved, so load drifts hit every way alike
                    seconds, count = way()
                    samples[name].append(seconds)
                    calls[name].add(count)
            for name in names:
                times[name][latency] = median(samples[name])
        server.controls.set_latency(0)
    print(f"load average after: {os.getloadavg()[0]:.1f}; {args.repeat} publishes per cell, median")
    headers = [
        "way",
        "lakeFS calls",
        *[f"non-job s @ {latency:g} ms" for latency in args.latencies_ms],
        "serial calls (slope)",
        "s @ 0 ms (fit)",
    ]
    rows = []
    for name in names:
        slope, intercept = fit([x / 1000 for x in args.latencies_ms], [times[name][x] for x in args.latencies_ms])
        rows.append(
            [
                name,
                "/".join(str(c) for c in sorted(calls[name])),
                *[f"{times[name][latency]:.3f}" for latency in args.latencies_ms],
                f"{slope:.1f}",
                f"{intercept:.3f}",
            ]
        )
    print_table(headers, rows)
    last = max(args.latencies_ms)
    for fenced in fenced_ways:
        fenced_calls = max(calls[fenced])
        verdicts = []
        for latency in args.latencies_ms:
            budget = fenced_calls * latency / 1000 + 0.5
            got = times[fenced][latency]
            verdicts.append(f"{latency:g} ms: {got:.3f} s ≤ {budget:.3f} s {'met' if got <= budget else 'MISSED'}")
        print(f"goal ({fenced} ≤ calls × RTT + 0.5 s): " + "; ".join(verdicts))
        ratio = times[fenced][last] / times["branch.transact()"][last]
        print(f"{fenced} / branch.transact() non-job time at {last:g} ms: {ratio:.2f}x")
    if args.calls_by_endpoint:
        for name in names:
            print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(bench.by_endpoint[name].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
