"""``LakeFSStagingCleanupOperator``: delete the staging branches of provably dead attempts."""

from __future__ import annotations

import functools
import json
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from airflow.providers.common.compat.sdk import BaseOperator, Variable

from airflow_lakefence.airflow_adapter.task_instances import (
    AirflowView,
    TaskSdkView,
    state_from_task_states,
    states_by_key,
)
from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.names.staging_names import validate_staging_prefix
from airflow_lakefence.core.staging.cleaner import (
    StagingBranch,
    inspect_branch,
    known_keys,
    plan_cleanup,
    remember,
)
from airflow_lakefence.exceptions import InvalidInputError, LakeFenceError
from airflow_lakefence.hooks.lakefs import LakeFSHook, LakeFSHookMixin
from airflow_lakefence.lakefs_adapter.client import LakeFSClient

#: XCom key under which each run also shows its memory: branch → [HEAD, epoch seconds first seen at that HEAD].
FIRST_SEEN_KEY = "first_seen"
#: Prefix of the Airflow Variable holding the memory of the cleaners of one (connection, repository, prefix).
MEMORY_VARIABLE_PREFIX = "lakefence_cleanup_memory"


def memory_variable_key(lakefs_conn_id: str, repository: str, staging_branch_prefix: str) -> str:
    """The Airflow Variable that holds the first-seen memory of the cleaners of these branches.

    The memory belongs to the branches, not to a DAG run: every cleaner of the same lakeFS
    connection, repository and prefix reads and writes the same Variable, and the latest write is
    what the next run reads (an XCom pulled across runs comes back by logical date, not by age).

    :param lakefs_conn_id: the lakeFS connection id.
    :param repository: the repository.
    :param staging_branch_prefix: the staging-branch prefix.
    """
    return f"{MEMORY_VARIABLE_PREFIX}.{lakefs_conn_id}.{repository}.{staging_branch_prefix}"


def _parse_memory(value: Any) -> dict[str, tuple[str, float]]:
    memory: dict[str, tuple[str, float]] = {}
    if isinstance(value, Mapping):
        for name, entry in value.items():
            if isinstance(entry, Sequence) and len(entry) == 2 and isinstance(entry[1], int | float):
                memory[str(name)] = (str(entry[0]), float(entry[1]))
    return memory


def _publishers(value: Iterable[Any] | None) -> list[tuple[str, str]]:
    result = []
    for item in value or ():
        if isinstance(item, Mapping):
            pair = (item.get("dag_id"), item.get("task_id"))
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2:
            pair = (item[0], item[1])
        else:
            pair = (None, None)
        if not all(isinstance(part, str) and part for part in pair):
            raise InvalidInputError(
                f"a publisher is {{'dag_id': ..., 'task_id': ...}} or (dag_id, task_id), got {item!r}"
            )
        result.append((str(pair[0]), str(pair[1])))
    return result


def _evidence_names(value: Any) -> Collection[str] | None:
    """The branch names of an ``evidence`` XCom (``{branch: error class}``); ``None`` when absent or
    malformed (a try that did not report it: unknown, never "no evidence")."""
    if not isinstance(value, Mapping) or not all(isinstance(name, str) for name in value):
        return None
    return frozenset(value)


class LakeFSStagingCleanupOperator(LakeFSHookMixin, BaseOperator):
    """Delete lakefence staging branches whose attempt is provably dead; keep live and evidence ones.

    It lists the staging branches under ``staging_branch_prefix`` (hidden ones included), reads each
    branch's HEAD, and only then asks Airflow about the attempts' task instances (so a state is never
    older than the listing it judges). It deletes a branch only when: a newer try of the same task
    instance has a staging branch; or its task instance is in a known state in which no try runs
    (success, failed, cleared, waiting for a retry...; a state it does not know counts as alive); or
    its task instance no longer exists; or (with ``max_age``) it could not be identified and this
    cleaner has seen it unchanged for ``max_age``. A branch kept as evidence is kept unless
    ``delete_evidence``, and so is a branch that may be evidence whose marker could not be written
    (staged without a marker, or unstaged with uncommitted changes) unless its task instance
    succeeded and its last try did not record it as evidence (XCom ``evidence``). A delete that
    fails is reported under ``kept`` and retried by the next run. The rules are in
    docs/abandoned-publications.md.

    Returns (XCom ``return_value``) ``{"deleted": [...], "kept": [...], "dry_run": bool}``, each
    entry ``{"branch", "reason", "try_number", "evidence", "head"}`` plus the task instance's
    ``dag_id``/``run_id``/``task_id``/``map_index`` when identified, and ``output_prefixes`` for a
    scoped attempt's branch (the write set its staged commit or evidence marker names). Running it
    again is harmless.

    The first-seen memory that ``max_age`` needs lives in the Airflow Variable
    :func:`memory_variable_key` names (shared by every cleaner of the same connection, repository
    and prefix, dry runs included); each run also pushes it as XCom ``first_seen``.

    lakeFS calls: one listing, one ``get_commit`` per distinct HEAD, one uncommitted diff (``amount=1``)
    per unstaged branch the rules would otherwise delete, one delete per deleted branch.
    Airflow calls: one ``get_task_states`` per publisher DAG and per DAG owning a staged branch, and
    one XCom read (``evidence``) per succeeded task instance with a branch that may be evidence.

    :param repository: the lakeFS repository (templated).
    :param staging_branch_prefix: the publishers' ``staging_branch_prefix``.
    :param publishers: ``[{"dag_id": ..., "task_id": ...}]`` (or pairs) whose runs are enumerated to
        identify unstaged branches, whose name alone does not say whose they are.
    :param max_age: delete an unidentified branch that this cleaner has seen at the same HEAD for at
        least this long (it must outlast your longest fenced task); ``None`` keeps them.
    :param delete_evidence: also delete dead attempts' evidence branches.
    :param dry_run: decide and report, delete nothing.
    :param clock: where ``max_age`` reads the time, in epoch seconds (default :func:`time.time`; a
        test passes a clock it moves instead of waiting).
    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param kwargs: :class:`BaseOperator` arguments.
    :raises InvalidInputError: for a malformed prefix, publisher or ``max_age``.
    """

    template_fields: Sequence[str] = ("repository",)
    ui_color = "#ffccbc"

    def __init__(
        self,
        *,
        repository: str,
        staging_branch_prefix: str = "lakefence",
        publishers: Iterable[Any] | None = None,
        max_age: timedelta | None = None,
        delete_evidence: bool = False,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        lakefs_conn_id: str = LakeFSHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        try:
            validate_staging_prefix(staging_branch_prefix)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        if max_age is not None and (not isinstance(max_age, timedelta) or max_age < timedelta(0)):
            raise InvalidInputError(f"max_age must be a non-negative timedelta, got {max_age!r}")
        self.repository = repository
        self.staging_branch_prefix = staging_branch_prefix
        self.publishers = _publishers(publishers)
        self.max_age = max_age
        self.delete_evidence = delete_evidence
        # BaseOperator.dry_run is a method (template rendering): the flag needs another name.
        self.is_dry_run = dry_run
        self.clock = clock
        self.lakefs_conn_id = lakefs_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        """Inspect, decide, delete (unless ``dry_run``) and report.

        :param context: the Airflow context.
        :raises LakeFenceError: a lakeFS failure; nothing is deleted on an incomplete answer.
        """
        now = self.clock()
        ti = context["ti"]
        memory_key = memory_variable_key(self.lakefs_conn_id, self.repository, self.staging_branch_prefix)
        previous = self._previous_memory(memory_key)
        client = self.client
        branches = self._inspect(client)
        result = self.clean(client, TaskSdkView(), branches, previous, now)
        memory = result.pop(FIRST_SEEN_KEY)
        # A sighting is an observation, not a deletion: a dry run remembers too.
        self._save_memory(memory_key, memory)
        ti.xcom_push(key=FIRST_SEEN_KEY, value=memory)
        return result

    def clean(
        self,
        client: LakeFSClient,
        airflow: AirflowView,
        branches: Sequence[StagingBranch],
        previous: Mapping[str, tuple[str, float]],
        now: float,
    ) -> dict[str, Any]:
        """Decide about ``branches`` and delete the dead ones (the body of :meth:`execute`).

        :param client: the lakeFS adapter.
        :param airflow: how to ask Airflow.
        :param branches: the inspected staging branches.
        :param previous: the previous run's first-seen memory.
        :param now: the current time, epoch seconds.
        """
        states: dict[PublicationKey, str | None] = {}
        by_dag: dict[str, list[str]] = defaultdict(list)
        for dag_id, task_id in self.publishers:
            by_dag[dag_id].append(task_id)
        for dag_id, task_ids in by_dag.items():
            states.update(states_by_key(dag_id, task_ids, airflow.task_states(dag_id, task_ids)))
        keys = known_keys(branches, states)
        wanted = {keys[b.info.key_hash] for b in branches if b.info.key_hash in keys} - states.keys()
        grouped: dict[str, list[PublicationKey]] = defaultdict(list)
        for key in wanted:
            grouped[key.dag_id].append(key)
        for dag_id, dag_keys in grouped.items():
            answer = airflow.task_states(
                dag_id, sorted({k.task_id for k in dag_keys}), sorted({k.run_id for k in dag_keys})
            )
            states.update((key, state_from_task_states(answer, key)) for key in dag_keys)

        max_age = None if self.max_age is None else self.max_age.total_seconds()
        decisions = plan_cleanup(
            branches,
            keys=keys,
            states=states,
            first_seen=previous,
            now=now,
            max_age=max_age,
            delete_evidence=self.delete_evidence,
            has_uncommitted=functools.partial(self._has_uncommitted, client),
            run_evidence=functools.partial(self._run_evidence, airflow),
        )
        deleted: list[dict[str, Any]] = []
        kept: list[dict[str, Any]] = []
        for n, decision in enumerate(decisions):
            if decision.delete and not self.is_dry_run:
                try:
                    client.delete_branch(self.repository, decision.branch, missing_ok=True)
                except LakeFenceError as exc:
                    # One failed delete must not stop the others; the next run tries again.
                    decision = decisions[n] = replace(decision, delete=False, reason=f"delete failed: {exc}")
            (deleted if decision.delete else kept).append(decision.to_dict())
            self.log.info(
                "%s %s: %s",
                ("would delete" if self.is_dry_run else "deleted") if decision.delete else "kept",
                decision.branch,
                decision.reason,
            )
        memory = remember(branches, decisions, previous, now)
        return {
            "deleted": deleted,
            "kept": kept,
            "dry_run": self.is_dry_run,
            FIRST_SEEN_KEY: {name: [head, seen] for name, (head, seen) in memory.items()},
        }

    def _has_uncommitted(self, client: LakeFSClient, branch: StagingBranch) -> bool:
        # One page of one entry: "is anything uncommitted" costs one call whatever the branch holds.
        try:
            changes = client.diff_uncommitted(self.repository, branch.name, amount=1)
            return next(iter(changes), None) is not None
        except LakeFenceError as exc:
            self.log.warning("could not read the uncommitted changes of %s (%s): kept", branch.name, exc)
            return True

    def _run_evidence(self, airflow: AirflowView, key: PublicationKey) -> Collection[str] | None:
        try:
            value = airflow.evidence(key)
        except Exception as exc:  # unknown: every branch that may be evidence is kept
            self.log.warning("could not read the evidence XCom of %s (%s)", key, exc)
            return None
        return _evidence_names(value)

    def _inspect(self, client: LakeFSClient) -> list[StagingBranch]:
        prefix = self.staging_branch_prefix
        heads: dict[str, Mapping[str, str]] = {}
        branches = []
        for name, commit_id in client.list_branches(self.repository, f"{prefix}-", show_hidden=True):
            if commit_id not in heads:
                # Unstaged branches share their input commit: read each HEAD once.
                heads[commit_id] = client.get_commit(self.repository, commit_id).metadata
            branch = inspect_branch(name, commit_id, heads[commit_id], prefix)
            if branch is not None:
                branches.append(branch)
        return branches

    def _previous_memory(self, key: str) -> dict[str, tuple[str, float]]:
        try:
            # The default positionally: Airflow 3's Variable.get calls it ``default``, Airflow 2's ``default_var``.
            raw = Variable.get(key, None)
        except Exception as exc:  # whatever failed, an empty memory only ever delays a deletion
            self.log.warning("could not read the cleaner memory %s (%s): every branch is new to this run", key, exc)
            return {}
        if raw is None:
            return {}
        try:
            return _parse_memory(json.loads(raw) if isinstance(raw, str) else raw)
        except ValueError:
            self.log.warning("the cleaner memory %s is not JSON: every branch is new to this run", key)
            return {}

    def _save_memory(self, key: str, memory: Mapping[str, Any]) -> None:
        try:
            Variable.set(
                key,
                json.dumps(memory, sort_keys=True),
                description="lakefence cleaner: staging branch -> [HEAD, epoch seconds first seen at that HEAD]",
            )
        except Exception as exc:  # the deletions are done; the next run only restarts the clocks
            self.log.warning("could not save the cleaner memory %s (%s)", key, exc)
