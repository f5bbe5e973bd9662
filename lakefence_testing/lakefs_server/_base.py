"""The store's plumbing: the SQLite database (connections, read and write transactions) and
object bytes on disk.

Metadata lives in one SQLite database (WAL mode). Every mutation runs in a ``BEGIN IMMEDIATE``
transaction, so branch updates serialize and each one is evaluated against the branch HEAD
current inside the transaction: the equivalent of lakeFS's ``SetIf`` retry loop. Object bytes
are content addressed on disk and made durable before the metadata that points at them.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from lakefence_testing._serving import Tally
from lakefence_testing.lakefs_server._model import Blob
from lakefence_testing.lakefs_server._tx import SCHEMA, Tx


class StoreBase:
    """The server's state on disk: connections, transactions and object bytes.

    :param data_dir: directory holding ``lakefs.sqlite3`` and the ``blobs/`` tree.
    :param committer: the name recorded as committer (lakeFS records the user name).
    """

    def __init__(self, data_dir: str | os.PathLike[str], committer: str = "admin") -> None:
        self.data_dir = Path(data_dir)
        self.committer = committer
        self._blobs = self.data_dir / "blobs"
        self._tmp = self.data_dir / "tmp"
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._db_path = self.data_dir / "lakefs.sqlite3"
        self._pool: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._stats = Tally()
        self._uncounted = threading.local()
        with self._connection() as conn:
            conn.executescript(SCHEMA)

    # --- plumbing -----------------------------------------------------------------------

    def count_stat(self, name: str, amount: int = 1) -> None:
        """Add to an internal counter (commit rows read, tree rows read).

        :param name: counter name.
        :param amount: how much to add.
        """
        if not getattr(self._uncounted, "active", False):
            self._stats.add(name, amount)

    @contextmanager
    def uncounted(self) -> Iterator[None]:
        """Read without adding to the internal counters (in this thread): a page of the read-only UI
        is not an API call, and must not change what a test measures of the API."""
        previous = getattr(self._uncounted, "active", False)
        self._uncounted.active = True
        try:
            yield
        finally:
            self._uncounted.active = previous

    def stats(self) -> dict[str, int]:
        """Return the internal counters."""
        return self._stats.snapshot()

    def reset_stats(self) -> None:
        """Zero the internal counters."""
        self._stats.clear()

    def close(self) -> None:
        """Close every pooled connection."""
        with self._pool_lock:
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()

    def _new_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._db_path, isolation_level=None, check_same_thread=False, timeout=60.0
        )
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: an acknowledged write survives even a machine crash, not only SIGKILL.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=60000")
        return conn

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._pool_lock:
            conn = self._pool.pop() if self._pool else None
        if conn is None:
            conn = self._new_connection()
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.rollback()
            with self._pool_lock:
                self._pool.append(conn)

    @contextmanager
    def read(self) -> Iterator[Tx]:
        """Run queries against one consistent snapshot (rolled back as the connection is pooled again)."""
        with self._connection() as conn:
            conn.execute("BEGIN")
            yield Tx(conn, self)

    @contextmanager
    def reading(self, tx: Tx | None) -> Iterator[Tx]:
        """Use ``tx`` when given (a hook reading inside the merge's transaction), else a new snapshot."""
        if tx is not None:
            yield tx
            return
        with self.read() as fresh:
            yield fresh

    @contextmanager
    def write(self) -> Iterator[Tx]:
        """Run a mutation: serialized with every other mutation, committed atomically."""
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            yield Tx(conn, self)  # a failure leaves it uncommitted: rolled back as the connection is pooled again
            conn.commit()

    # --- blobs --------------------------------------------------------------------------

    def blob_path(self, sha256: str) -> Path:
        """Return where the bytes with this sha256 live.

        :param sha256: hex digest.
        """
        return self._blobs / sha256[:2] / sha256

    def put_blob(self, stream: IO[bytes]) -> Blob:
        """Store bytes durably (written, fsynced, renamed) and return their address.

        :param stream: the bytes to store, read to the end.
        """
        sha = hashlib.sha256()
        md5 = hashlib.md5()
        size = 0
        tmp = self._tmp / uuid.uuid4().hex
        try:
            with open(tmp, "wb") as out:
                while True:
                    chunk = stream.read(1 << 20)
                    if not chunk:
                        break
                    sha.update(chunk)
                    md5.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            target = self.blob_path(sha.hexdigest())
            target.parent.mkdir(exist_ok=True)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return Blob(sha.hexdigest(), md5.hexdigest(), size)

