"""Benchmark the local lakeFS server: calls/s for commit, merge and diff(amount=1) by history depth.

Not a timed test: it prints figures. The per-call cost must stay flat as history grows (the
server never walks history for these calls), so the depth-1,000 rows should match the depth-10
rows within noise.

Run::

    python benchmarks/lakefs_server_bench.py [--iterations 100] [--depths 10 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

import lakefs

from lakefence_testing.lakefs_server import LakeFSServer


def _rate(iterations: int, prepare: Callable[[int], None], call: Callable[[int], object]) -> float:
    """Return calls/s of ``call``; ``prepare`` runs untimed before each call."""
    elapsed = 0.0
    for i in range(iterations):
        prepare(i)
        start = time.perf_counter()
        call(i)
        elapsed += time.perf_counter() - start
    return iterations / elapsed


def _bench_depth(server: LakeFSServer, client: lakefs.Client, depth: int, iterations: int) -> dict[str, float]:
    repo_id = f"bench-depth-{depth}"
    repo = lakefs.Repository(repo_id, client=client).create(storage_namespace=f"local://bench/{repo_id}")
    main = repo.branch("main")
    for i in range(10):
        main.object(f"data/{i}").upload("initial")
    main.commit("initial data")
    # History is built through the store directly: thousands of HTTP commits would only slow setup.
    for _ in range(depth - 2):
        server.store.commit(repo_id, "main", "filler", allow_empty=True)
    assert len(list(main.log(max_amount=depth + 1))) == depth
    refs = client.sdk_client.refs_api

    def stage_on_main(i: int) -> None:
        main.object(f"data/{i % 10}").upload(f"main-{depth}-{i}")

    def feature_branch(prefix: str) -> Callable[[int], None]:
        def create(i: int) -> None:
            branch = repo.branch(f"{prefix}-{i}").create("main")
            branch.object(f"data/{i % 10}").upload(f"{prefix}-{depth}-{i}")
            branch.commit(f"{prefix} {i}")

        return create

    results = {
        "commit": _rate(iterations, stage_on_main, lambda i: main.commit(f"bench {i}")),
        "merge": _rate(iterations, feature_branch("m"), lambda i: repo.branch(f"m-{i}").merge_into(main)),
        "diff two_dot amount=1": _rate(
            iterations,
            feature_branch("d"),
            lambda i: refs.diff_refs(repo_id, "main", f"d-{i}", type="two_dot", amount=1),
        ),
        "diff three_dot amount=1": _rate(
            iterations, lambda i: None, lambda i: refs.diff_refs(repo_id, "main", f"d-{i}", amount=1)
        ),
        "get branch head": _rate(iterations, lambda i: None, lambda i: main.head),
    }
    return results


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print a table.

    :param argv: command line arguments.
    """
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 1000])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lakefence-bench-") as data_dir, LakeFSServer(data_dir) as server:
        client = lakefs.Client(  # type: ignore[no-untyped-call]
            host=server.url, username=server.access_key_id, password=server.secret_access_key
        )
        table = {depth: _bench_depth(server, client, depth, args.iterations) for depth in args.depths}
    operations = list(next(iter(table.values())))
    header = f"{'operation':<26}" + "".join(f"{'depth ' + str(d):>14}" for d in args.depths)
    print(f"calls/s over HTTP through the lakefs SDK, {args.iterations} calls each")
    print(header)
    for op in operations:
        print(f"{op:<26}" + "".join(f"{table[d][op]:>14.1f}" for d in args.depths))


if __name__ == "__main__":
    main()
