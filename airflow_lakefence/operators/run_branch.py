"""A branch per run, published once: ``LakeFSRunBranchOperator`` and ``LakeFSPublishRunOperator``.

The workflow the lakeFS documentation teaches (a branch for the run, the run's tasks write into it,
then it is merged into ``main``), with every step safe to retry (docs/howto/branch-per-run.md):

* :class:`LakeFSRunBranchOperator` makes the run branch once per run (and map index) from the run's
  input, resolved once and pinned; a retry or a clear finds its own branch, a branch of that name
  made from anything else fails closed.
* The run's tasks publish into it with the fenced operators (``target_branch`` = the run branch).
* :class:`LakeFSPublishRunOperator` publishes the run branch's head into the target with the fenced
  protocol (docs/protocol.md): the run branch's head plays the staged commit, the publishing step
  of the run owns the publication key, and every row of the publish fence's table applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.common.compat.sdk import BaseOperator, XComArg

from airflow_lakefence.core.names.locations import AttemptLocations
from airflow_lakefence.core.publication.run_branches import (
    DEFAULT_TEMPLATE,
    RECORD_KEY,
    RUN_BRANCH_METADATA_KEY,
    RUN_HEAD_METADATA_KEY,
    RunBranchRecord,
    first_foreign,
    judge_existing,
    run_branch_name,
)
from airflow_lakefence.core.records.metadata import (
    ROLE_STAGE,
    LakeFenceRecord,
    check_user_metadata,
    decode_metadata,
    encode_metadata,
    output_prefixes_metadata,
)
from airflow_lakefence.core.records.run_state import pin_input, pinned_input
from airflow_lakefence.core.request import normalise_prefixes
from airflow_lakefence.exceptions import (
    InputRefError,
    InvalidInputError,
    LakeFSConflictError,
    LakeFSNoChangesError,
    LakeFSNotFoundError,
    LakeFSUnavailableError,
    OutputPrefixError,
    RunBranchError,
)
from airflow_lakefence.hooks.lakefs import LakeFSHook, LakeFSHookMixin
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.lakefs_adapter.run_state_store import task_run_state
from airflow_lakefence.operators.fenced_base import FENCED_TEMPLATE_FIELDS, FencedPublishOperatorBase

#: How many times a creation whose answer was lost is settled (read, then tried again).
CREATE_ROUNDS = 3
#: The most commits of a found run branch read to tell whether this run wrote them all.
LOG_AMOUNT = 1000


class LakeFSRunBranchOperator(LakeFSHookMixin, BaseOperator):
    """Make the run's branch once, from the run's input; return its name.

    The name is ``run_branch`` rendered, made valid for lakeFS and suffixed with a hash of the run
    (dag id, run id, map index): unique to the run, the same for every try and clear of it. The
    input (``source_ref``, usually ``main``) is resolved once per run and pinned in the run state, so
    a retry makes (or finds) the branch at the same commit even when ``main`` moved meanwhile.

    Safe to retry: a branch of that name at the run's input is used as it is (a lost answer, a dead
    earlier try); one this run recorded making, whose history holds the input, is used with the run's
    writes in it (a clear); anything else raises :class:`~airflow_lakefence.exceptions.RunBranchError`
    and writes nothing.

    XCom: ``return_value`` (the run branch), ``input_commit`` (the pinned input: the publishing step's
    ``input_ref``), ``decision`` (``created`` or ``found``).

    :param repository: the lakeFS repository (templated).
    :param source_ref: the run's input: a branch, tag or commit id, resolved once per run (templated).
    :param run_branch: the name's template (templated), default ``run-{{ dag.dag_id }}-{{ run_id }}``.
    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param kwargs: :class:`BaseOperator` arguments.
    :raises RunBranchError: at run time, when a branch of the name is not this run's.
    :raises InputRefError: at run time, when ``source_ref`` does not exist.
    """

    template_fields: Sequence[str] = ("repository", "source_ref", "run_branch")
    ui_color = "#b2dfdb"

    def __init__(
        self,
        *,
        repository: str,
        source_ref: str = "main",
        run_branch: str = DEFAULT_TEMPLATE,
        lakefs_conn_id: str = LakeFSHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.repository = repository
        self.source_ref = source_ref
        self.run_branch = run_branch
        self.lakefs_conn_id = lakefs_conn_id

    @property
    def input_commit(self) -> XComArg:
        """The run's pinned input (XCom ``input_commit``): the publishing step's ``input_ref``."""
        return XComArg(self, key="input_commit")

    def execute(self, context: Any) -> str:
        """Make (or find) the run branch.

        :param context: the Airflow context.
        :return: the run branch's name.
        :raises RunBranchError: when a branch of that name is not this run's.
        """
        ti = context["ti"]
        name = run_branch_name(self.run_branch, ti.dag_id, ti.run_id, getattr(ti, "map_index", -1))
        input_commit, decision = make_branch_once(
            context, self.client, self.repository, name, self.source_ref, "source_ref", self.log
        )
        ti.xcom_push(key="input_commit", value=input_commit)
        ti.xcom_push(key="decision", value=decision)
        return name


def make_branch_once(
    context: Any, client: LakeFSClient, repository: str, name: str, source: str, source_name: str, log: Any
) -> tuple[str, str]:
    """Make branch ``name`` from ``source`` once per run: the source resolved once and pinned in the
    run state, the branch made (or found and judged), then recorded as this run's.

    :param context: the Airflow context (its run state).
    :param client: the lakeFS client.
    :param repository: the repository.
    :param name: the branch.
    :param source: the source ref (branch, tag or commit id).
    :param source_name: how messages name the source argument.
    :param log: where to log.
    :return: the pinned input commit and the decision (``created`` or ``found``).
    :raises InputRefError: when the source does not exist.
    :raises RunBranchError: when a branch of that name is not this run's.
    """
    ti = context["ti"]
    state = task_run_state(context, client, repository, source_branch=source)
    input_commit = pinned_input(state, source)
    if input_commit is None:
        try:
            input_commit = client.get_commit(repository, source).id
        except LakeFSNotFoundError as exc:
            raise InputRefError(f"{source_name} {source!r} not found in repository {repository!r}") from exc
        pin_input(state, source, input_commit)  # written before the branch: a retry uses it
    record = RunBranchRecord(name, input_commit, repository)
    recorded = RunBranchRecord.of(state.get(RECORD_KEY)) == record
    decision, why = create_or_find(client, repository, name, input_commit, recorded, (ti.dag_id, ti.run_id))
    if not recorded:
        state.create(RECORD_KEY, record.to_dict())
    log.info("Branch %s@%s (%s): %s", repository, name, decision, why)
    return input_commit, decision


def create_or_find(
    client: LakeFSClient, repository: str, name: str, input_commit: str, recorded: bool, run: tuple[str, str]
) -> tuple[str, str]:
    """Create branch ``name`` at ``input_commit``, or judge the one found; a lost answer is settled by
    reading the branch (the name is the run's: a branch there is this creation or judged as foreign).

    :param client: the lakeFS client.
    :param repository: the repository.
    :param name: the branch.
    :param input_commit: the commit to make it from.
    :param recorded: whether the run state records this run making it from ``input_commit``.
    :param run: ``(dag_id, run_id)``.
    :return: ``("created" | "found", why)``.
    :raises RunBranchError: when a branch found is not this run's.
    :raises LakeFSUnavailableError: when the creation could not be settled.
    """
    for _round in range(CREATE_ROUNDS):
        try:
            client.create_branch(repository, name, input_commit)
            return "created", f"made from {input_commit}"
        except LakeFSConflictError:
            pass  # exists: judged below
        except LakeFSUnavailableError:
            pass  # the answer was lost: the branch tells
        try:
            head = client.get_commit(repository, name).id
        except LakeFSNotFoundError:
            continue  # the creation did not land: try again
        foreign = None
        if head != input_commit and recorded:
            # Every commit above the input must be one this run wrote (one log call, on this path only).
            log = client.log_commits(repository, head, amount=LOG_AMOUNT)
            foreign = first_foreign([(c.id, c.metadata) for c in log], input_commit, *run)
        return "found", judge_existing(name, head, input_commit, recorded=recorded, foreign=foreign)
    raise LakeFSUnavailableError(
        f"could not settle the creation of branch {name!r} in {repository!r} in {CREATE_ROUNDS} rounds; "
        "nothing else was written. What to do: check that lakeFS is reachable, then clear the task.",
        operation="create_branch",
    )


class LakeFSPublishRunOperator(FencedPublishOperatorBase):
    """Publish a run branch into the target, once, with the fenced protocol (docs/protocol.md).

    The run's one publication: the run branch's head plays the staged commit *C*, this step's
    publication key (the run's dag id and run id, this task, its map index) owns it, and the publish
    fence's table decides on the target's HEAD exactly as for one fenced task: merge on the run's
    input; nothing when the run branch holds no change; replace (never stack) an abandoned
    publication of this step, or a successful one whose run was cleared and re-run; recognise a
    merge whose answer was lost as its own; fail closed, keeping the output as evidence, on anything
    else. ``fence_scope="prefixes"`` with the run's ``output_prefixes`` lets runs of disjoint
    partitions publish into one branch side by side; ``hard_fence`` works as for any fenced task.

    How: the attempt's staging branch is made from the run's input and the run branch's head is
    squash-merged into it as this attempt's staged commit (after checking that the head descends
    from the input and, with ``output_prefixes``, that every path the run changed lies under them);
    the engine then fences and publishes it. The target's history gets one staged commit per run
    publication; the run branch keeps the run's own commits.

    The run branch is kept after publishing unless ``delete_run_branch=True``: kept, a re-run of the
    whole run finds its branch, each task replaces its own earlier publication there and this step
    replaces the run's earlier publication on the target (docs/howto/branch-per-run.md).

    :param repository: the lakeFS repository (templated).
    :param run_branch: the run branch (templated): usually ``LakeFSRunBranchOperator(...).output``.
    :param target_branch: the branch to publish into (templated).
    :param input_ref: the run's pinned input commit (templated): the run branch operator's XCom
        ``input_commit``. The run branch must descend from it.
    :param delete_run_branch: delete the run branch once the publication is reported.
    :param kwargs: the fenced arguments of
        :class:`~airflow_lakefence.operators.fenced_base.FencedPublishOperatorBase` (``output_prefixes``,
        ``fence_scope``, ``input_prefixes``, ``hard_fence``, ``commit_message``...); ``write_mode`` and
        ``output_mode`` are fixed (the run's tasks wrote and replaced their outputs already).
    :raises InvalidInputError: at DAG parse time, for arguments that can never work.
    """

    template_fields: Sequence[str] = (*FENCED_TEMPLATE_FIELDS, "run_branch")
    ui_color = "#80cbc4"
    job_name = "run branch"

    def __init__(
        self,
        *,
        repository: str,
        run_branch: Any,
        target_branch: str,
        input_ref: Any,
        delete_run_branch: bool = False,
        **kwargs: Any,
    ) -> None:
        for fixed in ("write_mode", "output_mode", "read_only", "workspace_dir", "output_tables"):
            if fixed in kwargs:
                raise InvalidInputError(f"LakeFSPublishRunOperator publishes a run branch: {fixed} does not apply")
        super().__init__(
            repository=repository,
            target_branch=target_branch,
            input_ref=input_ref,
            write_mode="direct",
            output_mode="upsert",
            **kwargs,
        )
        self.run_branch = run_branch
        self.delete_run_branch = delete_run_branch

    def execute(self, context: Any) -> str:
        """Publish the run branch; return the output ref.

        :param context: the Airflow context.
        :raises LakeFenceError: a subclass naming the failure; nothing half-published.
        """
        if not isinstance(self.run_branch, str) or not self.run_branch:
            raise InvalidInputError(f"run_branch must name a branch, got {self.run_branch!r}")
        self.commit_metadata = {**(self.commit_metadata or {}), RUN_BRANCH_METADATA_KEY: self.run_branch}
        output_ref = super().execute(context)
        if self.delete_run_branch:
            deleted = self.lakefs.delete_branch(self.repository, self.run_branch, missing_ok=True)
            self.log.info("Run branch %s %s", self.run_branch, "deleted" if deleted else "was already gone")
        return output_ref

    def run_job(self, context: Any, locations: AttemptLocations) -> None:
        """Point the staging branch at the run branch's head: what the run wrote becomes what is staged.

        :param context: the Airflow context.
        :param locations: the attempt's locations (the staging branch is made from the run's input).
        :raises InputRefError: when the run branch does not descend from the input.
        :raises OutputPrefixError: when the run changed a path outside ``output_prefixes`` (kept as evidence).
        """
        client, repo, staging = self.lakefs, locations.repository, locations.staging_branch
        assert staging is not None
        input_commit = locations.input_commit
        try:
            head = client.get_commit(repo, self.run_branch).id
        except LakeFSNotFoundError as exc:
            raise RunBranchError(
                f"run branch {self.run_branch!r} not found in {repo!r}: nothing to publish. What to do: clear the "
                "run branch step and the run's tasks (the run branch is made again from the run's input)."
            ) from exc
        if head == input_commit:
            self.log.info("Run branch %s holds no change since the input %s", self.run_branch, input_commit)
            return
        if client.merge_base(repo, input_commit, self.run_branch) != input_commit:
            raise InputRefError(
                f"run branch {self.run_branch!r} (HEAD {head}) does not descend from the input {input_commit}: it was "
                "not made from this run's input, so nothing was published. What to do: pass the run branch step's "
                "XCom input_commit as input_ref."
            )
        self._squash_into_staging(client, repo, head, staging, input_commit)
        self._check_run_prefixes(client, repo, input_commit, head, staging)

    def _squash_into_staging(self, client: LakeFSClient, repo: str, head: str, staging: str, input_commit: str) -> None:
        """Squash-merge the run branch's HEAD into the staging branch (at the input) as this attempt's
        staged commit: one commit on the input, carrying this attempt's ``stage`` record, holding every
        change of the run. The engine's staging step finds it by that record (lakeFS answers "no
        changes" to its commit), and every fence judges it as this publication key's own change (the
        scoped fence too: the run's tasks' commits stay on the run branch)."""
        assert self._fence is not None
        record = LakeFenceRecord(self._fence.attempt, ROLE_STAGE, input_commit)
        scope = self._scope()
        metadata = {
            **check_user_metadata(self.commit_metadata),
            **encode_metadata(record),
            **output_prefixes_metadata(scope.output_prefixes if scope is not None else ()),
            RUN_HEAD_METADATA_KEY: head,
        }
        message = self.commit_message or f"lakefence: stage run branch {self.run_branch}"
        for _round in range(CREATE_ROUNDS):
            try:
                client.merge(repo, head, staging, message, metadata, squash=True)
                break
            except LakeFSNoChangesError:
                self.log.info(
                    "Run branch %s's HEAD %s holds the input's tree: nothing to publish", self.run_branch, head
                )
                return
            except LakeFSUnavailableError as exc:
                if decode_metadata(client.get_commit(repo, staging).metadata) == record:
                    break  # the merge landed; its answer was lost
                self.log.warning("Squashing the run branch: the answer was lost (%s) and it did not land: again", exc)
        else:
            raise LakeFSUnavailableError(
                f"could not squash run branch {self.run_branch!r} into {staging!r} in {CREATE_ROUNDS} rounds; "
                "nothing published. What to do: check that lakeFS is reachable, then clear the task.",
                operation="merge",
            )
        self.log.info("Staging branch %s holds run branch %s's HEAD %s, squashed", staging, self.run_branch, head)

    def _check_run_prefixes(self, client: LakeFSClient, repo: str, input_commit: str, head: str, staging: str) -> None:
        """Every path the run changed since its input lies under ``output_prefixes`` (one diff listing)."""
        prefixes = normalise_prefixes(self.output_prefixes)
        if not prefixes:
            return
        outside = [
            c.path for c in client.diff_refs(repo, input_commit, head, limit=10**9) if not c.path.startswith(prefixes)
        ]
        if outside:
            raise OutputPrefixError(
                f"the run wrote outside output_prefixes {list(prefixes)}: {outside[:10]}; nothing published, the "
                f"run's output is kept in staging branch {staging!r} (and in run branch {self.run_branch!r}). What "
                "to do: fix the run's output paths or declare the prefix, then clear this task.",
                staging_branch=staging,
            )
