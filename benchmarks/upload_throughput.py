"""Workspace upload throughput: airflow-lakefence's parallel streaming upload vs the SDK's ``upload``.

Two cases, each into a fresh branch of the benchmark's lakeFS (``--lakefs-backend local``: the
local lakeFS server in its own process; ``real``: real lakeFS, its KV store on PostgreSQL unless
``--real-kv local``, behind the fault-injecting proxy in its own process):

* many files (default 1,000 × 100 KB): ``LakeFSClient.upload_tree`` (parallel, streamed bodies)
  against the ``lakefs`` SDK's ``branch.object(path).upload(data)`` one file after the other;
* one large file (default 2 GiB): ``LakeFSClient.upload_file`` (the open file is the request
  body) against the SDK's ``upload(data)`` (the whole file in memory) and the SDK's
  ``writer()`` fed in 1 MiB pieces (a spooled temporary copy on disk, then one request).

Every upload runs in a fresh worker process that reports its wall time and its peak resident set
size (``getrusage``), so memory use is measured, not inferred. Every upload is checked afterwards:
object count, sizes and the server's MD5 of the large object. The many-files case runs at each
``--latencies-ms`` (a delay the server, or the proxy, adds to every lakeFS request: a network round-trip),
``--repeat`` times per method, interleaved (median); the large file once per method at 0 ms.

Run::

    python benchmarks/upload_throughput.py [--files 1000] [--file-size 100K] [--large-size 2G]
        [--concurrency 8] [--latencies-ms 0 20] [--repeat 3] [--skip-large] [--workdir DIR]
        [--lakefs-backend local|real] [--real-kv postgres|local]
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_backend_arguments, backend_label, lakefs_process, machine, median, print_table

REPOSITORY = "upload-bench"
SECRET_ENV = "LAKEFENCE_BENCH_SECRET"
_UNITS = {"": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "KI": 1024, "MI": 1024**2, "GI": 1024**3}


def parse_size(text: str) -> int:
    """``100K`` → 100,000; ``2G`` → 2,000,000,000; ``2GiB`` → 2,147,483,648."""
    value = text.strip().upper().removesuffix("B")
    digits = value.rstrip("KMGI")
    unit = value[len(digits) :]
    if unit not in _UNITS or not digits:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(float(digits) * _UNITS[unit])


def human(size: int) -> str:
    """2147483648 → ``2 GiB``; 100000 → ``100 KB``."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("GB", 10**9), ("MB", 10**6), ("KiB", 2**10), ("KB", 10**3)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


# -- the worker (a separate process per measured upload) ---------------------------------------


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one upload as the spec says; return seconds, peak RSS and the RSS before uploading."""
    import lakefs

    from airflow_lakefence.lakefs_adapter.client import LakeFSClient

    secret = os.environ[SECRET_ENV]
    files = [(path, Path(local)) for path, local in spec["files"]]
    method = spec["method"]
    ours = LakeFSClient(spec["url"], spec["key"], secret, upload_concurrency=spec["concurrency"])
    branch = lakefs.Repository(
        REPOSITORY, client=lakefs.Client(host=spec["url"], username=spec["key"], password=secret)
    ).branch(spec["branch"])
    # Warm up both clients (connection pool, lazy imports) outside the measurement.
    ours.get_commit(REPOSITORY, spec["branch"])
    branch.get_commit()
    baseline = _max_rss_mib()
    start = time.perf_counter()
    if method == "ours":
        ours.upload_tree(REPOSITORY, spec["branch"], files)
    elif method == "sdk":
        for path, local in files:
            branch.object(path).upload(local.read_bytes(), mode="wb", pre_sign=False)
    elif method == "sdk-writer":
        for path, local in files:
            with branch.object(path).writer(mode="wb", pre_sign=False) as out, open(local, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
    else:
        raise SystemExit(f"unknown method {method!r}")
    return {"seconds": time.perf_counter() - start, "peak_rss_mib": _max_rss_mib(), "baseline_rss_mib": baseline}


def run_worker(spec: dict[str, Any], secret: str) -> dict[str, Any]:
    """Run :func:`worker` in a new process (the secret through its environment, not argv)."""
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        env={**os.environ, SECRET_ENV: secret},
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- data and checks ---------------------------------------------------------------------------


def make_small_files(root: Path, count: int, size: int) -> list[tuple[str, str]]:
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for n in range(count):
        path = root / f"part-{n:05d}.bin"
        if not path.exists() or path.stat().st_size != size:
            path.write_bytes(os.urandom(size))
        files.append((f"many/part-{n:05d}.bin", str(path)))
    return files


def make_large_file(path: Path, size: int) -> str:
    """Write ``size`` bytes (1 MiB random blocks), or reuse the file; return its MD5."""
    md5 = hashlib.md5()
    if path.exists() and path.stat().st_size == size:
        with open(path, "rb") as src:
            while block := src.read(1 << 24):
                md5.update(block)
        return md5.hexdigest()
    with open(path, "wb") as out:
        remaining = size
        while remaining:
            block = os.urandom(min(remaining, 1 << 20))
            md5.update(block)
            out.write(block)
            remaining -= len(block)
    return md5.hexdigest()


def check_branch(client: Any, branch: str, expected: dict[str, int], md5: dict[str, str]) -> None:
    """Every expected object is on ``branch`` with its size (and MD5 where given)."""
    objects = client.sdk_client.objects_api
    seen: dict[str, int] = {}
    after = ""
    while True:
        page = objects.list_objects(REPOSITORY, branch, after=after, amount=1000)
        seen.update({item.path: item.size_bytes for item in page.results})
        if not page.pagination.has_more:
            break
        after = page.pagination.next_offset
    if seen != expected:
        raise SystemExit(f"upload check failed on {branch}: {len(seen)} objects, expected {len(expected)}")
    for path, digest in md5.items():
        stat = objects.stat_object(REPOSITORY, branch, path)
        if stat.checksum != digest:
            raise SystemExit(f"upload check failed: {path} has MD5 {stat.checksum}, expected {digest}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000, help="number of small files")
    parser.add_argument("--file-size", type=parse_size, default=parse_size("100K"))
    parser.add_argument("--large-size", type=parse_size, default=parse_size("2GiB"))
    parser.add_argument("--concurrency", type=int, default=8, help="parallel uploads of LakeFSClient")
    parser.add_argument(
        "--latencies-ms", type=float, nargs="+", default=[0.0, 20.0], help="latency added to every lakeFS request"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per many-files cell (median)")
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-sdk-memory", action="store_true", help="skip the SDK's whole-file upload(data)")
    parser.add_argument("--workdir", type=Path, default=None, help="where test files and server data go")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0

    import lakefs

    work = (args.workdir or Path(tempfile.mkdtemp(prefix="lakefence-upload-bench-"))).resolve()
    if args.workdir is None:  # gigabytes of test data: gone when the run ends
        atexit.register(shutil.rmtree, work, True)
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"workdir: {work} (free: {shutil.disk_usage(work).free / 1e9:.0f} GB)")
    print(f"lakeFS: {backend_label(args)}")
    small = make_small_files(work / "small", args.files, args.file_size)
    large_md5 = ""
    large = work / "large.bin"
    if not args.skip_large:
        need = 4 * args.large_size
        if shutil.disk_usage(work).free < need:
            raise SystemExit(f"need {need / 1e9:.1f} GB free in {work} for the large-file case")
        started = time.perf_counter()
        large_md5 = make_large_file(large, args.large_size)
        print(f"large file: {args.large_size:,} bytes, MD5 {large_md5} ({time.perf_counter() - started:.1f} s)")

    data_dir = work / "lakefs"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir()
    rows: list[list[Any]] = []
    with lakefs_process(args.lakefs_backend, data_dir, args.real_kv) as server:
        client = server.sdk()
        repo = lakefs.Repository(REPOSITORY, client=client).create(storage_namespace=f"local://{REPOSITORY}")
        base = {"url": server.url, "key": server.access_key_id, "concurrency": args.concurrency}

        def once(case: str, method: str, files: list[tuple[str, str]], md5: dict[str, str], n: int) -> dict[str, Any]:
            branch = f"{method}-{case}-{n}"
            repo.branch(branch).create("main")
            result = run_worker({**base, "method": method, "branch": branch, "files": files}, server.secret_access_key)
            check_branch(client, branch, {p: Path(local).stat().st_size for p, local in files}, md5)
            repo.branch(branch).delete()  # keeps listings short
            return result

        def row(
            case: str,
            latency: float,
            name: str,
            files: list[tuple[str, str]],
            runs: list[dict[str, Any]],
            reference: float,
        ) -> list[Any]:
            seconds = median([r["seconds"] for r in runs])
            total = sum(Path(local).stat().st_size for _, local in files)
            return [
                case,
                f"{latency:g}",
                name,
                f"{seconds:.2f}",
                f"{min(r['seconds'] for r in runs):.2f}–{max(r['seconds'] for r in runs):.2f}",
                f"{len(files) / seconds:.0f}" if len(files) > 1 else "-",
                f"{total / 1e6 / seconds:.1f}",
                f"{max(r['peak_rss_mib'] for r in runs):.0f}",
                f"{max(r['peak_rss_mib'] - r['baseline_rss_mib'] for r in runs):.0f}",
                f"{reference / seconds:.1f}×",
            ]

        many = [("sdk", "SDK upload(), sequential"), ("ours", f"upload_tree, {args.concurrency} parallel")]
        label = f"{args.files} × {human(args.file_size)}"
        for latency in args.latencies_ms:
            server.controls.set_latency(latency / 1000)
            runs: dict[str, list[dict[str, Any]]] = {method: [] for method, _ in many}
            for n in range(args.repeat):
                for method, _ in many:  # interleaved, so load drifts hit both alike
                    runs[method].append(once("many", method, small, {}, n))
            reference = median([r["seconds"] for r in runs["sdk"]])
            rows.extend(row(label, latency, name, small, runs[method], reference) for method, name in many)
        server.controls.set_latency(0)
        if not args.skip_large:
            one = [("large/blob.bin", str(large))]
            label = f"1 × {human(args.large_size)}"
            large_methods = [("sdk-writer", "SDK writer(), 1 MiB writes"), ("ours", "upload_file, streamed")]
            if not args.skip_sdk_memory:
                large_methods.insert(0, ("sdk", "SDK upload(data), whole file in memory"))
            results = [
                (name, [once("large", method, one, {one[0][0]: large_md5}, 0)]) for method, name in large_methods
            ]
            reference = results[0][1][0]["seconds"]
            rows.extend(row(label, 0, name, one, result, reference) for name, result in results)
    print(
        f"load average after: {os.getloadavg()[0]:.1f}; {args.repeat} runs per many-files cell (median), "
        "1 per large-file cell; RSS growth = a worker's peak RSS minus its RSS just before uploading"
    )
    print_table(
        [
            "case",
            "latency ms",
            "method",
            "seconds",
            "range",
            "files/s",
            "MB/s",
            "peak RSS MiB",
            "RSS growth MiB",
            "speed-up",
        ],
        rows,
    )
    shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
