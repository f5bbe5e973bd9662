"""What one attempt is asked to do, and step 1 of the protocol: check it before any write.

:class:`PublishRequest` holds the adapter's rendered arguments; :meth:`PublishRequest.validated`
checks every value that needs no lakeFS call. :func:`read_target_head` and :func:`check_input`
finish step 1 against lakeFS: the target exists, and the input is a commit the target is built on
(the target's HEAD, or an ancestor of it), so an input the protocol cannot build on is refused as
:class:`~airflow_lakefence.exceptions.InputRefError` before the staging branch exists.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from os import PathLike
from pathlib import Path

from airflow_lakefence.core.fences.publish import Action, HeadState, decide_publish
from airflow_lakefence.core.fences.scope import Scope, ScopeMode, parse_scope, rendered_at_run_time
from airflow_lakefence.core.names.keys import AttemptId
from airflow_lakefence.core.names.staging_names import is_valid_branch_name, validate_staging_prefix
from airflow_lakefence.core.ports import LakeFSPort
from airflow_lakefence.core.records.metadata import check_user_metadata
from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput, check_output_mode, normalise_table_roots
from airflow_lakefence.exceptions import InputRefError, InvalidInputError, LakeFSNotFoundError, PublishBudgetError

WRITE_MODES = ("direct", "workspace")
#: ``replace``: after publishing, each declared output prefix holds exactly this attempt's output;
#: ``upsert``: the attempt's files are added to (or overwrite) what the input held there.
OUTPUT_MODES = ("replace", "upsert")
#: ``hard_fence`` modes: never rely on it, rely on it when the input carries it, or refuse to run without it.
HARD_FENCE_MODES = ("off", "auto", "require")

_REPOSITORY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
_REF_RE = re.compile(r"^[^\s\x00-\x1f]{1,1024}$")
_COMMIT_ID_RE = re.compile(r"^[0-9a-f]{64}$")
_PIN_DOC = "docs/output-correctness.md#the-input-pin"


def seconds(value: timedelta | float | None, name: str) -> float | None:
    """A duration in seconds.

    :param value: a ``timedelta``, a number of seconds or ``None``.
    :param name: the argument's name, for the message.
    :raises InvalidInputError: if it is negative.
    """
    if value is None:
        return None
    result = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if result < 0:
        raise InvalidInputError(f"{name} must not be negative, got {result}")
    return result


def normalise_prefixes(prefixes: Sequence[str] | None) -> tuple[str, ...]:
    """Output prefixes as ``("a/b/", ...)``.

    :param prefixes: the declared prefixes, ``None`` for none.
    :raises InvalidInputError: for a string instead of a list, or an empty prefix.
    """
    if prefixes is None:
        return ()
    if isinstance(prefixes, str):
        raise InvalidInputError("output_prefixes must be a list of path prefixes, not a string")
    result = []
    for prefix in prefixes:
        if not isinstance(prefix, str) or not prefix.strip("/"):
            raise InvalidInputError(f"output_prefixes entry {prefix!r} must be a non-empty path")
        result.append(prefix.strip("/") + "/")
    return tuple(result)


@dataclass(frozen=True)
class PublishOptions:
    """The expert knobs of a fenced publication, grouped out of the operator's signature.

    The defaults fit most DAGs; pass ``options=PublishOptions(...)`` to the operator or decorator.
    One object may serve many tasks: the operator never changes it (``workspace_dir`` is rendered
    into the task's own copy).

    :param hard_fence: ``off``, ``auto`` or ``require``: rely on the hard fence (a lakeFS pre-merge
        hook installed with ``python -m airflow_lakefence.hardfence install``) when the input commit
        carries it, and with ``require`` fail before the job when it does not (docs/hard-fence.md).
    :param publish_budget: refuse to start publishing when less of ``execution_timeout`` remains
        (a ``timedelta`` or seconds; smaller than ``execution_timeout``).
    :param replace_by_merge: replace an abandoned publication by merges instead of a hard reset
        (always done on a protected target).
    :param workspace_dir: the parent of the per-attempt workspace (templated); a temporary directory
        when ``None``.
    :param workspace_check: a callable given the workspace ``Path`` after the job; raising rejects
        the output (workspace mode).
    :param allow_empty_workspace: accept a job that wrote no file (then nothing is published).
    :param staging_branch_prefix: the first part of staging branch names.
    :param stale_grace_period: seconds to wait for the supervisor's kill when the attempt is stale.
    """

    hard_fence: str = "off"
    publish_budget: timedelta | float | None = None
    replace_by_merge: bool = False
    workspace_dir: str | None = None
    workspace_check: Callable[[Path], None] | None = None
    allow_empty_workspace: bool = False
    staging_branch_prefix: str = "lakefence"
    stale_grace_period: float = 15.0


@dataclass(frozen=True)
class PublishRequest:
    """What one attempt is asked to do (the adapter's rendered arguments).

    :param repository: the lakeFS repository.
    :param target_branch: the branch to publish into.
    :param input_ref: the commit (or branch, tag) the job reads and builds on.
    :param write_mode: ``workspace`` (a local directory the engine uploads) or ``direct`` (the job
        writes into the staging branch itself).
    :param read_only: run the job against the input and write nothing.
    :param output_prefixes: if non-empty, every changed path must lie under one of them.
    :param output_mode: ``replace`` (default): objects under the declared prefixes that the job did not
        write are deleted in the staging branch, so each prefix holds exactly this attempt's output;
        ``upsert``: they are kept.
    :param commit_message: the staging and merge commit message; a default names the attempt.
    :param commit_metadata: extra commit metadata (``lakefence.*`` keys are reserved).
    :param staging_prefix: the first part of staging branch names.
    :param workspace_dir: the parent of the per-attempt workspace; a temporary directory if ``None``.
    :param workspace_check: called with the workspace after the job; raising rejects the output.
    :param allow_empty_workspace: accept a job that wrote no file.
    :param publish_budget: seconds the publish needs; refused when less remains before ``deadline``.
    :param deadline: the ``time.monotonic()`` at which the task will be killed, if any.
    :param hard_fence: ``off`` (the soft fence only), ``auto`` (rely on the hard fence when the input
        commit carries it: one extra read before the job) or ``require`` (fail before the job when it
        does not); docs/hard-fence.md.
    :param replace_by_merge: replace or relocate an abandoned publication by merges instead of a hard
        reset (done anyway when the target is protected).
    :param fence_scope: ``branch`` (the default: the publish fence covers the whole target branch) or
        ``prefixes`` (it covers the declared write and read sets only; docs/howto/many-writers.md).
    :param input_prefixes: the read set of the scoped fence: the prefixes the job reads from the input.
    :param scope: the parsed scope (set by :meth:`validated` in the ``prefixes`` mode, else ``None``).
    :param output_tables: Delta tables the job writes (``DeltaTableOutput`` or root paths; direct mode
        only): their staged change must be Delta commits on from the input's (docs/delta.md).
    :param execution_timeout: the task's timeout in seconds (``publish_budget`` must be smaller).
    :param stale_grace_period: seconds the adapter waits for the supervisor's kill of a stale attempt.
    """

    repository: str
    target_branch: str
    input_ref: str
    write_mode: str = "workspace"
    read_only: bool = False
    output_prefixes: Sequence[str] | None = None
    output_mode: str = "replace"
    commit_message: str | None = None
    commit_metadata: Mapping[str, str] | None = None
    staging_prefix: str = "lakefence"
    workspace_dir: str | None = None
    workspace_check: Callable[[Path], None] | None = None
    allow_empty_workspace: bool = False
    publish_budget: float | None = None
    deadline: float | None = None
    hard_fence: str = "off"
    replace_by_merge: bool = False
    fence_scope: str = "branch"
    input_prefixes: Sequence[str] | None = None
    scope: Scope | None = None
    output_tables: Sequence[DeltaTableOutput | str] | None = None
    execution_timeout: float | None = None
    stale_grace_period: float = 15.0

    def validated(self, *, parse_time: bool = False) -> PublishRequest:
        """Step 1: check every value before any write; return the request with normalised values.

        The one validator of a publication's arguments: the operator calls it when the DAG file is
        parsed (``parse_time=True``: values rendered only when the task runs, Jinja strings or
        XComArgs, are skipped, with every check that reads them) and the engine again in every try,
        on the rendered values; the same bad value raises the same error at either moment.

        :param parse_time: skip the values :func:`~airflow_lakefence.core.fences.scope.rendered_at_run_time`
            calls templated (and return the request as given).
        :raises InvalidInputError: (:class:`InputRefError` for ``input_ref``, :class:`PublishBudgetError`
            for a budget that does not fit in the timeout) naming the bad value and what to pass.
        """
        fields = dataclasses.fields(self)
        later = {f.name for f in fields if parse_time and rendered_at_run_time(getattr(self, f.name))}

        def known(*names: str) -> bool:
            return not later.intersection(names)

        if known("repository") and (
            not isinstance(self.repository, str) or not _REPOSITORY_RE.fullmatch(self.repository)
        ):
            raise InvalidInputError(
                f"repository {self.repository!r} is not a valid lakeFS repository name (3 to 63 characters: "
                "lowercase letters, digits, '-')"
            )
        if known("target_branch") and (
            not isinstance(self.target_branch, str) or not is_valid_branch_name(self.target_branch)
        ):
            raise InvalidInputError(f"target_branch {self.target_branch!r} is not a valid lakeFS branch name")
        if known("input_ref") and (not isinstance(self.input_ref, str) or not _REF_RE.fullmatch(self.input_ref)):
            raise InputRefError(f"input_ref {self.input_ref!r} is not a ref (a commit id, branch or tag)")
        for name, allowed in (
            ("write_mode", WRITE_MODES),
            ("output_mode", OUTPUT_MODES),
            ("hard_fence", HARD_FENCE_MODES),
            ("fence_scope", tuple(ScopeMode)),
        ):
            value = getattr(self, name)
            if known(name) and value not in allowed:
                choices = " or ".join(", ".join(repr(str(a)) for a in allowed).rsplit(", ", 1))
                raise InvalidInputError(f"{name} must be {choices}, got {value!r}")
        for name in ("read_only", "allow_empty_workspace", "replace_by_merge"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInputError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if known("commit_message") and self.commit_message is not None and not isinstance(self.commit_message, str):
            raise InvalidInputError(f"commit_message must be a string, got {type(self.commit_message).__name__}")
        if self.workspace_dir is not None and known("workspace_dir") and (
            not isinstance(self.workspace_dir, (str, PathLike)) or not str(self.workspace_dir).strip()
        ):
            raise InvalidInputError(f"workspace_dir must be a directory path, got {self.workspace_dir!r}")
        if self.workspace_check is not None and not callable(self.workspace_check):
            raise InvalidInputError(f"workspace_check must be a callable, got {self.workspace_check!r}")
        budget = seconds(self.publish_budget, "publish_budget")
        timeout = seconds(self.execution_timeout, "execution_timeout")
        seconds(self.stale_grace_period, "stale_grace_period")
        if budget is not None and timeout is not None and budget >= timeout:
            raise PublishBudgetError(
                f"publish_budget {budget}s does not fit in execution_timeout {timeout}s: give the job the rest"
            )
        metadata = self.commit_metadata
        try:
            if known("commit_metadata"):
                metadata = check_user_metadata(self.commit_metadata)
            validate_staging_prefix(self.staging_prefix)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        if self.read_only:
            _check_read_only(self)
        tables = normalise_table_roots(self.output_tables) if known("output_tables") else None
        if tables and known("write_mode") and self.write_mode != "direct":
            raise InvalidInputError(
                f"output_tables {[t.root for t in tables]} need write_mode='direct': Delta appends to a table's log "
                "where it lies (on the staging branch), and a workspace upload would start a new table at version 0"
            )
        if tables is None or not known("output_prefixes", "input_prefixes", "fence_scope"):
            if known("output_prefixes", "fence_scope") and self.fence_scope == ScopeMode.BRANCH:
                normalise_prefixes(self.output_prefixes)
            return self
        write_set, table_only = _scope_write_set(self.output_prefixes, tables)
        scope = parse_scope(write_set, self.input_prefixes, self.fence_scope)
        if scope is not None:
            # The scoped fence covers the table roots too; file-level output rules never apply to them.
            prefixes = tuple(p for p in scope.output_prefixes if p not in table_only)
        else:
            prefixes = normalise_prefixes(self.output_prefixes)
        if known("output_mode"):
            check_output_mode(self.output_mode, self.output_prefixes, tables)
        if parse_time:
            return self
        return dataclasses.replace(
            self,
            output_prefixes=prefixes,
            commit_metadata=metadata,
            scope=scope,
            output_tables=tables,
            publish_budget=budget,
        )

    @property
    def prefixes(self) -> tuple[str, ...]:
        """The declared output prefixes (normalised by :meth:`validated`)."""
        return tuple(self.output_prefixes or ())

    @property
    def tables(self) -> tuple[DeltaTableOutput, ...]:
        """The declared Delta tables (normalised by :meth:`validated`)."""
        return tuple(t for t in self.output_tables or () if isinstance(t, DeltaTableOutput))

    def message(self, role: str, attempt: AttemptId) -> str:
        """The staging or publishing commit's message: the user's, or one naming the attempt.

        :param role: ``stage`` or ``publish``.
        :param attempt: this attempt.
        """
        return self.commit_message or f"lakefence: {role} {attempt.key.task_id} try {attempt.try_number}"


def _check_read_only(request: PublishRequest) -> None:
    """A read-only attempt writes nothing: every argument about writing is a mistake.

    :raises InvalidInputError: naming the arguments that do not apply.
    """
    given = [
        name
        for name, value in (
            ("output_prefixes", request.output_prefixes),
            ("output_tables", request.output_tables),
            ("commit_message", request.commit_message),
            ("commit_metadata", request.commit_metadata),
            ("publish_budget", request.publish_budget),
            ("input_prefixes", request.input_prefixes),
        )
        if value
    ]
    if request.fence_scope != ScopeMode.BRANCH:
        given.append("fence_scope")
    if given:
        verb = "does" if len(given) == 1 else "do"
        raise InvalidInputError(f"read_only=True writes nothing: {', '.join(given)} {verb} not apply")


def _scope_write_set(
    output_prefixes: Sequence[str] | None, tables: Sequence[DeltaTableOutput]
) -> tuple[Sequence[str] | None, tuple[str, ...]]:
    """The scoped fence's write set: the declared prefixes and every table root not already under one.

    A Delta table root is part of what a publication writes: two writers of one table must see each
    other's new version in the scoped fence, and two writers of different tables must not.

    :param output_prefixes: the declared prefixes (as given: :func:`parse_scope` validates them).
    :param tables: the normalised table roots.
    :return: the write set to validate, and the table prefixes it added.
    """
    if not tables or isinstance(output_prefixes, str):
        return output_prefixes, ()
    declared = [p.strip().strip("/") + "/" for p in output_prefixes or () if isinstance(p, str)]
    added = tuple(t.prefix for t in tables if not any(t.prefix.startswith(d) for d in declared))
    return [*(output_prefixes or ()), *added], added


def read_target_head(lakefs: LakeFSPort, request: PublishRequest) -> HeadState:
    """Step 1: the target's HEAD (proves that the repository and the target exist).

    :param lakefs: the lakeFS port.
    :param request: the validated request.
    :raises InvalidInputError: if the repository or the target branch does not exist.
    """
    try:
        return HeadState.of(lakefs.get_commit(request.repository, request.target_branch))
    except LakeFSNotFoundError as exc:
        raise InvalidInputError(
            f"target branch {request.target_branch!r} or repository {request.repository!r} not found"
        ) from exc


def resolve_input(lakefs: LakeFSPort, request: PublishRequest) -> str:
    """The commit id ``input_ref`` names (one lakeFS call).

    :param lakefs: the lakeFS port.
    :param request: the validated request.
    :raises InputRefError: if it names nothing in the repository.
    """
    try:
        return lakefs.get_commit(request.repository, request.input_ref).id
    except LakeFSNotFoundError as exc:
        raise InputRefError(
            f"input_ref {request.input_ref!r} not found in repository {request.repository!r}"
        ) from exc


def check_input(
    lakefs: LakeFSPort, request: PublishRequest, head: HeadState, attempt: AttemptId, pinned: str | None
) -> str:
    """Step 1: the input commit, proven to be one the target is built on, before any write.

    No lakeFS call in the usual cases: the input is the pinned commit of an earlier try, the
    target's HEAD (by id or by the target's own name), HEAD's first parent or the input of a
    replacement chain, all of which the publish fence's table recognises from HEAD and its record.
    Only when the table would refuse does it ask lakeFS for the merge base of the input and the
    target (one call; one more first to resolve an ``input_ref`` that is not a commit id): an input
    that is not an ancestor of the target's HEAD (another branch's commit, say) can never be
    published there. An ancestor further down is returned: the target moved since the input was
    pinned, which the caller refuses as the publish fence does (in the branch-wide mode; the scoped
    mode builds on it when nothing inside the scope changed since).

    :param lakefs: the lakeFS port.
    :param request: the validated request.
    :param head: the target's HEAD read in step 1.
    :param attempt: this attempt (the fence's table needs it).
    :param pinned: the commit an earlier try of the run pinned, if any.
    :return: the input commit id.
    :raises InputRefError: if ``input_ref`` is unknown, or not on the target's history.
    """
    if pinned is not None:
        candidate = pinned
    elif request.input_ref == request.target_branch:
        candidate = head.commit_id
    else:
        candidate = request.input_ref
    if _buildable(head, candidate, attempt):
        return candidate
    # A commit id needs no resolving: the merge base proves that it exists (or answers 404).
    known = pinned is not None or _COMMIT_ID_RE.fullmatch(candidate) is not None
    commit = candidate if known else resolve_input(lakefs, request)
    if commit != candidate and _buildable(head, commit, attempt):
        return commit
    try:
        if lakefs.merge_base(request.repository, commit, request.target_branch) == commit:
            return commit
    except LakeFSNotFoundError as exc:
        raise InputRefError(
            f"input_ref {request.input_ref!r} (commit {commit}) not found in repository {request.repository!r}"
        ) from exc
    source = f"input_ref {request.input_ref!r} (commit {commit})"
    if pinned is not None:
        source = f"the pinned input {commit} (input_ref {request.input_ref!r})"
    raise InputRefError(
        f"{source} is not on the history of {request.target_branch!r} (HEAD {head.commit_id}): it is neither the "
        "target's HEAD nor an ancestor of it, so nothing built on it can be published there; nothing was written. "
        f"What to do: pass a commit of {request.target_branch!r} as input_ref (its HEAD, e.g. resolved by "
        "LakeFSResolveRefOperator from the target branch), or publish into the branch the input belongs to; if an "
        f"earlier try pinned the wrong input, delete the input pin ({_PIN_DOC}) and clear the task."
    )


def _buildable(head: HeadState, input_commit: str, attempt: AttemptId) -> bool:
    return decide_publish(head, input_commit, attempt, True, input_commit).action is not Action.FAIL_CLOSED
