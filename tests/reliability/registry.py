"""The attempt registry: the Airflow side of an attempt, shared by processes through one SQLite file.

``dag.test()`` cannot run two tries of one task instance in separate processes, nor crash one and
start the next, so the reliability tests play Airflow's part here with the same semantics the
attempt fence relies on (checked against the real Execution API by the
integration tests):

* every try gets a **new task-instance id**; starting a new try (retry or clear) archives every
  earlier id of the key and clears the key's XComs;
* ``task_state_store`` values are addressed by ti id; an archived id reads back as the default
  (the API server answers 404) and cannot be written;
* ``get_task_states`` answers the state of the key's *current* task instance;
* mark success / mark failed keep the id and change the state;
* XCom pushes are not fenced: a stale process can still push (recorded with its ti id).

Heartbeats, SIGTERM/SIGKILL and ``on_kill`` are Airflow-side behaviour the real-scheduler tests
cover; nothing here kills a process.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ti (
    id TEXT PRIMARY KEY, dag_id TEXT, run_id TEXT, task_id TEXT, map_index INTEGER,
    try_number INTEGER, state TEXT, archived INTEGER DEFAULT 0
);
CREATE TABLE IF NOT EXISTS store (ti_id TEXT, key TEXT, value TEXT, PRIMARY KEY (ti_id, key));
CREATE TABLE IF NOT EXISTS xcom (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, ti_id TEXT, key TEXT, value TEXT, at REAL, cleared INTEGER DEFAULT 0
);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL, who TEXT, what TEXT, detail TEXT);
"""


class TaskInstanceNotFound(RuntimeError):
    """What the Execution API answers for an archived task-instance id (HTTP 404)."""


@dataclass(frozen=True)
class TIRow:
    """One task instance (one try) as the registry stores it."""

    id: str
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    state: str
    archived: bool


class AttemptRegistry:
    """The shared registry file.

    :param path: the SQLite file (created on first use).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        db = sqlite3.connect(self.path, timeout=30)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.executescript(_SCHEMA)
        finally:
            db.close()

    @contextmanager
    def _db(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout = 30000")
            # WAL: readers never wait for the writer; writers queue on the one write lock.
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    # -- the scheduler / UI side ---------------------------------------------------------------

    def new_try(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1, *, state: str = "running") -> str:
        """Start the next try of a key (first run, retry or clear): a new ti id, earlier ones archived.

        :return: the new task-instance id.
        """
        ti_id = str(uuid.uuid4())
        with self._db() as db:
            row = db.execute(
                "SELECT MAX(try_number) FROM ti WHERE dag_id=? AND run_id=? AND task_id=? AND map_index=?",
                (dag_id, run_id, task_id, map_index),
            ).fetchone()
            try_number = (row[0] or 0) + 1
            old = [
                r[0]
                for r in db.execute(
                    "SELECT id FROM ti WHERE dag_id=? AND run_id=? AND task_id=? AND map_index=? AND archived=0",
                    (dag_id, run_id, task_id, map_index),
                )
            ]
            for old_id in old:
                db.execute("UPDATE ti SET archived=1 WHERE id=?", (old_id,))
                db.execute("UPDATE xcom SET cleared=1 WHERE ti_id=?", (old_id,))
            db.execute(
                "INSERT INTO ti VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                (ti_id, dag_id, run_id, task_id, map_index, try_number, state),
            )
            self._event(db, "scheduler", "new_try", {"ti_id": ti_id, "try_number": try_number, "archived": old})
        return ti_id

    def set_state(self, ti_id: str, state: str) -> None:
        """Mark a task instance (the id is kept, as Airflow's mark success / mark failed do)."""
        with self._db() as db:
            db.execute("UPDATE ti SET state=? WHERE id=?", (state, ti_id))
            self._event(db, "scheduler", "set_state", {"ti_id": ti_id, "state": state})

    def find_try(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str | None:
        """The ti id of a key's try ``try_number``, or ``None`` while it does not exist."""
        with self._db(write=False) as db:
            row = db.execute(
                "SELECT id FROM ti WHERE dag_id=? AND run_id=? AND task_id=? AND map_index=? AND try_number=?",
                (dag_id, run_id, task_id, map_index, try_number),
            ).fetchone()
        return None if row is None else str(row[0])

    def finish(self, ti_id: str, state: str) -> bool:
        """The task runner reports a try's end; refused (``False``) for an archived id, as the API server does."""
        with self._db() as db:
            if not self._live(db, ti_id):
                self._event(db, "scheduler", "finish_refused", {"ti_id": ti_id, "state": state})
                return False
            db.execute("UPDATE ti SET state=? WHERE id=?", (state, ti_id))
            self._event(db, "scheduler", "finish", {"ti_id": ti_id, "state": state})
        return True

    def ti(self, ti_id: str) -> TIRow:
        """Return one task instance (archived ones included)."""
        with self._db(write=False) as db:
            row = db.execute("SELECT * FROM ti WHERE id=?", (ti_id,)).fetchone()
        if row is None:
            raise KeyError(ti_id)
        return TIRow(*row[:7], archived=bool(row[7]))

    def xcoms(self, *, include_cleared: bool = False, of: Any = None) -> list[dict[str, Any]]:
        """Every XCom push in order: ``{ti_id, key, value, at, cleared}``.

        :param of: only the pushes of this publication key's task instances (when several keys share the registry).
        """
        query = "SELECT ti_id, key, value, at, cleared FROM xcom WHERE 1=1"
        params: tuple[Any, ...] = ()
        if not include_cleared:
            query += " AND cleared=0"
        if of is not None:
            query += " AND ti_id IN (SELECT id FROM ti WHERE dag_id=? AND run_id=? AND task_id=? AND map_index=?)"
            params = (of.dag_id, of.run_id, of.task_id, of.map_index)
        with self._db(write=False) as db:
            rows = db.execute(query + " ORDER BY seq", params).fetchall()
        return [
            {"ti_id": r[0], "key": r[1], "value": json.loads(r[2]), "at": r[3], "cleared": bool(r[4])} for r in rows
        ]

    def visible_xcoms(self, of: Any = None) -> dict[str, Any]:
        """What a downstream task would pull: the last uncleared push of each key.

        :param of: only this publication key's pushes.
        """
        return {row["key"]: row["value"] for row in self.xcoms(of=of)}

    def events(self) -> list[dict[str, Any]]:
        """The timeline: ``{at, who, what, detail}`` in order."""
        with self._db(write=False) as db:
            rows = db.execute("SELECT at, who, what, detail FROM events ORDER BY seq").fetchall()
        return [{"at": r[0], "who": r[1], "what": r[2], "detail": json.loads(r[3])} for r in rows]

    def wait_for(
        self, who: str, what: str, point: str | Mapping[str, Any] | None = None, timeout: float = 120.0
    ) -> float:
        """Block until ``who`` recorded ``what`` (at failpoint ``point``); return the event's time.

        :param who: who recorded the event (``try1``, ``scheduler``, ``foreign``...).
        :param what: the event (``point``, ``new_try``, ``end``...).
        :param point: a failpoint name (matched against the event's ``point``), or fields the
            event's detail must hold, e.g. ``{"try_number": 2}`` for the clear that mints try 2
            (the timeline's first ``new_try`` is try 1's own).
        :param timeout: seconds before :class:`TimeoutError`.
        """
        wanted = {"point": point} if isinstance(point, str) else dict(point or {})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if event["who"] != who or event["what"] != what:
                    continue
                detail = event["detail"] if isinstance(event["detail"], dict) else {}
                if all(detail.get(name) == value for name, value in wanted.items()):
                    return float(event["at"])
            time.sleep(0.02)
        raise TimeoutError(f"{who} never recorded {what} {point or ''}")

    def record(self, who: str, what: str, detail: Any = None) -> None:
        """Append an event to the timeline."""
        with self._db() as db:
            self._event(db, who, what, detail)

    @staticmethod
    def _event(db: sqlite3.Connection, who: str, what: str, detail: Any) -> None:
        db.execute(
            "INSERT INTO events (at, who, what, detail) VALUES (?, ?, ?, ?)",
            (time.time(), who, what, json.dumps(detail, default=str)),
        )

    # -- the Execution API side (what task code can call) --------------------------------------

    def _live(self, db: sqlite3.Connection, ti_id: str) -> bool:
        row = db.execute("SELECT archived FROM ti WHERE id=?", (ti_id,)).fetchone()
        return row is not None and not row[0]

    def store_get(self, ti_id: str, key: str, default: Any = None) -> Any:
        """``task_state_store.get``: the default for an archived id (the server's 404)."""
        with self._db(write=False) as db:
            if not self._live(db, ti_id):
                return default
            row = db.execute("SELECT value FROM store WHERE ti_id=? AND key=?", (ti_id, key)).fetchone()
        return default if row is None else json.loads(row[0])

    def store_set(self, ti_id: str, key: str, value: Any) -> None:
        """``task_state_store.set``: refused for an archived id."""
        with self._db() as db:
            if not self._live(db, ti_id):
                raise TaskInstanceNotFound(f"task instance {ti_id} not found")
            db.execute("INSERT OR REPLACE INTO store VALUES (?, ?, ?)", (ti_id, key, json.dumps(value)))

    def task_states(self, dag_id: str, run_ids: list[str] | None, task_ids: list[str]) -> dict[str, dict[str, str]]:
        """``get_task_states``: ``{run_id: {task_id: state}}`` of each key's current task instance.

        :param run_ids: the runs; ``None`` for every run of the DAG.
        """
        result: dict[str, dict[str, str]] = {}
        with self._db(write=False) as db:
            if run_ids is None:
                run_ids = [r[0] for r in db.execute("SELECT DISTINCT run_id FROM ti WHERE dag_id=?", (dag_id,))]
            for run_id in run_ids:
                for task_id in task_ids:
                    row = db.execute(
                        "SELECT state FROM ti WHERE dag_id=? AND run_id=? AND task_id=? AND archived=0",
                        (dag_id, run_id, task_id),
                    ).fetchone()
                    if row is not None:
                        result.setdefault(run_id, {})[task_id] = row[0]
        return result

    def xcom_push(self, ti_id: str, key: str, value: Any) -> None:
        """``ti.xcom_push``: not fenced (Airflow does not fence XCom writes either)."""
        with self._db() as db:
            db.execute(
                "INSERT INTO xcom (ti_id, key, value, at) VALUES (?, ?, ?, ?)",
                (ti_id, key, json.dumps(value), time.time()),
            )


class StandInTaskInstance:
    """``context["ti"]`` for the attempt driver, backed by the registry.

    :param registry: the shared registry.
    :param row: this process's task instance.
    """

    def __init__(self, registry: AttemptRegistry, row: TIRow) -> None:
        self._registry = registry
        self.id = row.id
        self.dag_id = row.dag_id
        self.run_id = row.run_id
        self.task_id = row.task_id
        self.map_index = row.map_index
        self.try_number = row.try_number

    def xcom_push(self, key: str, value: Any) -> None:
        """Push an XCom (recorded with this ti id)."""
        self._registry.xcom_push(self.id, key, value)

    def get_task_states(
        self,
        dag_id: str,
        map_index: int | None = None,
        task_ids: list[str] | None = None,
        task_group_id: str | None = None,
        logical_dates: Any = None,
        run_ids: list[str] | None = None,
    ) -> dict[str, dict[str, str]]:
        """The current state of each task of each run, as the Execution API answers it."""
        return self._registry.task_states(dag_id, list(run_ids or []), list(task_ids or []))


class StandInTaskStateStore:
    """``context["task_state_store"]`` for the attempt driver, addressed by this ti id.

    :param registry: the shared registry.
    :param ti_id: this process's task-instance id.
    """

    def __init__(self, registry: AttemptRegistry, ti_id: str) -> None:
        self._registry = registry
        self._ti_id = ti_id

    def get(self, key: str, default: Any = None) -> Any:
        """The stored value, or ``default`` (also when this ti id is archived)."""
        return self._registry.store_get(self._ti_id, key, default)

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        """Store a value; raises :class:`TaskInstanceNotFound` once this ti id is archived."""
        if value is None:
            raise ValueError("Cannot set value as None")
        self._registry.store_set(self._ti_id, key, value)
