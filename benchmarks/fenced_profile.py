"""Where the fenced operator's non-job time goes: lakeFS calls, Execution-API requests, XComs, rendering.

One first-try publish at a time (the fake spark-submit job of publish_latency.py, direct mode),
under ``dag.test()``, at each injected latency (default 0 and 50 ms per lakeFS request, added by
the fault-injecting proxy in front of real lakeFS, or by the local server), with the hard fence
on (``--soft`` for off). For each publish it records:

- the lakeFS calls by endpoint (the proxy counts them; the job's upload excluded);
- the task's messages to its supervisor by type (in a deployment each is one Execution-API
  request; ``dag.test()`` serves them in-process) and the HTTP requests they became;
- where the wall time between the task's start and end, the job excluded, went: a cProfile of
  the run, summed by what the time was spent in (lakeFS HTTP, supervisor/Execution API, template
  rendering, SDK client set-up, the job's subprocess) with the rest as "other local work".

The profile inflates Python-heavy parts (cProfile's overhead); the un-profiled non-job time of
the same publishes is printed next to it, and ``branch.transact()``'s for comparison.

Run::

    python benchmarks/fenced_profile.py [--latencies-ms 0 50] [--repeat 3] [--soft]
        [--lakefs-backend real|local] [--real-kv postgres|local]
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import os
import pstats
import shutil
import sys
import time
from collections import Counter
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
from publish_latency import DAG_FILE, Bench

#: cProfile function keys (file suffix, function name) → the bucket their cumulative time goes to.
#: Nested buckets are not double-counted: the first matching frame on the stack wins (see _buckets).
BUCKETS: list[tuple[str, str, str]] = [
    ("job (spark-submit subprocess)", "providers/apache/spark/hooks/spark_submit.py", "submit"),
    ("lakeFS HTTP (urllib3)", "urllib3/connectionpool.py", "urlopen"),
    ("Execution API (supervisor comms)", "execution_time/supervisor.py", "send"),
    ("template rendering", "execution_time/task_runner.py", "render_templates"),
    ("lakeFS SDK client set-up", "lakefs/client.py", "__init__"),
]


class CommsCounter:
    """Count the task's messages to its supervisor, by type, while installed."""

    def __init__(self) -> None:
        self.messages: Counter[str] = Counter()
        #: The SetXCom messages by XCom key.
        self.xcom_keys: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        #: (perf_counter at the send, seconds it took, message type) of every message, in order.
        self.timeline: list[tuple[float, float, str]] = []
        self._undo: list[Any] = []

    def install(self) -> None:
        from airflow.sdk.execution_time import supervisor

        comms = supervisor.InProcessSupervisorComms
        original_send = comms.send

        def send(this: Any, msg: Any) -> Any:
            name = type(msg).__name__
            self.messages[name] += 1
            if name == "SetXCom":
                name = f"SetXCom {getattr(msg, 'key', '?')}"
                self.xcom_keys[str(getattr(msg, "key", "?"))] += 1
            started = time.perf_counter()
            try:
                return original_send(this, msg)
            finally:
                self.timeline.append((started, time.perf_counter() - started, name))

        comms.send = send  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(comms, "send", original_send))
        # Every Execution-API request goes through httpx (lakeFS's SDKs use urllib3): count them there.
        import httpx

        original_http_send = httpx.Client.send

        def http_send(this: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            parts = [p if not (len(p) >= 20 or p.isdigit()) else "{id}" for p in request.url.path.strip("/").split("/")]
            self.requests[f"{request.method} /{'/'.join(parts[:4])}"] += 1
            return original_http_send(this, request, *args, **kwargs)

        httpx.Client.send = http_send  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(httpx.Client, "send", original_http_send))

    def reset(self) -> None:
        self.messages.clear()
        self.xcom_keys.clear()
        self.requests.clear()
        self.timeline.clear()

    def in_non_job_time(self, marks: dict[str, float]) -> tuple[Counter[str], float]:
        """The messages sent inside the measured non-job time of one publish (pre_execute to the
        job's start, the job's end to post_execute), by type, and the seconds they took."""
        inside: Counter[str] = Counter()
        spent = 0.0
        for started, took, name in self.timeline:
            if marks["start"] <= started < marks["spark_start"] or marks["spark_end"] <= started < marks["end"]:
                inside[name] += 1
                spent += took
        return inside, spent


def _buckets(stats: pstats.Stats) -> dict[str, float]:
    """Cumulative seconds per bucket (a bucket's time inside another bucket's frames is not counted again)."""
    raw = stats.stats  # type: ignore[attr-defined]
    found: dict[str, float] = {}
    for label, suffix, name in BUCKETS:
        found[label] = sum(
            row[3] for (filename, _line, func), row in raw.items() if func == name and filename.endswith(suffix)
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latencies-ms", type=float, nargs="+", default=[0.0, 50.0])
    parser.add_argument("--repeat", type=int, default=3, help="publishes per latency (median)")
    parser.add_argument("--soft", action="store_true", help="the soft fence only (hard_fence='off')")
    add_backend_arguments(parser)
    parser.set_defaults(lakefs_backend="real")
    args = parser.parse_args(argv)
    home = temp_home("lakefence-profile-bench-").resolve()
    atexit.register(shutil.rmtree, home, True)
    (home / "lakefs").mkdir(parents=True)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"lakeFS: {backend_label(args)}; hard fence {'off' if args.soft else 'on'}")
    with lakefs_process(args.lakefs_backend, home / "lakefs", args.real_kv) as server:
        dags_folder = setup_airflow(home, [DAG_FILE], server.url, server.access_key_id, server.secret_access_key)
        dags = load_module(dags_folder / DAG_FILE.name, "lakefence_bench_dags")
        bench = Bench(server, dags, hard_fence=not args.soft)
        comms = CommsCounter()
        comms.install()
        bench.fenced()  # warm-up: imports, connection pools, the first dag.test()
        bench.transact()
        rows = []
        for latency in args.latencies_ms:
            server.controls.set_latency(latency / 1000)
            plain, transact, profiled, lakefs_calls = [], [], [], []
            buckets: list[dict[str, float]] = []
            inside_seconds: list[float] = []
            for _ in range(args.repeat):
                comms.reset()
                seconds, calls = bench.fenced()
                inside, spent = comms.in_non_job_time(dags.MARKS[-1])
                inside_seconds.append(spent)
                plain.append(seconds)
                lakefs_calls.append(calls)
                transact.append(bench.transact()[0])
                comms.reset()
                profile = cProfile.Profile()
                started = time.perf_counter()
                profile.enable()
                bench.fenced()
                profile.disable()
                marks = dags.MARKS[-1]
                task = marks["end"] - marks["start"]
                job = marks["spark_end"] - marks["spark_start"]
                profiled.append(task - job)
                found = _buckets(pstats.Stats(profile))
                found["dag.test() outside the task"] = time.perf_counter() - started - task
                buckets.append(found)
            print(f"\n## {latency:g} ms injected per lakeFS request ({args.repeat} publishes, median)")
            print(
                f"non-job s: fenced {median(plain):.3f} (profiled {median(profiled):.3f}), "
                f"branch.transact() {median(transact):.3f}; ratio {median(plain) / median(transact):.2f}x"
            )
            print("lakeFS calls of the fenced publish: " + ", ".join(
                f"{k} {v}" for k, v in sorted(bench.by_endpoint["fenced operator"].items())
            ) + f" (total {median(lakefs_calls):g})")
            print("lakeFS calls of branch.transact(): " + ", ".join(
                f"{k} {v}" for k, v in sorted(bench.by_endpoint["branch.transact()"].items())
            ))
            print("supervisor messages (Execution API) per attempt: " + ", ".join(
                f"{k} {v}" for k, v in sorted(comms.messages.items())
            ) + f" (total {sum(comms.messages.values())})")
            print(
                f"of them inside the non-job time (un-profiled run, {median(inside_seconds):.3f} s): "
                + ", ".join(f"{k} {v}" for k, v in sorted(inside.items()))
                + f" (total {sum(inside.values())})"
            )
            print("SetXCom by key: " + ", ".join(f"{k} {v}" for k, v in sorted(comms.xcom_keys.items())))
            print("HTTP requests they became: " + ", ".join(f"{k} {v}" for k, v in sorted(comms.requests.items())))
            table = []
            for label in buckets[0]:
                table.append([label, f"{median([b[label] for b in buckets]):.3f}"])
            print_table(["where (cProfile, cumulative, profiled run)", "s"], table)
            rows.append([f"{latency:g}", f"{median(plain):.3f}", f"{median(transact):.3f}",
                         f"{median(plain) / median(transact):.2f}x", f"{median(lakefs_calls):g}",
                         str(sum(comms.messages.values())), str(comms.messages.get("SetXCom", 0))])
        server.controls.set_latency(0)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")
    print_table(
        ["RTT ms", "fenced non-job s", "transact() s", "ratio", "lakeFS calls", "supervisor msgs", "XCom pushes"], rows
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
