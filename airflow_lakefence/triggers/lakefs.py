"""Triggers of the deferrable lakeFS sensors.

Each trigger repeats its sensor's probe (:mod:`airflow_lakefence.triggers.probes`, the very code of
poke mode) every ``poke_interval`` seconds until it is satisfied, fails, or ``deadline`` passes.
The lakeFS adapter is synchronous, so a probe runs in a worker thread (``asyncio.to_thread``): the
triggerer's event loop is never blocked, at the cost of one thread per probe in flight. Airflow is
asked through the same Task SDK calls as in a task, which the triggerer serves.

Events: ``{"status": "success", "value": ...}``, ``{"status": "timeout", "message": ...}`` or
``{"status": "error", "error": <exception class name>, "message": ...}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_lakefence.airflow_adapter.task_instances import TaskSdkView
from airflow_lakefence.core.publication.abandonment import CONDITIONS, PublisherScope, condition_met
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.triggers.probes import probe_abandoned, probe_new_commit, probe_object


class LakeFSPollingTrigger(BaseTrigger):
    """Poll one probe until it is satisfied.

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param poke_interval: seconds between probes.
    :param deadline: epoch seconds after which the trigger gives up (a ``timeout`` event).
    """

    def __init__(self, *, lakefs_conn_id: str, poke_interval: float = 60.0, deadline: float | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.lakefs_conn_id = lakefs_conn_id
        self.poke_interval = float(poke_interval)
        self.deadline = None if deadline is None else float(deadline)

    #: The subclass's own constructor arguments, serialized by name (all JSON-serializable).
    _fields: ClassVar[tuple[str, ...]] = ()

    def _kwargs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._fields}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and JSON-serializable kwargs."""
        kwargs = {
            **self._kwargs(),
            "lakefs_conn_id": self.lakefs_conn_id,
            "poke_interval": self.poke_interval,
            "deadline": self.deadline,
        }
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    @cached_property
    def client(self) -> LakeFSClient:
        """The lakeFS adapter, built on first use (in the probe's thread)."""
        from airflow_lakefence.hooks.lakefs import LakeFSHook

        return LakeFSHook(lakefs_conn_id=self.lakefs_conn_id).client

    def probe(self) -> tuple[bool, Any]:
        """One synchronous probe: ``(done, value)``."""
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Probe every ``poke_interval`` seconds until done, failed or past the deadline."""
        while True:
            try:
                done, value = await asyncio.to_thread(self.probe)
            except Exception as exc:
                # Fail closed: the sensor re-raises; nothing is judged from a partial answer.
                yield TriggerEvent(  # type: ignore[no-untyped-call]
                    {"status": "error", "error": type(exc).__name__, "message": str(exc)}
                )
                return
            if done:
                yield TriggerEvent(  # type: ignore[no-untyped-call]
                    {"status": "success", "value": value}
                )
                return
            if self.deadline is not None and time.time() + self.poke_interval > self.deadline:
                yield TriggerEvent(  # type: ignore[no-untyped-call]
                    {"status": "timeout", "message": "the sensor's timeout passed", "value": value}
                )
                return
            await asyncio.sleep(self.poke_interval)


class AbandonedPublicationTrigger(LakeFSPollingTrigger):
    """Deferred half of :class:`~airflow_lakefence.sensors.AbandonedPublicationSensor`.

    :param repository: the repository.
    :param branch: the watched branch.
    :param condition: ``detect`` (fire on an abandoned publication) or ``settled`` (fire when HEAD
        may be read).
    :param publisher_dag_id: restrict to this publishing DAG.
    :param publisher_task_id: restrict to this publishing task.
    :param staging_branch_prefix: the publisher's staging branch prefix.
    :param ignore_repairs_underway: in ``detect``, do not fire for an abandoned HEAD that Airflow is
        already retrying.
    :param output_prefixes: a scoped publisher's write set (normalised): judge the latest publication
        touching it instead of HEAD.
    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param poke_interval: seconds between probes.
    :param deadline: epoch seconds after which the trigger gives up.
    """

    _fields = (
        "repository",
        "branch",
        "condition",
        "publisher_dag_id",
        "publisher_task_id",
        "staging_branch_prefix",
        "ignore_repairs_underway",
        "output_prefixes",
    )

    def __init__(
        self,
        *,
        repository: str,
        branch: str,
        condition: str,
        publisher_dag_id: str | None = None,
        publisher_task_id: str | None = None,
        staging_branch_prefix: str = "lakefence",
        ignore_repairs_underway: bool = False,
        output_prefixes: list[str] | None = None,
        lakefs_conn_id: str,
        poke_interval: float = 60.0,
        deadline: float | None = None,
    ) -> None:
        super().__init__(lakefs_conn_id=lakefs_conn_id, poke_interval=poke_interval, deadline=deadline)
        self.output_prefixes = list(output_prefixes) if output_prefixes else None
        if condition not in CONDITIONS:
            raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")
        self.repository = repository
        self.branch = branch
        self.condition = condition
        self.publisher_dag_id = publisher_dag_id
        self.publisher_task_id = publisher_task_id
        self.staging_branch_prefix = staging_branch_prefix
        self.ignore_repairs_underway = ignore_repairs_underway

    def probe(self) -> tuple[bool, Any]:
        """One judgement of the branch's HEAD."""
        scope = None
        if self.publisher_dag_id is not None:
            scope = PublisherScope(self.publisher_dag_id, self.publisher_task_id)
        judgement = probe_abandoned(
            self.client,
            TaskSdkView(),
            repository=self.repository,
            branch=self.branch,
            scope=scope,
            staging_prefix=self.staging_branch_prefix,
            output_prefixes=tuple(self.output_prefixes or ()),
        )
        self.log.info("%s@%s: %s (%s)", self.repository, self.branch, judgement.verdict.value, judgement.reason)
        return condition_met(self.condition, judgement, self.ignore_repairs_underway), judgement.to_dict()


class LakeFSCommitTrigger(LakeFSPollingTrigger):
    """Deferred half of :class:`~airflow_lakefence.sensors.LakeFSCommitSensor`.

    :param repository: the repository.
    :param branch: the watched branch.
    :param since_ref: the commit to compare with.
    :param prefix: only changes under this prefix count.
    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param poke_interval: seconds between probes.
    :param deadline: epoch seconds after which the trigger gives up.
    """

    _fields = ("repository", "branch", "since_ref", "prefix")

    def __init__(
        self,
        *,
        repository: str,
        branch: str,
        since_ref: str,
        prefix: str | None = None,
        lakefs_conn_id: str,
        poke_interval: float = 60.0,
        deadline: float | None = None,
    ) -> None:
        super().__init__(lakefs_conn_id=lakefs_conn_id, poke_interval=poke_interval, deadline=deadline)
        self.repository = repository
        self.branch = branch
        self.since_ref = since_ref
        self.prefix = prefix

    def probe(self) -> tuple[bool, Any]:
        """One look at the branch's HEAD."""
        head = probe_new_commit(
            self.client, repository=self.repository, branch=self.branch, since_ref=self.since_ref, prefix=self.prefix
        )
        return head is not None, head


class LakeFSFileTrigger(LakeFSPollingTrigger):
    """Deferred half of :class:`~airflow_lakefence.sensors.LakeFSFileSensor`.

    :param repository: the repository.
    :param ref: a branch, tag or commit.
    :param path: an object path (or ``prefix``).
    :param prefix: a path prefix (or ``path``).
    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param poke_interval: seconds between probes.
    :param deadline: epoch seconds after which the trigger gives up.
    """

    _fields = ("repository", "ref", "path", "prefix", "uncommitted")

    def __init__(
        self,
        *,
        repository: str,
        ref: str,
        path: str | None = None,
        prefix: str | None = None,
        lakefs_conn_id: str,
        poke_interval: float = 60.0,
        deadline: float | None = None,
        uncommitted: bool = False,
    ) -> None:
        super().__init__(lakefs_conn_id=lakefs_conn_id, poke_interval=poke_interval, deadline=deadline)
        if (path is None) == (prefix is None):
            raise ValueError("exactly one of path and prefix is required")
        self.repository = repository
        self.ref = ref
        self.path = path
        self.prefix = prefix
        self.uncommitted = uncommitted

    def probe(self) -> tuple[bool, Any]:
        """One look at the ref."""
        commit = probe_object(
            self.client,
            repository=self.repository,
            ref=self.ref,
            path=self.path,
            prefix=self.prefix,
            uncommitted=self.uncommitted,
        )
        return commit is not None, commit
