"""airflow-provider-lakefs's operators, with the same names and parameters, safe to retry.

A DAG written for ``airflow-provider-lakefs`` 0.48 (``lakefs_provider.operators.*``) moves here by a
change of imports (docs/migration-from-airflow-provider-lakefs.md). Every call goes through the
package's lakeFS client (errors translated there), and each operator succeeds on a retry after a
success, without writing twice:

* ``LakeFSCreateBranchOperator``: the source resolved once per run; a branch of that name at it is
  found, not refused;
* ``LakeFSCommitOperator`` / ``LakeFSMergeOperator``: their commits carry the provider's metadata
  naming the DAG, run and task (and the map index and try): a commit whose answer was lost, or an
  earlier try's, is recognised on the branch's HEAD and returned; "no changes" returns the HEAD;
* ``LakeFSUploadOperator``: an object already holding the same bytes is not uploaded again;
* ``LakeFSDeleteBranchOperator``: a missing branch is deleted already;
* ``LakeFSGetCommitOperator``, ``LakeFSGetObjectOperator``: reads; ``LakeFSCreateSymlinkOperator``:
  rewrites the same files.

The sensors keep their home, :mod:`airflow_lakefence.sensors` (``LakeFSCommitSensor``,
``LakeFSFileSensor``), which also take the provider's parameters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import BaseOperator

from airflow_lakefence.core.publication.run_branches import provider_metadata, written_by_task
from airflow_lakefence.exceptions import (
    LakeFSNoChangesError,
    LakeFSNotFoundError,
    LakeFSUnavailableError,
)
from airflow_lakefence.hooks.lakefs import LakeFSHook, LakeFSHookMixin
from airflow_lakefence.operators.run_branch import make_branch_once

__all__ = [
    "LakeFSCommitOperator",
    "LakeFSCreateBranchOperator",
    "LakeFSCreateSymlinkOperator",
    "LakeFSDeleteBranchOperator",
    "LakeFSGetCommitOperator",
    "LakeFSGetObjectOperator",
    "LakeFSMergeOperator",
    "LakeFSUploadOperator",
]

#: How many times a commit or merge whose answer was lost is settled (read the HEAD, then try again).
WRITE_ROUNDS = 3


class _LakeFSOperator(LakeFSHookMixin, BaseOperator):
    """What the provider-compatible operators share: the connection and the client."""

    ui_color = "#f4a460"

    def __init__(self, *, lakefs_conn_id: str = LakeFSHook.default_conn_name, repo: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lakefs_conn_id = lakefs_conn_id
        self.repo = repo



class _RecordedWriteOperator(_LakeFSOperator):
    """A commit or a merge, settled by its metadata: this task instance's writes carry its name."""

    def _metadata(self, context: Any, metadata: Mapping[str, str] | None) -> dict[str, str]:
        ti = context["ti"]
        return {
            **dict(metadata or {}),
            **provider_metadata(ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1), ti.try_number),
        }

    def _ours(self, context: Any, head_metadata: Mapping[str, str]) -> bool:
        ti = context["ti"]
        return written_by_task(head_metadata, ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1))

    def _settle(self, context: Any, branch: str, write: Any, what: str) -> str:
        """Write; on "no changes" or a lost answer read ``branch``'s HEAD: this task's own commit is the
        outcome, "no changes" returns the HEAD, a write that did not land is tried again."""
        ti = context["ti"]
        for _round in range(WRITE_ROUNDS):
            try:
                return str(write())
            except LakeFSNoChangesError:
                head = self.client.get_commit(self.repo, branch)
                own = self._ours(context, head.metadata)
                decision = "found" if own else "no_changes"
                self.log.info(
                    "%s: lakeFS answered 'no changes'; %s %s",
                    what,
                    "this task's earlier commit is HEAD" if own else "nothing to do, HEAD is",
                    head.id,
                )
                ti.xcom_push(key="decision", value=decision)
                return head.id
            except LakeFSUnavailableError as exc:
                head = self.client.get_commit(self.repo, branch)
                if self._ours(context, head.metadata):
                    self.log.info("%s: the answer was lost (%s) but the write landed: %s", what, exc, head.id)
                    ti.xcom_push(key="decision", value="found")
                    return head.id
                self.log.warning("%s: the answer was lost (%s) and the write did not land: again", what, exc)
        raise LakeFSUnavailableError(
            f"{what}: could not settle the write in {WRITE_ROUNDS} rounds. What to do: check that lakeFS is "
            "reachable, then clear the task.",
            operation=what,
        )


class LakeFSCreateBranchOperator(_LakeFSOperator):
    """Create a lakeFS branch from ``source_branch``; return the commit it points at.

    Safe to retry: ``source_branch`` is resolved once per run (pinned in the run state before the
    branch is made), and a branch of that name at the pinned commit is this run's (a lost answer, a
    dead earlier try); one holding only this run's commits above it is too, when the run state
    records making it (a clear after the run wrote into it). Anything else raises
    :class:`~airflow_lakefence.exceptions.RunBranchError`, nothing written. For a branch per DAG run
    with a name unique to the run, use
    :class:`~airflow_lakefence.operators.run_branch.LakeFSRunBranchOperator`.

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param repo: the repository (templated).
    :param branch: the branch to create (templated).
    :param source_branch: the ref to create it from (templated).
    :param kwargs: :class:`BaseOperator` arguments.
    :raises RunBranchError: at run time, when a branch of that name is not this run's.
    """

    template_fields: Sequence[str] = ("repo", "branch", "source_branch")

    def __init__(self, *, repo: str, branch: str, source_branch: str = "main", **kwargs: Any) -> None:
        super().__init__(repo=repo, **kwargs)
        self.branch = branch
        self.source_branch = source_branch

    def execute(self, context: Any) -> str:
        """Create (or find) the branch.

        :param context: the Airflow context.
        :return: the commit the branch was made from.
        """
        commit, decision = make_branch_once(
            context, self.client, self.repo, self.branch, self.source_branch, "source_branch", self.log
        )
        context["ti"].xcom_push(key="decision", value=decision)
        return commit


class LakeFSCommitOperator(_RecordedWriteOperator):
    """Commit a branch's uncommitted changes; return the commit id.

    The commit's metadata gains airflow-provider-lakefs's keys naming the DAG, the run and the task
    (``::lakefs::Airflow::dag_id``, ``::lakefs::Airflow::dag_run_id``, ``airflow_task_id``) and the map
    index and try number. Safe to retry: a commit whose answer was lost, or an earlier try's, is this
    task's commit on the branch's HEAD and is returned (XCom ``decision`` ``found``); lakeFS answering
    "no changes" otherwise returns the branch's HEAD (``decision`` ``no_changes``: everything written
    is committed already).

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param repo: the repository (templated).
    :param branch: the branch to commit (templated).
    :param msg: the commit message (templated).
    :param metadata: extra commit metadata (templated).
    :param kwargs: :class:`BaseOperator` arguments.
    """

    template_fields: Sequence[str] = ("repo", "branch", "msg", "metadata")

    def __init__(
        self, *, repo: str, branch: str, msg: str, metadata: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(repo=repo, **kwargs)
        self.branch = branch
        self.msg = msg
        self.metadata = metadata

    def execute(self, context: Any) -> str:
        """Commit.

        :param context: the Airflow context.
        :return: the commit id.
        """
        metadata = self._metadata(context, self.metadata)

        def commit() -> str:
            made = self.client.commit(self.repo, self.branch, self.msg, metadata)
            if made is None:
                raise LakeFSNoChangesError("commit: no changes", operation="commit")
            context["ti"].xcom_push(key="decision", value="committed")
            return made.id

        return self._settle(context, self.branch, commit, f"commit of {self.repo}@{self.branch}")


class LakeFSMergeOperator(_RecordedWriteOperator):
    """Merge ``source_ref`` into ``destination_branch``; return the merge commit id.

    **Not fenced.** The merge is retry-safe for its own answer: the merge commit carries the
    provider's metadata naming the DAG, run and task, so a merge whose answer was lost (or an earlier
    try's) is recognised on the destination's HEAD and returned (XCom ``decision`` ``found``), and
    "no changes" (the source is in the destination already) returns the destination's HEAD. But
    nothing checks what the destination holds: a run cleared after its merge merges whatever its
    source holds then on top of whatever the destination became, and two runs merging into one branch
    are not fenced against each other. To publish a run's branch once, fenced, use
    :class:`~airflow_lakefence.operators.run_branch.LakeFSPublishRunOperator`
    (docs/howto/branch-per-run.md).

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param repo: the repository (templated).
    :param source_ref: the ref to merge (templated).
    :param destination_branch: the branch to merge into (templated).
    :param msg: the merge commit message (templated).
    :param metadata: extra merge commit metadata (templated).
    :param kwargs: :class:`BaseOperator` arguments.
    """

    template_fields: Sequence[str] = ("repo", "source_ref", "destination_branch", "msg", "metadata")

    def __init__(
        self,
        *,
        repo: str,
        source_ref: str,
        destination_branch: str,
        msg: str,
        metadata: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(repo=repo, **kwargs)
        self.source_ref = source_ref
        self.destination_branch = destination_branch
        self.msg = msg
        self.metadata = metadata

    def execute(self, context: Any) -> str:
        """Merge.

        :param context: the Airflow context.
        :return: the merge commit id.
        """
        metadata = self._metadata(context, self.metadata)

        def merge() -> str:
            ref = self.client.merge(self.repo, self.source_ref, self.destination_branch, self.msg, metadata)
            context["ti"].xcom_push(key="decision", value="merged")
            return ref

        what = f"merge of {self.source_ref!r} into {self.repo}@{self.destination_branch}"
        return self._settle(context, self.destination_branch, merge, what)


class LakeFSUploadOperator(_LakeFSOperator):
    """Upload a small object; return its checksum.

    Safe to retry: an object at ``path`` holding the same bytes already (its checksum is their MD5) is
    not uploaded again.

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param repo: the repository (templated).
    :param branch: the branch (templated).
    :param path: the object path (templated).
    :param content: the object's bytes (a ``str`` is encoded as UTF-8).
    :param kwargs: :class:`BaseOperator` arguments.
    """

    template_fields: Sequence[str] = ("repo", "branch", "path")

    def __init__(self, *, repo: str, branch: str, path: str, content: bytes | str, **kwargs: Any) -> None:
        super().__init__(repo=repo, **kwargs)
        self.branch = branch
        self.path = path
        self.content = content

    def execute(self, context: Any) -> str:
        """Upload unless the object already holds the content.

        :param context: the Airflow context.
        :return: the object's checksum.
        """
        data = self.content.encode() if isinstance(self.content, str) else bytes(self.content)
        checksum = hashlib.md5(data, usedforsecurity=False).hexdigest()
        try:
            if self.client.stat_object(self.repo, self.branch, self.path).checksum == checksum:
                self.log.info("%s@%s:%s already holds this content: not uploaded", self.repo, self.branch, self.path)
                return checksum
        except LakeFSNotFoundError:
            pass
        self.client.upload_bytes(self.repo, self.branch, self.path, data)
        return checksum


class LakeFSGetCommitOperator(_LakeFSOperator):
    """Return the commit ``ref`` points at, as lakeFS describes it (a dict; XCom ``return_value``).

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param repo: the repository (templated).
    :param ref: a branch, tag, commit id or ref expression (templated).
    :param kwargs: :class:`BaseOperator` arguments.
    """

    template_fields: Sequence[str] = ("repo", "ref")

    def __init__(self, *, repo: str, ref: str, **kwargs: Any) -> None:
        super().__init__(repo=repo, **kwargs)
        self.ref = ref

    def execute(self, context: Any) -> dict[str, Any]:
        """Read the commit.

        :param context: the Airflow context.
        """
        return self.client.commit_details(self.repo, self.ref)


class LakeFSGetObjectOperator(_LakeFSOperator):
    """Return a small object's text (UTF-8; read whole into memory).

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param repo: the repository (templated).
    :param ref: the ref to read at (templated).
    :param path: the object path (templated).
    :param kwargs: :class:`BaseOperator` arguments.
    """

    template_fields: Sequence[str] = ("repo", "ref", "path")

    def __init__(self, *, repo: str, ref: str, path: str, **kwargs: Any) -> None:
        super().__init__(repo=repo, **kwargs)
        self.ref = ref
        self.path = path

    def execute(self, context: Any) -> str:
        """Read the object.

        :param context: the Airflow context.
        """
        return self.client.read_object(self.repo, self.ref, self.path).decode("utf-8")


class LakeFSDeleteBranchOperator(_LakeFSOperator):
    """Delete a branch; a branch already gone is success (returns whether this try deleted it).

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param repo: the repository (templated).
    :param branch: the branch (templated).
    :param kwargs: :class:`BaseOperator` arguments.
    """

    template_fields: Sequence[str] = ("repo", "branch")

    def __init__(self, *, repo: str, branch: str, **kwargs: Any) -> None:
        super().__init__(repo=repo, **kwargs)
        self.branch = branch

    def execute(self, context: Any) -> bool:
        """Delete the branch.

        :param context: the Airflow context.
        """
        deleted = self.client.delete_branch(self.repo, self.branch, missing_ok=True)
        self.log.info("Branch %s@%s %s", self.repo, self.branch, "deleted" if deleted else "was already gone")
        return deleted


class LakeFSCreateSymlinkOperator(_LakeFSOperator):
    """Write a branch's symlink files (lakeFS's ``createSymlinkFile``); return their location.

    Safe to retry: it rewrites the same files.

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param repo: the repository (templated).
    :param branch: the branch (templated).
    :param location: where to write them (templated); lakeFS's default when ``None``.
    :param kwargs: :class:`BaseOperator` arguments.
    """

    template_fields: Sequence[str] = ("repo", "branch", "location")

    def __init__(self, *, repo: str, branch: str, location: str | None = None, **kwargs: Any) -> None:
        super().__init__(repo=repo, **kwargs)
        self.branch = branch
        self.location = location

    def execute(self, context: Any) -> str:
        """Write the symlink files.

        :param context: the Airflow context.
        """
        return self.client.create_symlink_file(self.repo, self.branch, self.location or None)
