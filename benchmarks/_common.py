"""Shared plumbing of the benchmarks: the lakeFS behind them, an embedded Airflow, tables.

Every benchmark takes ``--lakefs-backend local|real`` (:func:`add_backend_arguments`,
:func:`lakefs_process`): the project's local lakeFS server (which adds the injected latency
itself), or real lakeFS (built from tests/real_lakefs, its KV store on PostgreSQL by default:
``--real-kv``) behind the project's fault-injecting proxy
(:mod:`lakefence_testing.proxy`) in a process of its own, which adds the latency and counts
the calls. Either way the benchmark talks to a URL with the same ``/_lakefence/`` controls.

Not a benchmark itself. The benchmarks are commands (``python benchmarks/<name>.py``) that print
figures; none of them is a test.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The real-lakeFS launcher is the repository's (tests/tools), not the package's.
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))
ACCESS_KEY_ID = "AKIAIOSFODNN7BENCH"


@dataclass(frozen=True)
class ServerProcess:
    """A local lakeFS server running in its own process (so its CPU and memory are not ours).

    :param url: base URL (no ``/api/v1``).
    :param access_key_id: the access key id.
    :param secret_access_key: the secret.
    :param data_dir: its data directory.
    """

    url: str
    access_key_id: str
    secret_access_key: str
    data_dir: Path

    @property
    def controls(self) -> Any:
        """The server's test controls over HTTP."""
        from lakefence_testing.controls import RemoteControls

        return RemoteControls(self.url)

    def sdk(self) -> Any:
        """A new ``lakefs.Client`` for this server."""
        import lakefs

        return lakefs.Client(host=self.url, username=self.access_key_id, password=self.secret_access_key)


@contextmanager
def server_process(data_dir: Path, latency: float = 0.0) -> Iterator[ServerProcess]:
    """Run ``python -m lakefence_testing.lakefs_server`` until the block ends.

    :param data_dir: the server's data directory.
    :param latency: seconds added to every API request.
    """
    import secrets

    secret = secrets.token_urlsafe(24)
    env = {**os.environ, "LAKEFENCE_SECRET_ACCESS_KEY": secret}  # not in argv
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lakefence_testing.lakefs_server",
            "--data-dir",
            str(data_dir),
            "--access-key-id",
            ACCESS_KEY_ID,
            "--latency",
            str(latency),
        ],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"lakeFS server did not start (first line {url!r})")
        yield ServerProcess(url, ACCESS_KEY_ID, secret, data_dir)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def add_backend_arguments(parser: Any) -> None:
    """Add ``--lakefs-backend`` and ``--real-kv`` to a benchmark's argument parser."""
    parser.add_argument(
        "--lakefs-backend",
        choices=("local", "real"),
        default=os.environ.get("LAKEFENCE_BENCH_LAKEFS_BACKEND", "local"),
        help="the project's local lakeFS server, or real lakeFS behind the fault-injecting proxy (default local)",
    )
    parser.add_argument(
        "--real-kv",
        choices=("postgres", "local"),
        default=os.environ.get("LAKEFENCE_REAL_LAKEFS_KV") or "postgres",
        help="real lakeFS's KV store: a throw-away PostgreSQL (default, as in production) or its local store",
    )


def backend_label(args: Any) -> str:
    """How the benchmark's lakeFS ran, for the printed header."""
    if args.lakefs_backend == "real":
        from tests.tools.real_lakefs import DEFAULT_LAKEFS_VERSION

        return f"real lakeFS v{DEFAULT_LAKEFS_VERSION} ({args.real_kv} KV) behind the proxy (latency from the proxy)"
    return "the local lakeFS server (latency added by the server)"


@contextmanager
def lakefs_process(backend: str, data_dir: Path, real_kv: str = "postgres") -> Iterator[ServerProcess]:
    """Run the benchmark's lakeFS until the block ends: the local server, or real lakeFS behind a proxy process.

    :param backend: ``"local"`` or ``"real"``.
    :param data_dir: the lakeFS data directory.
    :param real_kv: real lakeFS's KV store, ``"postgres"`` or ``"local"``.
    """
    if backend == "local":
        with server_process(data_dir) as server:
            yield server
        return
    os.environ.setdefault("LAKEFENCE_LAKEFS_GO_MODULE", str(REPO / "tests" / "real_lakefs"))
    from tests.tools.real_lakefs import RealLakeFS, ensure_lakefs_binary

    real = RealLakeFS(ensure_lakefs_binary(), data_dir, log_level="WARN", kv=real_kv)
    with real:
        proxy = subprocess.Popen(
            [sys.executable, "-m", "lakefence_testing.proxy", real.url],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proxy.stdout is not None
            url = proxy.stdout.readline().strip()
            if not url.startswith("http"):
                raise RuntimeError(f"the lakeFS proxy did not start (first line {url!r})")
            yield ServerProcess(url, real.access_key_id, real.secret_access_key, data_dir)
        finally:
            proxy.terminate()
            proxy.wait(timeout=30)


def setup_airflow(home: Path, dag_files: Sequence[Path], endpoint: str, access_key_id: str, secret: str) -> Path:
    """Configure an embedded Airflow in ``home`` (SQLite) before it is imported, and migrate its DB.

    The DAG files are linked into the dags folder: ``dag.test()`` needs them inside it.

    :param home: the Airflow home.
    :param dag_files: DAG files to link into the dags folder.
    :param endpoint: the lakeFS URL for the ``lakefs_default`` connection.
    :param access_key_id: its access key id.
    :param secret: its secret (environment only).
    :return: the dags folder.
    """
    if "airflow" in sys.modules:
        raise RuntimeError("Airflow was imported before its environment was set")
    dags = home / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    for path in dag_files:
        link = dags / path.name
        if not link.exists():
            link.symlink_to(path)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_LAKEFS_DEFAULT": json.dumps(
                {"conn_type": "lakefs", "host": endpoint, "login": access_key_id, "password": secret}
            ),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    return dags


def load_module(path: Path, name: str) -> Any:
    """Import a DAG file by path (its ``fileloc`` must lie in the dags folder)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def temp_home(prefix: str) -> Path:
    """A fresh temporary directory for one benchmark run."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def median(values: Sequence[float]) -> float:
    """The median of ``values``."""
    return float(statistics.median(values))


def machine() -> str:
    """One line describing this machine and the versions measured."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f", {int(line.split()[1]) / 1024 / 1024:.0f} GiB RAM"
                break
    except OSError:
        pass
    versions = []
    for dist in ("apache-airflow", "lakefs", "lakefs-sdk", "pyspark"):
        try:
            from importlib.metadata import version

            versions.append(f"{dist} {version(dist)}")
        except Exception:
            continue
    return (
        f"{cpu}, {os.cpu_count()} cores{memory}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}; {', '.join(versions)}"
    )


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a Markdown table (pasteable into docs/performance.md)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
