"""Server-internal: a server process killed with SIGKILL under load loses nothing it acknowledged."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import lakefs
import pytest

import lakefence_testing.lakefs_server as server_package
from lakefence_testing.lakefs_server import DEFAULT_ACCESS_KEY_ID, DEFAULT_SECRET_ACCESS_KEY

pytestmark = pytest.mark.lakefs_local_only

_ROOT = Path(server_package.__file__).resolve().parents[2]


def _start(data_dir: Path) -> tuple[subprocess.Popen[str], lakefs.Client]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakefence_testing.lakefs_server", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    client = lakefs.Client(host=url, username=DEFAULT_ACCESS_KEY_ID, password=DEFAULT_SECRET_ACCESS_KEY)
    return proc, client


@dataclass
class _Acks:
    uploads: list[tuple[str, str, bytes]] = field(default_factory=list)
    commits: list[tuple[str, str, str, bytes]] = field(default_factory=list)
    merges: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _load(client: lakefs.Client, repo_id: str, worker: int, acks: _Acks) -> None:
    repo = lakefs.Repository(repo_id, client=client)
    branch = repo.branch(f"w{worker}")
    i = 0
    try:
        while True:
            path, data = f"w{worker}/{i}", f"{worker}:{i}:{uuid.uuid4()}".encode()
            branch.object(path).upload(data)
            with acks.lock:
                acks.uploads.append((branch.id, path, data))
            commit_id = branch.commit(f"{worker}-{i}").get_commit().id
            with acks.lock:
                acks.commits.append((branch.id, commit_id, path, data))
            if i % 3 == 0:
                merge_id = branch.merge_into("main")
                with acks.lock:
                    acks.merges.append(merge_id)
            i += 1
    except Exception:
        return


def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    proc, client = _start(tmp_path)
    try:
        repo_id = "durability"
        repo = lakefs.Repository(repo_id, client=client).create(storage_namespace="local://durability")
        workers = 4
        for w in range(workers):
            repo.branch(f"w{w}").create("main")
        acks = _Acks()
        threads = [threading.Thread(target=_load, args=(client, repo_id, w, acks)) for w in range(workers)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(acks.merges) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        for t in threads:
            t.join(timeout=60)
        assert len(acks.merges) >= 8
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    with sqlite3.connect(tmp_path / "lakefs.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    proc, client = _start(tmp_path)
    try:
        repo = lakefs.Repository(repo_id, client=client)
        for branch_id, path, data in acks.uploads:
            assert repo.branch(branch_id).object(path).reader().read() == data
        for _branch_id, commit_id, path, data in acks.commits:
            assert repo.ref(commit_id).object(path).reader().read() == data
        for w in range(workers):
            branch_commits = [c for c in acks.commits if c[0] == f"w{w}"]
            if branch_commits:
                history = {c.id for c in repo.branch(f"w{w}").log()}
                assert branch_commits[-1][1] in history
        main_history = {c.id for c in repo.branch("main").log(first_parent=True)}
        assert set(acks.merges) <= main_history
        repo.branch("main").object("after-restart").upload("ok")
        repo.branch("main").commit("after restart")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0
