"""The scoped publish fence: publications fenced by the prefixes they read and write, not the whole branch.

In the branch-wide mode (the default) the publish fence accepts only a target whose HEAD is the
input commit *I* (or an earlier try of the same key on top of it). In the **scoped** mode a
publication declares its write set (``output_prefixes``) and its read set (``input_prefixes``), and
the fence accepts a target HEAD *H* that moved past *I* when nothing under any of those prefixes
changed between *I* and *H*: the staged commit is then merged onto *H* (lakeFS's three-way merge of
disjoint changes), so publications of different partitions run and publish side by side.

This module holds the pure parts (no Airflow, no lakeFS imports):

* :func:`parse_scope`: the declared prefixes, normalised and validated (a clear
  :class:`~airflow_lakefence.exceptions.InvalidInputError` before any write);
* :class:`ScopeScan`: which "first changed path under this prefix between I and H" questions to ask
  (one lakeFS diff call each) and the decision their answers give: merge onto H, no-op, fail closed,
  or inspect the write set's history (an earlier try of this key may have published);
* :func:`decide_own_history`: given the commits that changed the write set (newest first), whether
  they are this key's own earlier publications (replace / relocate / a lost answer) or not;
* :func:`describe_conflict`: the fail-closed message naming the commit, its author or task and a path;
* :func:`verify_after_merge`: the check after a scoped merge.
"""

from __future__ import annotations

import enum
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import timedelta
from pathlib import PurePath

from airflow_lakefence.core.fences.hard import ACTION_PATH, MAX_SCOPE_PREFIXES, scoped_merge_metadata
from airflow_lakefence.core.names.keys import AttemptId
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.records.metadata import ROLE_STAGE, decode_metadata
from airflow_lakefence.exceptions import InvalidInputError

__all__ = [
    "DiffQuery",
    "OwnHistoryDecision",
    "Scope",
    "ScopeMode",
    "ScopeScan",
    "ScopedAction",
    "ScopedDecision",
    "Touch",
    "decide_own_history",
    "describe_conflict",
    "parse_scope",
    "race_revert_metadata",
    "rendered_at_run_time",
    "scoped_revert_metadata",
    "verify_after_merge",
]

#: The metadata key a scoped revert commit carries: the commit it reverts (with the reverting
#: attempt's ``stage`` record, so that a later try recognises it as its key's own).
SCOPED_REVERTS_KEY = "lakefence.scope_reverts"
#: The metadata keys of the revert commit with which a scoped publication that lost a race takes its
#: own merge back: the merge commit taken back, and the staged commit it had brought in.
RACE_REVERT_KEY = "lakefence.race_revert"
RACE_TAKEN_BACK_KEY = "lakefence.race_taken_back"
#: How many commits touching the write set :func:`decide_own_history` wants to see (a ``log`` page).
OWN_HISTORY_PAGE = 20

_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f\\]")
# The greatest character: appended to a prefix it makes an ``after`` past every path under it.
_PAST = "\U0010ffff"
_ACTIONS_DIR = ACTION_PATH.split("/", 1)[0] + "/"


class ScopeMode(enum.StrEnum):
    """How much of the target branch a publication is fenced on."""

    #: The whole branch: the target's HEAD must be the input (the default: it fences every read).
    BRANCH = "branch"
    #: The declared read and write prefixes only.
    PREFIXES = "prefixes"


@dataclass(frozen=True)
class Scope:
    """A publication's declared scope, normalised (every prefix ends with ``/``).

    :param output_prefixes: the write set, sorted, none nested in another.
    :param input_prefixes: the read set, sorted, none nested in another.
    """

    output_prefixes: tuple[str, ...]
    input_prefixes: tuple[str, ...] = ()

    @property
    def write(self) -> tuple[str, ...]:
        """Deprecated spelling of :attr:`output_prefixes` (one release)."""
        warnings.warn("Scope.write is deprecated: use Scope.output_prefixes", DeprecationWarning, stacklevel=2)
        return self.output_prefixes

    @property
    def read(self) -> tuple[str, ...]:
        """Deprecated spelling of :attr:`input_prefixes` (one release)."""
        warnings.warn("Scope.read is deprecated: use Scope.input_prefixes", DeprecationWarning, stacklevel=2)
        return self.input_prefixes

    @property
    def fenced(self) -> tuple[str, ...]:
        """The prefixes the fence checks: the write and read sets, without those nested in another, sorted.

        A read prefix inside a write prefix adds nothing (the write prefix is checked); a read prefix
        containing write prefixes replaces them.
        """
        every = sorted(set(self.output_prefixes) | set(self.input_prefixes))
        return tuple(p for p in every if not any(q != p and p.startswith(q) for q in every))

    def writes(self, path: str) -> str | None:
        """The write prefix ``path`` lies under, ``None`` if none.

        :param path: an object path.
        """
        return next((w for w in self.output_prefixes if path.startswith(w)), None)

    def merge_metadata(self, expected_base: str) -> dict[str, str]:
        """The scoped merge's metadata for the hard fence (the expected base and :attr:`fenced`).

        :param expected_base: the input commit the publication built on.
        """
        return scoped_merge_metadata(expected_base, self.fenced)


def _normalise(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} {value!r} must be a string path prefix")
    text = value.strip()
    if not text.strip("/"):
        raise InvalidInputError(f"{what} {value!r} is empty: name a directory such as 'tables/t/'")
    if text.startswith("/"):
        raise InvalidInputError(f"{what} {value!r} is absolute: prefixes are object paths relative to the branch")
    if "://" in text or _URI_RE.match(text):
        raise InvalidInputError(
            f"{what} {value!r} is a URI: give the object path inside the repository (e.g. 'tables/t/'), "
            "not lakefs:// or s3:// addresses"
        )
    if _CONTROL_RE.search(text):
        raise InvalidInputError(f"{what} {value!r} contains a control character or a backslash")
    segments = text.rstrip("/").split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise InvalidInputError(f"{what} {value!r} has an empty, '.' or '..' segment: give a plain relative path")
    return "/".join(segments) + "/"


def _normalise_set(values: Sequence[str] | None, what: str) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        raise InvalidInputError(f"{what} must be a list of path prefixes, not a string")
    prefixes = [_normalise(v, f"{what} entry") for v in values]
    ordered = sorted(prefixes)
    for i, prefix in enumerate(ordered):
        for other in ordered[i + 1 :]:
            if other == prefix:
                raise InvalidInputError(f"{what} names {prefix!r} twice")
            if other.startswith(prefix):
                raise InvalidInputError(
                    f"{what} overlap: {other!r} lies under {prefix!r}; declare each directory once "
                    "(the outer one covers the inner)"
                )
    return tuple(ordered)


def rendered_at_run_time(value: object) -> bool:
    """Whether an argument is only known at run time, so that checking it waits for the try.

    :param value: what the DAG author passed.
    :returns: ``True`` for a Jinja string, a collection or dataclass holding one, or an object that is
        none of: ``None``, a string, a number, a bool, a duration, a path, a callable, a list, tuple,
        set or mapping of such values, a dataclass of them (an XComArg, say, resolved in the try).
    """
    if value is None or isinstance(value, (bool, int, float, timedelta, PurePath)):
        return False
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(rendered_at_run_time(v) for v in value)
    if isinstance(value, Mapping):
        return any(rendered_at_run_time(k) or rendered_at_run_time(v) for k, v in value.items())
    if is_dataclass(value) and not isinstance(value, type):
        return any(rendered_at_run_time(getattr(value, f.name)) for f in fields(value))
    if isinstance(value, enum.Enum) or (callable(value) and not hasattr(value, "resolve")):
        return False
    return True


def parse_scope(
    output_prefixes: Sequence[str] | None,
    input_prefixes: Sequence[str] | None,
    mode: str | ScopeMode = ScopeMode.BRANCH,
) -> Scope | None:
    """Validate and normalise a publication's declared scope.

    :param output_prefixes: the write set (templated values, rendered).
    :param input_prefixes: the read set: the prefixes the job reads from the input commit.
    :param mode: ``"branch"`` (the default: returns ``None``, the fence covers the whole branch) or
        ``"prefixes"``.
    :return: the scope in the scoped mode, ``None`` in the branch-wide mode.
    :raises InvalidInputError: for an unknown mode; read prefixes in the branch-wide mode; the scoped
        mode without output prefixes; a prefix that is not a relative object path (absolute, a URI,
        empty, with ``.``/``..`` segments or control characters); prefixes of one set that repeat or
        nest; a write prefix covering the hard fence's ``_lakefs_actions/``; more prefixes than the
        hard fence checks.
    """
    try:
        scope_mode = ScopeMode(mode)
    except ValueError:
        raise InvalidInputError(f"fence scope must be 'branch' or 'prefixes', got {mode!r}") from None
    if scope_mode is ScopeMode.BRANCH:
        if input_prefixes:
            raise InvalidInputError(
                "input_prefixes declare the read set of the scoped fence (fence scope 'prefixes'); the "
                "branch-wide fence already covers every read"
            )
        return None
    write = _normalise_set(output_prefixes, "output_prefixes")
    if not write:
        raise InvalidInputError(
            "the scoped fence (fence scope 'prefixes') needs output_prefixes: the write set it fences, "
            "e.g. ['tables/t/date={{ ds }}/']"
        )
    read = _normalise_set(input_prefixes, "input_prefixes")
    for prefix in write:
        if _ACTIONS_DIR.startswith(prefix) or prefix.startswith(_ACTIONS_DIR):
            raise InvalidInputError(
                f"output prefix {prefix!r} covers {_ACTIONS_DIR}: a publication must not rewrite lakeFS actions "
                "(the hard fence lives there)"
            )
    scope = Scope(output_prefixes=write, input_prefixes=read)
    if len(scope.fenced) > MAX_SCOPE_PREFIXES:
        raise InvalidInputError(
            f"the scope names {len(scope.fenced)} prefixes, more than {MAX_SCOPE_PREFIXES}: declare common "
            "parent directories"
        )
    return scope


# -- the decision ------------------------------------------------------------------------------


class ScopedAction(enum.StrEnum):
    """What a scoped publish does (see :meth:`ScopeScan.decide` and :func:`decide_own_history`)."""

    MERGE = "merge"  #: merge the staged commit onto the target's HEAD (the scope is untouched)
    NOOP = "noop"  #: nothing staged, the scope is untouched: output the input
    INSPECT = "inspect"  #: only the write set changed: read the commits that changed it
    REPLACE = "replace"  #: this key's earlier try published: revert it, merge the staged commit (merges only)
    RELOCATE = "relocate"  #: the same, nothing staged: revert only
    IDEMPOTENT = "idempotent"  #: this very attempt already published (a lost answer)
    FAIL_CLOSED = "fail_closed"  #: another writer changed the scope: keep the staging branch, raise


@dataclass(frozen=True)
class DiffQuery:
    """One question for lakeFS: ``diff_refs(I, H, prefix=prefix, after=after, amount=1)``.

    :param prefix: a fenced prefix.
    :param after: list only paths after this one (skips a write prefix inside a read prefix).
    """

    prefix: str
    after: str = ""


@dataclass(frozen=True)
class Touch:
    """A changed path inside the scope between the input and the target's HEAD.

    :param prefix: the fenced prefix it lies under.
    :param path: the path.
    :param write_prefix: the write prefix it lies under, ``None`` for the read set only.
    :param change_type: lakeFS's diff type (``added``, ``removed``, ``changed``...), if known.
    """

    prefix: str
    path: str
    write_prefix: str | None
    change_type: str = ""


@dataclass(frozen=True)
class ScopedDecision:
    """The scoped fence's answer.

    :param action: what to do.
    :param reason: a sentence for logs and errors.
    :param touches: the changed paths found in the scope (empty when untouched).
    :param output_ref: the commit to report when known before acting.
    """

    action: ScopedAction
    reason: str
    touches: tuple[Touch, ...] = ()
    output_ref: str | None = None


@dataclass
class ScopeScan:
    """The probes of one scoped publish: at most one diff per fenced prefix while the scope is untouched.

    Usage: ``while (q := scan.next_query()) is not None: scan.record(q, first_path, type)``, then
    :meth:`decide`. When HEAD is the input nothing is asked. When a read prefix contains write
    prefixes and its first change lies under one of them (possibly this key's own earlier output),
    the scan asks again past that write prefix, so a change in the read set is never hidden behind
    one in the write set (extra calls on that path only).

    :param scope: the scope.
    :param head: the target's HEAD commit id.
    :param input_ref: the input commit id.
    """

    scope: Scope
    head: str
    input_ref: str
    _pending: list[DiffQuery] = field(default_factory=list, init=False)
    _touches: list[Touch] = field(default_factory=list, init=False)
    _asked: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.head != self.input_ref:
            self._pending = [DiffQuery(p) for p in self.scope.fenced]

    @property
    def calls(self) -> int:
        """How many diff questions were answered so far."""
        return self._asked

    def next_query(self) -> DiffQuery | None:
        """The next question, ``None`` when the scan is complete."""
        return self._pending[0] if self._pending else None

    def record(self, query: DiffQuery, path: str | None, change_type: str = "") -> None:
        """Record lakeFS's answer to ``query``: the first changed path, ``None`` when none.

        :param query: the question (the one :meth:`next_query` returned).
        :param path: the first changed path under ``query.prefix`` after ``query.after``.
        :param change_type: its diff type.
        :raises ValueError: for an answer to a question not asked, or a path outside the prefix.
        """
        if not self._pending or self._pending[0] != query:
            raise ValueError(f"{query} was not the pending question")
        if path is not None and (not path.startswith(query.prefix) or (query.after and path <= query.after)):
            raise ValueError(f"lakeFS answered {path!r} to {query}")
        self._pending.pop(0)
        self._asked += 1
        if path is None:
            return
        write = self.scope.writes(path)
        self._touches.append(Touch(query.prefix, path, write, change_type))
        if write is not None and write != query.prefix:
            # A write prefix inside a read prefix: look past it for changes in the read set.
            self._pending.insert(0, DiffQuery(query.prefix, after=write + _PAST))

    def decide(self, *, changed: bool) -> ScopedDecision:
        """Decide from the answers.

        :param changed: whether the staged commit differs from the input.
        :raises ValueError: if questions are still pending.
        """
        if self._pending:
            raise ValueError("the scan is not complete")
        touches = tuple(self._touches)
        where = "the input commit" if self.head == self.input_ref else f"moved to {self.head}"
        if not touches:
            if changed:
                return ScopedDecision(
                    ScopedAction.MERGE, f"target {where}; nothing changed inside the scope since the input"
                )
            return ScopedDecision(
                ScopedAction.NOOP, f"target {where}; nothing staged, the scope is untouched", output_ref=self.input_ref
            )
        read = [t for t in touches if t.write_prefix is None]
        if read:
            first = read[0]
            return ScopedDecision(
                ScopedAction.FAIL_CLOSED,
                f"{first.path!r} under the read prefix {first.prefix!r} changed between the input {self.input_ref} "
                f"and the target's HEAD {self.head}: the job read data that is no longer current",
                touches,
            )
        return ScopedDecision(
            ScopedAction.INSPECT,
            f"the write set changed between the input {self.input_ref} and the target's HEAD {self.head} "
            f"({touches[0].path!r}): an earlier try of this key may have published",
            touches,
        )


def scoped_revert_metadata(stage_metadata: Mapping[str, str], reverted: str) -> dict[str, str]:
    """The metadata of a revert commit made by a scoped replacement.

    It carries the reverting attempt's ``stage`` record, so that a later try of the same key
    recognises it, among the commits that changed the write set, as its key's own.

    :param stage_metadata: the reverting attempt's staged-commit metadata (a ``stage`` record).
    :param reverted: the commit it reverts.
    :raises ValueError: if ``stage_metadata`` is not a ``stage`` record.
    """
    record = decode_metadata(stage_metadata)
    if record is None or record.role != ROLE_STAGE:
        raise ValueError("a scoped revert carries the reverting attempt's stage record")
    return {**stage_metadata, SCOPED_REVERTS_KEY: reverted}


def race_revert_metadata(merge: str, staged: str) -> dict[str, str]:
    """The metadata of the revert commit that takes back a scoped merge which lost a race.

    It carries no lakefence record (it publishes nothing): the merge taken back and the staged
    commit that merge brought in, so that :func:`surviving` can leave both out.

    :param merge: the merge commit taken back.
    :param staged: the staged commit that merge brought in.
    """
    return {RACE_REVERT_KEY: merge, RACE_TAKEN_BACK_KEY: staged}


def surviving(commits: Sequence[CommitInfo]) -> list[CommitInfo]:
    """``commits`` without race take-backs: every race loser's revert and the staged commit it took back.

    A scoped merge that lost a race is reverted by its own attempt; together the two commits changed
    nothing, so whoever asks "which publication does the write set hold" (the fence deciding on its
    own history, the sensor judging the latest publication) looks past them.

    :param commits: commits that changed the write set, newest first (a ``log`` page).
    """
    taken_back = {c.metadata.get(RACE_TAKEN_BACK_KEY) for c in commits if RACE_REVERT_KEY in c.metadata}
    return [c for c in commits if RACE_REVERT_KEY not in c.metadata and c.id not in taken_back]


def is_race_revert(commit: CommitInfo) -> bool:
    """Whether ``commit`` is a race loser's revert of its own merge (see :func:`surviving`).

    :param commit: the commit.
    """
    return RACE_REVERT_KEY in commit.metadata


@dataclass(frozen=True)
class OwnHistoryDecision:
    """:func:`decide_own_history`'s answer.

    :param action: ``REPLACE``, ``RELOCATE``, ``NOOP``, ``IDEMPOTENT`` or ``FAIL_CLOSED``.
    :param reason: a sentence for logs and errors.
    :param unwind: the staged commit of this key's latest publication, to revert (``None`` when the
        write set already holds the input's content).
    :param culprit: for ``FAIL_CLOSED``, the commit that is not this key's.
    :param content_check: ``(ref, prefix)`` pairs whose two-dot diff against the target's HEAD must be
        empty before acting (the write set holds exactly that ref's content, so nobody else's change
        survives in it).
    """

    action: ScopedAction
    reason: str
    unwind: str | None = None
    culprit: CommitInfo | None = None
    content_check: tuple[tuple[str, str], ...] = ()


def decide_own_history(
    scope: Scope,
    commits: Sequence[CommitInfo],
    *,
    attempt: AttemptId,
    input_ref: str,
    head: str,
    changed: bool,
) -> OwnHistoryDecision:
    """Decide a scoped publish whose write set changed since the input (after :attr:`ScopedAction.INSPECT`).

    ``commits`` are lakeFS's ``log(H, prefixes=<touched write prefixes>, amount=OWN_HISTORY_PAGE,
    limit=true)``: the non-merge commits reachable from HEAD that changed the write set, newest first
    (a publication shows as its staged commit, which carries the attempt's ``stage`` record). The
    newest are expected to be this key's own (on this input); the first commit that is not marks
    where they end. The order is lakeFS's (by date), so a foreign commit in the write set is caught
    by :attr:`OwnHistoryDecision.content_check` (its change would survive in HEAD's write set) even
    when dated before this key's.

    :param scope: the scope.
    :param commits: the commits that changed the write set, newest first.
    :param attempt: this attempt.
    :param input_ref: the input commit.
    :param head: the target's HEAD.
    :param changed: whether this try staged changes.
    """
    own: list[tuple[CommitInfo, AttemptId, bool]] = []
    other: CommitInfo | None = None
    for commit in surviving(commits):  # a race loser's merge and its revert changed nothing
        record = decode_metadata(commit.metadata)
        if (
            record is None
            or record.role != ROLE_STAGE
            or record.attempt.key != attempt.key
            or record.input_ref != input_ref
        ):
            other = commit
            break
        own.append((commit, record.attempt, SCOPED_REVERTS_KEY in commit.metadata))
    if not own:
        culprit = other
        return OwnHistoryDecision(
            ScopedAction.FAIL_CLOSED,
            "the write set changed since the input, and not by an earlier try of this key"
            + ("" if culprit is None else f": {describe_commit(culprit)}"),
            culprit=culprit,
        )
    if any(a == attempt and not revert for _, a, revert in own):
        return OwnHistoryDecision(
            ScopedAction.IDEMPOTENT, f"this attempt's own publication is already on the target (HEAD {head})"
        )
    newest_try = max(a.try_number for _, a, _ in own)
    if newest_try >= attempt.try_number:
        commit = next(c for c, a, _ in own if a.try_number == newest_try)
        return OwnHistoryDecision(
            ScopedAction.FAIL_CLOSED,
            f"try {newest_try} of this key published after this try {attempt.try_number} started: "
            f"{describe_commit(commit)}",
            culprit=commit,
        )
    staged = [c for c, a, revert in own if a.try_number == newest_try and not revert]
    unwind = staged[0].id if staged else None
    check = tuple((unwind or input_ref, w) for w in scope.output_prefixes)
    if changed:
        return OwnHistoryDecision(
            ScopedAction.REPLACE,
            f"the write set holds the publication of try {newest_try} of this key: replace it",
            unwind,
            content_check=check,
        )
    if unwind is None:
        return OwnHistoryDecision(
            ScopedAction.NOOP, f"try {newest_try} of this key already relocated the write set to the input"
        )
    return OwnHistoryDecision(
        ScopedAction.RELOCATE,
        f"the write set holds the publication of try {newest_try} of this key and this try changed nothing",
        unwind,
        content_check=check,
    )


def describe_commit(commit: CommitInfo) -> str:
    """Name a commit for a message: its id, and the task that wrote it or its committer/message.

    :param commit: the commit.
    """
    record = decode_metadata(commit.metadata)
    if record is not None:
        key = record.attempt.key
        who = (
            f"{record.role} commit of dag {key.dag_id!r} run {key.run_id!r} task {key.task_id!r}"
            + ("" if key.map_index < 0 else f" map index {key.map_index}")
            + f" try {record.attempt.try_number}"
        )
    else:
        first_line = commit.message.splitlines()[0] if commit.message else ""
        who = "a commit not written by lakefence" + (f" ({first_line!r})" if first_line else "")
    return f"commit {commit.id}, {who}"


def describe_conflict(touch: Touch, commit: CommitInfo | None, *, input_ref: str, head: str, target: str) -> str:
    """The fail-closed message of a scoped publish: the path, the commit that changed it, what to do.

    ``commit`` is lakeFS's ``log(H, objects=[touch.path], amount=1, limit=true)``: the newest commit
    that changed the path (one more call, on the failure path only).

    :param touch: the changed path.
    :param commit: the commit that changed it, ``None`` when lakeFS named none.
    :param input_ref: the input commit.
    :param head: the target's HEAD.
    :param target: the target branch.
    """
    role = "write" if touch.write_prefix is not None else "read"
    by = "" if commit is None else f" by {describe_commit(commit)}"
    return (
        f"{touch.path!r} under the {role} prefix {touch.prefix!r} was changed{by} between the input {input_ref} "
        f"and {target!r}'s HEAD {head}: another writer's publication overlaps this one's scope. Nothing was "
        "published; the staging branch is kept as evidence. Clear the task to rebuild it on the new HEAD, or "
        "make the two writers' prefixes disjoint."
    )


def verify_after_merge(scope: Scope, *, merge_first_parent: str, probed_head: str, input_ref: str) -> tuple[str, ...]:
    """What to re-check after a scoped merge (the soft fence's read-then-act window).

    lakeFS computes a merge on the destination's HEAD at that moment; the merge's first parent says
    which. When it is the HEAD the scan probed, the scan's answers hold for the merge: nothing to
    re-check. Otherwise another writer slipped in between: the fenced prefixes must be probed again
    between the input and the first parent (the same :class:`ScopeScan`), and any change is a race
    the publication lost (raise loudly, keep the evidence).

    :param scope: the scope.
    :param merge_first_parent: the merge commit's first parent.
    :param probed_head: the HEAD the scan probed.
    :param input_ref: the input commit.
    :return: the prefixes to probe again (empty when the merge is verified).
    """
    if merge_first_parent in (probed_head, input_ref):
        return ()
    return scope.fenced
