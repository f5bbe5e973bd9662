"""The run state in lakeFS itself: the :class:`~airflow_lakefence.core.records.run_state.RunStatePort` of the
fenced operators on every Airflow version (docs/protocol.md, "Run state").

Each record is one empty object on a hidden branch of the task's own repository,
:data:`RUN_STATE_BRANCH`, at ``runs/<hash of the publication key>/<record key>``, its value in the
object's user metadata. It is created with ``If-None-Match: *`` (atomic on lakeFS): of two tries
racing for one key exactly one creates it, and the loser reads the winner's value. No record is ever
rewritten, so no update can be lost between two live tries. The objects stay uncommitted on that
branch (lakeFS keeps a branch's staged objects in its KV store, durably); nothing ever merges it.

Cost: a first try reads nothing (try numbers only grow, so no earlier try of the run can have
written anything); a later try reads every record of its run with one listing, once. A write is
one call; the very first write into a repository also creates the branch (two more calls, once).

What survives what: Airflow's retries, clears (with or without deleting the task's own state),
mark success / failed and a worker's death touch nothing here; deleting the DAG run does not
either. Each record names its publication key in its metadata (:data:`RECORD_KEY_METADATA_KEY`), so
the staging cleaner (``LakeFSStagingCleanupOperator(run_state_retention=...)``) can remove the
records of runs that can no longer be retried or cleared (docs/abandoned-publications.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.exceptions import (
    LakeFenceError,
    LakeFSConflictError,
    LakeFSNotFoundError,
    LakeFSRepositoryNotFoundError,
)
from airflow_lakefence.lakefs_adapter.client import LakeFSClient

__all__ = [
    "RECORD_KEY_METADATA_KEY",
    "RECORD_METADATA_KEY",
    "RUNS_PREFIX",
    "RUN_STATE_BRANCH",
    "LakeFSRunState",
    "record_key",
    "record_value",
    "run_state_prefix",
    "task_run_state",
]

#: The hidden branch holding every run's records in a repository (not a staging branch: the
#: cleaner's ``<prefix>-`` listing never matches it).
RUN_STATE_BRANCH = "_lakefence_run_state"
#: The user-metadata key carrying a record's value (base64url of its JSON).
RECORD_METADATA_KEY = "lakefence-record"
#: The user-metadata key naming the record's publication key (base64url of the JSON list
#: ``[dag_id, run_id, task_id, map_index]``): the cleaner asks Airflow about that task instance.
RECORD_KEY_METADATA_KEY = "lakefence-key"
#: Where every run's records live on :data:`RUN_STATE_BRANCH`.
RUNS_PREFIX = "runs/"


def run_state_prefix(key: PublicationKey) -> str:
    """The object prefix of one publication key's records.

    :param key: the publication key.
    """
    digest = hashlib.sha256(
        json.dumps([key.dag_id, key.run_id, key.task_id, key.map_index]).encode("utf-8")
    ).hexdigest()[:40]
    return f"{RUNS_PREFIX}{digest}/"


def _encode(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, sort_keys=True).encode("utf-8")).decode("ascii")


def _decode(metadata: dict[str, str], name: str = RECORD_METADATA_KEY) -> Any:
    raw = metadata.get(name)
    if raw is None:
        return None
    try:
        return json.loads(base64.urlsafe_b64decode(raw.encode("ascii")))
    except ValueError:
        return None


def record_key(metadata: dict[str, str]) -> PublicationKey | None:
    """The publication key a record names in its metadata; ``None`` for a record written before
    records named it, or a malformed one.

    :param metadata: the record's user metadata (lower-case keys).
    """
    value = _decode(metadata, RECORD_KEY_METADATA_KEY)
    if not isinstance(value, list) or len(value) != 4:
        return None
    dag_id, run_id, task_id, map_index = value
    if not (isinstance(dag_id, str) and isinstance(run_id, str) and isinstance(task_id, str)):
        return None
    if not isinstance(map_index, int) or isinstance(map_index, bool):
        return None
    key = PublicationKey(dag_id, run_id, task_id, map_index)
    return key


def record_value(metadata: dict[str, str]) -> Any:
    """The value a record carries (``None`` when unreadable).

    :param metadata: the record's user metadata (lower-case keys).
    """
    return _decode(metadata)


class LakeFSRunState:
    """The run state of one task instance in one run, as write-once records in lakeFS.

    :param client: the lakeFS client.
    :param repository: the task's repository.
    :param key: the publication key (every try of the run shares it).
    :param source_branch: the branch the record branch is created from when it does not exist yet
        (its content is irrelevant: only ``runs/`` is read).
    :param fresh: this is a first try: no earlier try of the run can have written a record, so
        nothing is read until this try itself writes.
    """

    def __init__(
        self, client: LakeFSClient, repository: str, key: PublicationKey, *, source_branch: str, fresh: bool
    ) -> None:
        self.client = client
        self.repository = repository
        self.key = key
        self.source_branch = source_branch
        self.prefix = run_state_prefix(key)
        self._key_metadata = _encode([key.dag_id, key.run_id, key.task_id, key.map_index])
        self._values: dict[str, Any] | None = {} if fresh else None

    def reloaded(self) -> LakeFSRunState:
        """The same run state, read afresh on first use (what other tries wrote since is seen)."""
        return LakeFSRunState(self.client, self.repository, self.key, source_branch=self.source_branch, fresh=False)

    def _load(self) -> dict[str, Any]:
        if self._values is None:
            try:
                records = self.client.list_records(self.repository, RUN_STATE_BRANCH, self.prefix)
            except LakeFSRepositoryNotFoundError:
                raise
            except LakeFSNotFoundError:
                records = {}  # no record branch yet: nothing was ever recorded in this repository
            self._values = {path[len(self.prefix) :]: _decode(meta) for path, meta in records.items()}
        return self._values

    def get(self, key: str) -> Any:
        """The value of one record, ``None`` when absent (the first read lists the run's records).

        :param key: the record key.
        :raises LakeFenceError: when lakeFS does not answer (the engine fails closed).
        """
        return self._load().get(key)

    def items(self, prefix: str) -> dict[str, Any]:
        """The records whose key starts with ``prefix``.

        :param prefix: the key prefix.
        :raises LakeFenceError: when lakeFS does not answer.
        """
        return {key: value for key, value in self._load().items() if key.startswith(prefix)}

    def create(self, key: str, value: Any) -> Any:
        """Create one record unless it exists; return the value stored afterwards.

        :param key: the record key.
        :param value: a JSON-serializable value.
        :raises LakeFenceError: when lakeFS refuses or does not answer.
        """
        metadata = {RECORD_METADATA_KEY: _encode(value), RECORD_KEY_METADATA_KEY: self._key_metadata}
        path = self.prefix + key
        try:
            created = self._create(path, metadata)
        except LakeFSRepositoryNotFoundError:
            raise
        except LakeFSNotFoundError:  # the first record of this repository: make its branch
            try:
                self.client.create_branch(self.repository, RUN_STATE_BRANCH, self.source_branch, hidden=True)
            except LakeFSConflictError:
                pass  # another task created it meanwhile
            created = self._create(path, metadata)
        if created:
            if self._values is not None:
                self._values[key] = json.loads(json.dumps(value))
            return value
        self._values = None  # another try wrote it first (or our lost answer did): read it back
        stored = self._load().get(key)
        if stored is None:
            raise LakeFenceError(f"run-state record {path!r} exists on {RUN_STATE_BRANCH!r} but could not be read")
        return stored

    def _create(self, path: str, metadata: dict[str, str]) -> bool:
        return self.client.create_record(self.repository, RUN_STATE_BRANCH, path, metadata)


def read_run_state(client: LakeFSClient, repository: str, key: PublicationKey) -> dict[str, Any]:
    """Every record of one task instance's run (for operators and tests): ``{record key: value}``,
    e.g. ``{"pin/<hash>": {"ref": "main", "commit": "..."}, "published/00000001": {...}}``.

    :param client: the lakeFS client.
    :param repository: the repository.
    :param key: the publication key.
    :raises LakeFenceError: when lakeFS does not answer.
    """
    return LakeFSRunState(client, repository, key, source_branch="main", fresh=False).items("")


def task_run_state(context: Any, client: LakeFSClient, repository: str, *, source_branch: str) -> LakeFSRunState:
    """The run state of the task instance running in ``context`` (every try of its run shares it).

    :param context: the Airflow context.
    :param client: the lakeFS client.
    :param repository: the repository holding the records.
    :param source_branch: the branch the record branch is created from when it does not exist yet.
    """
    from airflow_lakefence.airflow_adapter.attempt_fence import attempt_from_context

    attempt = attempt_from_context(context)
    return LakeFSRunState(client, repository, attempt.key, source_branch=source_branch, fresh=attempt.try_number <= 1)
