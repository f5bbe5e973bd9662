"""Copying the live metadata DB for a ``dag.test()`` process keeps this process's SQLite locks.

A plain file copy closes a descriptor of the database file and so drops this process's POSIX locks:
the next process to close its connection deletes the WAL under the open connections here (in CI, one
xdist worker's later tests all failed with "disk I/O error").
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.integration.dag_test_process import copy_metadata_db

_ANOTHER_PROCESS_READS = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('select x from t').fetchall(); c.close()"
)


def test_the_copy_keeps_the_wal_of_this_process_and_copies_its_rows(tmp_path: Path) -> None:
    database = tmp_path / "airflow.db"
    live = sqlite3.connect(database)
    live.execute("PRAGMA journal_mode=WAL")
    live.execute("create table t(x)")
    live.execute("insert into t values (1)")
    live.commit()

    copy_metadata_db(database, tmp_path / "copy.db")
    subprocess.run([sys.executable, "-c", _ANOTHER_PROCESS_READS, str(database)], check=True, timeout=60)

    # This process still has the database open: its WAL and shared-memory files must stay.
    assert (tmp_path / "airflow.db-wal").exists() and (tmp_path / "airflow.db-shm").exists()
    live.execute("insert into t values (2)")
    live.commit()
    assert sqlite3.connect(tmp_path / "copy.db").execute("select x from t").fetchall() == [(1,)]
    live.close()
