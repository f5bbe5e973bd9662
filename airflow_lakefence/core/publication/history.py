"""The publication history of a task instance, as rows an operator on call reads: which try of which
run published which commit, what it replaced, what superseded it, what it kept as evidence, and what
the abandoned-publication sensor would say about it now.

Built from plain values the caller gathered (the run's write-once records, the commits they name,
the staging branches still there, and what Airflow says about the task instance): nothing here
imports Airflow or lakeFS. The judgement is :func:`~airflow_lakefence.core.publication.abandonment.judge`
itself, asked about each published commit as if it were the target's HEAD, so the view and the
sensor never disagree.

One row per try of the task instance (tries ``1..try_number``, newest first):

* a try that reported a publication (its ``published`` record): the decision it recorded
  (``merge``, ``replace``, ``relocate``, ``idempotent``, ``noop``), its output commit, the staged
  commit and input that commit's ``lakefence.*`` metadata names, what it replaced (an earlier try's
  reported publication: a deliberate clear superseded it) and the judgement now;
* a try that kept its staging branch as evidence: ``fail_closed``, with the error class, its
  message (when the run state kept it: redacted and bounded by the writer) and whether the branch is
  still there;
* any other try: ``unreported`` (it failed before publishing, was cleared, or died before reporting).
  A try that died after publishing left an abandoned publication on the target: the row names it
  when a later try's record says which commit it replaced (``replaced``, or the ``lakefence.replaces``
  link of a merge-only replacement), or when the abandoned sensor's probe of the target now judges a
  publication of that try (:func:`history_rows`'s ``probe``); its judgement is then ``judge()``'s.

A run-branch publication (``LakeFSPublishRunOperator``) also lists the run's tasks whose commits it
published (:func:`run_tasks_of`), read from the run branch's log as its staged commit names it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_lakefence.core.fences.hard import REPLACES_KEY
from airflow_lakefence.core.fences.publish import HeadState
from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.publication.abandonment import Judgement, PublisherState, Verdict, judge, newest_try
from airflow_lakefence.core.publication.run_branches import (
    PROVIDER_DAG_ID_KEY,
    PROVIDER_MAP_INDEX_KEY,
    PROVIDER_RUN_ID_KEY,
    PROVIDER_TASK_ID_KEY,
    RUN_BRANCH_METADATA_KEY,
    RUN_HEAD_METADATA_KEY,
)
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, decode_metadata, output_prefixes_of
from airflow_lakefence.core.records.run_state import (
    EVIDENCE_KEY,
    PIN_KEY,
    PUBLISHED_KEY,
    recorded_evidence,
    voided_tries,
)

#: The decisions a row can show, in the words docs/protocol.md uses for them.
DECISION_REASONS: Mapping[str, str] = {
    "merge": "the target's HEAD was the pinned input: the staged commit was merged onto it",
    "replace": "the target's HEAD was an earlier try's publication of this run: it was replaced by this try's",
    "relocate": "an earlier try's publication of this run was moved off the target, back to the input",
    "idempotent": "the target's HEAD already was this attempt's publication (a retried call): nothing repeated",
    "noop": "the output changed nothing: the target stays at the input",
    "fail_closed": "the target moved in a way the fence cannot prove safe: nothing published, the staging "
    "branch kept as evidence",
    "unreported": "this try reported no publication (it failed before publishing, was cleared, or died "
    "before reporting)",
}
#: The reason of an unreported try whose abandoned publication was found.
DIED_BEFORE_REPORTING = (
    "this try published and died before reporting it: its publication is an abandoned one, which the next try replaces"
)
#: The most of the run's tasks' attempts a run-branch publication lists.
RUN_TASKS_LIMIT = 50
#: The most commits of the run branch read for them (one ``log`` call).
RUN_LOG_AMOUNT = 200
#: How the view names the sensor's verdicts about a publication now.
JUDGEMENT_LABELS: Mapping[str, str] = {
    Verdict.SETTLED.value: "live",
    Verdict.SUPERSEDED.value: "superseded",
    Verdict.ABANDONED.value: "abandoned",
    Verdict.IN_FLIGHT.value: "in flight",
    Verdict.NOT_A_PUBLICATION.value: "not a publication",
    Verdict.OUT_OF_SCOPE.value: "another publisher's",
}


@dataclass(frozen=True)
class TaskInstanceFacts:
    """What Airflow says about one task instance, and where it publishes.

    :param key: the publication key.
    :param try_number: its latest try.
    :param state: its current state (``"none"`` when it has none).
    :param repository: the rendered repository.
    :param target_branch: the rendered target branch.
    :param output_ref: its XCom ``output_ref`` (``None`` when absent: Airflow 3 empties it per try).
    :param supersedes: its XCom ``supersedes``, if any.
    :param output_prefixes: the rendered write set (scoped publishers).
    :param input_prefixes: the rendered read set.
    :param staging_prefix: the staging branch prefix it uses.
    """

    key: PublicationKey
    try_number: int
    state: str
    repository: str
    target_branch: str
    output_ref: str | None = None
    supersedes: Mapping[str, Any] | None = None
    output_prefixes: tuple[str, ...] = ()
    input_prefixes: tuple[str, ...] = ()
    staging_prefix: str = "lakefence"


@dataclass(frozen=True)
class EvidenceRow:
    """One staging branch kept as evidence.

    :param branch: the branch.
    :param error: the error class the attempt failed closed with.
    :param kept: whether the branch is still there (a cleaner may have deleted it since).
    :param head: its HEAD commit when it is there.
    :param message: the error's message as the run state kept it (redacted and bounded by the
        writer; ``None`` for an entry written without it).
    """

    branch: str
    error: str
    kept: bool
    head: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class RunTask:
    """One attempt of a task of the run whose commits a run-branch publication published.

    :param dag_id: its DAG (a run's tasks may be a triggered DAG's).
    :param run_id: its run.
    :param task_id: the task.
    :param map_index: its map index.
    :param try_number: the try that wrote the commits (``None`` when the commit does not say).
    :param output_ref: its publication onto the run branch (the merge), if among the commits.
    :param staged_commit: its staged commit, if among the commits.
    :param commits: every commit of the attempt on the run branch, newest first.
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int | None
    output_ref: str | None = None
    staged_commit: str | None = None
    commits: tuple[str, ...] = ()


@dataclass(frozen=True)
class PublicationRow:
    """One try of one task instance in the history.

    :param dag_id: the DAG.
    :param run_id: the run.
    :param task_id: the task.
    :param map_index: the map index (-1: not mapped).
    :param try_number: the try.
    :param repository: the repository.
    :param target_branch: the target branch.
    :param decision: ``merge``, ``replace``, ``relocate``, ``idempotent``, ``noop``, ``fail_closed``
        or ``unreported``.
    :param reason: the decision in the docs' words.
    :param input_commit: the pinned input commit.
    :param input_ref: the ``input_ref`` as rendered when pinned (a branch or tag), if recorded.
    :param output_ref: the commit the try stands behind.
    :param staged_commit: the staged commit it merged.
    :param replaced: ``{"output_ref", "try_number"}`` of an earlier try's reported publication this
        try replaced or relocated.
    :param superseded_by: the later try of the run whose publication replaced this one.
    :param judgement: the sensor's verdict about ``output_ref`` now (see :data:`JUDGEMENT_LABELS`).
    :param judgement_reason: the sensor's sentence.
    :param output_prefixes: the write set.
    :param input_prefixes: the read set.
    :param evidence: the branches this try kept.
    :param current: this is the task instance's latest try.
    :param found_by: for an unreported try whose abandoned publication is named (``output_ref``): how
        it was found, ``"replacing try"`` (a later try's record or link) or ``"target"`` (the
        abandoned sensor's probe of the target now).
    :param run_branch: for a run-branch publication, the run branch it published.
    :param run_head: the run branch's HEAD it published (``None`` for a publication made before the
        staged commit named it: then the run's tasks are read from the run branch as it is now).
    :param run_tasks: the run's tasks' attempts whose commits it published, newest first.
    :param run_tasks_truncated: more commits than :data:`RUN_LOG_AMOUNT`, or attempts than
        :data:`RUN_TASKS_LIMIT`, lay above the input: the list is the newest part.
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    repository: str
    target_branch: str
    decision: str
    reason: str
    input_commit: str | None = None
    input_ref: str | None = None
    output_ref: str | None = None
    staged_commit: str | None = None
    replaced: Mapping[str, Any] | None = None
    superseded_by: int | None = None
    judgement: str | None = None
    judgement_reason: str | None = None
    output_prefixes: tuple[str, ...] = ()
    input_prefixes: tuple[str, ...] = ()
    evidence: tuple[EvidenceRow, ...] = ()
    current: bool = False
    found_by: str | None = None
    run_branch: str | None = None
    run_head: str | None = None
    run_tasks: tuple[RunTask, ...] = ()
    run_tasks_truncated: bool = False

    @property
    def judgement_label(self) -> str | None:
        """The judgement as the view names it (``live``, ``superseded``, ``abandoned``...)."""
        return None if self.judgement is None else JUDGEMENT_LABELS.get(self.judgement, self.judgement)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form (the view's API)."""
        value = dataclasses.asdict(self)
        value["output_prefixes"] = list(self.output_prefixes)
        value["input_prefixes"] = list(self.input_prefixes)
        value["evidence"] = [dataclasses.asdict(e) for e in self.evidence]
        value["run_tasks"] = [dataclasses.asdict(t) for t in self.run_tasks]
        value["judgement_label"] = self.judgement_label
        value["replaced"] = None if self.replaced is None else dict(self.replaced)
        return value


class _Records:
    """A task instance's run-state records as a :class:`RunStatePort` (read only)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = dict(values)

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def items(self, prefix: str) -> dict[str, Any]:
        return {k: v for k, v in self.values.items() if k.startswith(prefix)}

    def create(self, key: str, value: Any) -> Any:  # pragma: no cover - the history never writes
        raise TypeError("the publication history is read only")


def _replaced_by(value: Mapping[str, Any]) -> str | None:
    replaced = value.get("replaced")
    return replaced if isinstance(replaced, str) and replaced else None


def commits_to_read(records: Mapping[str, Any]) -> list[str]:
    """The commits a task instance's rows need: its reported outputs and the commits its
    replacements took off the target, in try order.

    :param records: the run's records (``{record key: value}``).
    """
    wanted: list[str] = []
    for _number, value in sorted(reported_records(records).items()):
        for ref in (value.get("output_ref"), _replaced_by(value)):
            if isinstance(ref, str) and ref not in wanted:
                wanted.append(ref)
    return wanted


def reported_records(records: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """``{try: record}`` of the tries that reported a publication (a try that kept evidence did not:
    see :func:`~airflow_lakefence.core.records.run_state.voided_tries`).

    :param records: the run's records (``{record key: value}``).
    """
    found: dict[int, dict[str, Any]] = {}
    voided = _kept_tries(records)
    for key, value in records.items():
        if not key.startswith(PUBLISHED_KEY + "/") or not isinstance(value, dict):
            continue
        number, ref = value.get("try_number"), value.get("output_ref")
        if isinstance(number, int) and not isinstance(number, bool) and isinstance(ref, str) and number not in voided:
            found[number] = value
    return found


def _pins(records: Mapping[str, Any]) -> dict[str, str]:
    """``{commit: ref}`` of the run's input pins."""
    pins = {}
    for key, value in records.items():
        if key.startswith(PIN_KEY + "/") and isinstance(value, dict):
            if isinstance(value.get("commit"), str) and isinstance(value.get("ref"), str):
                pins[value["commit"]] = value["ref"]
    return pins


def _kept_tries(records: Mapping[str, Any]) -> set[int]:
    return voided_tries(_Records(records))


def needs_probe(ti: TaskInstanceFacts, records: Mapping[str, Any]) -> bool:
    """Whether the target must be probed (the abandoned sensor's poke) to name what a try left there:
    a try after every try that reported or kept evidence reported nothing (it may have died after
    publishing, and no later try replaced its publication yet).

    :param ti: the task instance.
    :param records: its run's records.
    """
    known = set(reported_records(records)) | _kept_tries(records)
    return ti.try_number >= 1 and ti.try_number > max(known, default=0)


def run_publication_of(commit: CommitInfo | None) -> tuple[str, str | None] | None:
    """``(run branch, run head)`` when ``commit`` is a run-branch publication (its metadata names the
    run branch; the head only on the staged commit of a publication made since it is recorded).

    :param commit: a reported output commit, or a staged commit.
    """
    if commit is None:
        return None
    branch = commit.metadata.get(RUN_BRANCH_METADATA_KEY)
    if not branch:
        return None
    return branch, commit.metadata.get(RUN_HEAD_METADATA_KEY) or None


def run_tasks_of(
    log: Sequence[CommitInfo], input_commit: str | None, limit: int = RUN_TASKS_LIMIT
) -> tuple[tuple[RunTask, ...], bool]:
    """The run's tasks' attempts in a run branch's log (newest first), down to the run's input.

    A fenced task's commits carry its attempt (``lakefence.*``: its staged commit and its merge);
    a provider-compatible ``LakeFSCommitOperator`` / ``LakeFSMergeOperator`` commit carries
    ``::lakefs::Airflow::`` keys. Other commits are not a task's and are left out.

    :param log: the run branch's commits from the published head, newest first (one ``log`` call).
    :param input_commit: the run's input (where the run's own commits end).
    :param limit: the most attempts listed.
    :return: the attempts, and whether the list is cut (more attempts, or the log never reached the input).
    """
    found: dict[tuple[str, str, str, int, int | None], dict[str, Any]] = {}
    reached = False
    for commit in log:
        if commit.id == input_commit:
            reached = True
            break
        record = decode_metadata(commit.metadata)
        ident: tuple[str, str, str, int, int | None]
        if record is not None:
            key = record.attempt.key
            ident = (key.dag_id, key.run_id, key.task_id, key.map_index, record.attempt.try_number)
            role = record.role
        else:
            meta = commit.metadata
            names = [meta.get(k) for k in (PROVIDER_DAG_ID_KEY, PROVIDER_RUN_ID_KEY, PROVIDER_TASK_ID_KEY)]
            if not all(names):
                continue
            index = meta.get(PROVIDER_MAP_INDEX_KEY, "-1")
            number = meta.get("::lakefs::Airflow::try_number", "")
            ident = (
                str(names[0]),
                str(names[1]),
                str(names[2]),
                int(index) if index.lstrip("-").isdigit() else -1,
                int(number) if number.isdigit() else None,
            )
            role = None
        entry = found.setdefault(ident, {"commits": [], "output_ref": None, "staged_commit": None})
        entry["commits"].append(commit.id)
        if role == ROLE_PUBLISH and entry["output_ref"] is None:
            entry["output_ref"] = commit.id
        elif role is not None and role != ROLE_PUBLISH and entry["staged_commit"] is None:
            entry["staged_commit"] = commit.id
    tasks = tuple(
        RunTask(
            *ident,
            output_ref=e["output_ref"] or e["staged_commit"] or e["commits"][0],
            staged_commit=e["staged_commit"],
            commits=tuple(e["commits"]),
        )
        for ident, e in itertools.islice(found.items(), limit)
    )
    cut = len(found) > limit or (input_commit is not None and not reached)
    return tasks, cut


def history_rows(
    ti: TaskInstanceFacts,
    records: Mapping[str, Any],
    commits: Mapping[str, CommitInfo],
    staging_branches: Sequence[tuple[str, str]],
    probe: Judgement | None = None,
    run_logs: Mapping[str, Sequence[CommitInfo]] | None = None,
) -> list[PublicationRow]:
    """The rows of one task instance, newest try first.

    :param ti: what Airflow says about the task instance.
    :param records: its run's records (``{record key: value}``, as the run-state store lists them).
    :param commits: the commits of :func:`commits_to_read` that could be read (``{id: commit}``),
        and the staged commits of run-branch publications.
    :param staging_branches: ``(name, head)`` of the staging branches of its key still in the repository.
    :param probe: the abandoned sensor's judgement of the task's target now (asked when
        :func:`needs_probe`); it names a try's abandoned publication when its record is that try's.
    :param run_logs: ``{run-branch publication output: the run branch's log}`` (see :func:`run_tasks_of`).
    """
    state = _Records(records)
    published = reported_records(records)
    evidence = recorded_evidence(state)
    pins = _pins(records)
    present = dict(staging_branches)
    newest_staging = newest_try((name for name, _ in staging_branches), ti.key, ti.staging_prefix)
    publisher = PublisherState(ti.state, ti.output_ref, newest_staging, ti.supersedes)
    kept_by: dict[int, list[EvidenceRow]] = {}
    for entry in evidence.values():
        if entry.try_number is None:
            continue
        row = EvidenceRow(entry.branch, entry.error, entry.branch in present, present.get(entry.branch), entry.message)
        kept_by.setdefault(entry.try_number, []).append(row)
    # Which later try replaced each reported publication (the try that replaced or relocated it).
    superseded_by: dict[int, int] = {}
    numbers = sorted(published)
    for earlier, later in itertools.pairwise(numbers):
        if published[later].get("decision") in ("replace", "relocate"):
            superseded_by[earlier] = later
    abandoned = _abandoned(ti, published, commits, probe)
    for number, (_commit, _found_by, by) in abandoned.items():
        if by is not None:
            superseded_by.setdefault(number, by)
    rows = []
    top = max([ti.try_number, *published, *kept_by], default=0)
    for number in range(top, 0, -1):
        common: dict[str, Any] = {
            "dag_id": ti.key.dag_id,
            "run_id": ti.key.run_id,
            "task_id": ti.key.task_id,
            "map_index": ti.key.map_index,
            "try_number": number,
            "repository": ti.repository,
            "target_branch": ti.target_branch,
            "output_prefixes": ti.output_prefixes,
            "input_prefixes": ti.input_prefixes,
            "evidence": tuple(kept_by.get(number, ())),
            "current": number == ti.try_number,
            "superseded_by": superseded_by.get(number),
        }
        if number in published:
            rows.append(
                _published_row(ti, common, published, number, commits, pins, publisher, abandoned, run_logs or {})
            )
        elif number in kept_by:
            first = next(e for e in evidence.values() if e.try_number == number)
            rows.append(
                PublicationRow(
                    **common,
                    decision="fail_closed",
                    reason=f"{DECISION_REASONS['fail_closed']} ({first.error})",
                    input_commit=first.input_ref,
                    input_ref=pins.get(first.input_ref or ""),
                )
            )
        elif number in abandoned:
            rows.append(_abandoned_row(common, abandoned[number], pins, publisher))
        else:
            rows.append(PublicationRow(**common, decision="unreported", reason=DECISION_REASONS["unreported"]))
    return rows


def _abandoned(
    ti: TaskInstanceFacts,
    published: Mapping[int, Mapping[str, Any]],
    commits: Mapping[str, CommitInfo],
    probe: Judgement | None,
) -> dict[int, tuple[CommitInfo | Judgement, str, int | None]]:
    """``{try: (its abandoned publication, found by, the try that replaced it)}`` for tries that
    reported nothing: a commit a later try replaced whose record is theirs, or the target's
    publication the sensor's probe judged, when its record is theirs."""
    found: dict[int, tuple[CommitInfo | Judgement, str, int | None]] = {}
    for number, value in sorted(published.items()):
        if value.get("decision") not in ("replace", "relocate"):
            continue
        ref = _replaced_by(value)
        if ref is None:  # an older record: a merge-only replacement's link names it
            output = commits.get(str(value["output_ref"]))
            ref = None if output is None else (output.metadata.get(REPLACES_KEY) or None)
        commit = commits.get(ref or "")
        record = None if commit is None else decode_metadata(commit.metadata)
        if record is None or record.attempt.key != ti.key:
            continue
        earlier = record.attempt.try_number
        if earlier < number and earlier not in published:
            found.setdefault(earlier, (commit, "replacing try", number))  # type: ignore[arg-type]
    if probe is not None and probe.record is not None and probe.head is not None:
        attempt = probe.record.attempt
        if attempt.key == ti.key and attempt.try_number not in published and attempt.try_number not in found:
            found[attempt.try_number] = (probe, "target", None)
    return found


def _abandoned_row(
    common: dict[str, Any],
    found: tuple[CommitInfo | Judgement, str, int | None],
    pins: Mapping[str, str],
    publisher: PublisherState,
) -> PublicationRow:
    what, found_by, _by = found
    if isinstance(what, Judgement):
        assert what.record is not None and what.head is not None
        record, commit_id, verdict = what.record, what.head, what
    else:
        decoded = decode_metadata(what.metadata)
        assert decoded is not None  # only commits whose record names the try are found
        record, commit_id = decoded, what.id
        verdict = judge(HeadState(what.id, what.parents, what.metadata, what.version), record, publisher)
    staged = record.staged_commit or (commit_id if record.role != ROLE_PUBLISH else None)
    return PublicationRow(
        **common,
        decision="unreported",
        reason=DIED_BEFORE_REPORTING,
        input_commit=record.input_ref,
        input_ref=pins.get(record.input_ref or ""),
        output_ref=commit_id,
        staged_commit=staged,
        judgement=verdict.verdict.value,
        judgement_reason=verdict.reason,
        found_by=found_by,
    )


def _published_row(
    ti: TaskInstanceFacts,
    common: dict[str, Any],
    published: Mapping[int, Mapping[str, Any]],
    number: int,
    commits: Mapping[str, CommitInfo],
    pins: Mapping[str, str],
    publisher: PublisherState,
    abandoned: Mapping[int, tuple[CommitInfo | Judgement, str, int | None]],
    run_logs: Mapping[str, Sequence[CommitInfo]],
) -> PublicationRow:
    value = published[number]
    decision = str(value.get("decision", ""))
    output_ref = str(value["output_ref"])
    commit = commits.get(output_ref)
    record = decode_metadata(commit.metadata) if commit is not None else None
    staged = input_commit = None
    if record is not None and record.attempt.key == ti.key and record.attempt.try_number == number:
        input_commit = record.input_ref
        staged = record.staged_commit or (output_ref if record.role == "stage" else None)
    if input_commit is None and decision == "noop":
        input_commit = output_ref  # nothing changed: the output is the input
    prefixes = tuple(output_prefixes_of(commit.metadata)) if commit is not None else ()
    replaced = None
    earlier = [n for n in published if n < number]
    if decision in ("replace", "relocate"):
        gone = [(n, c) for n, (c, how, by) in abandoned.items() if by == number]
        if gone:
            n, what = gone[0]
            ref = what.head if isinstance(what, Judgement) else what.id
            replaced = {"output_ref": ref, "try_number": n, "abandoned": True}
        elif earlier:
            previous = published[max(earlier)]
            replaced = {"output_ref": previous["output_ref"], "try_number": previous.get("try_number")}
        elif _replaced_by(value) is not None:
            replaced = {"output_ref": _replaced_by(value), "try_number": None, "abandoned": True}
    judgement = reason = None
    if commit is not None and record is not None:
        head = HeadState(commit.id, commit.parents, commit.metadata, commit.version)
        verdict = judge(head, record, publisher)
        judgement, reason = verdict.verdict.value, verdict.reason
    elif commit is not None:
        judgement, reason = Verdict.NOT_A_PUBLICATION.value, f"{output_ref} carries no lakefence record"
    run: dict[str, Any] = {}
    found = run_publication_of(commit) or run_publication_of(commits.get(staged or ""))
    if found is not None:
        branch, head_ref = found
        if head_ref is None and staged is not None:
            head_ref = (run_publication_of(commits.get(staged)) or (branch, None))[1]
        tasks, cut = run_tasks_of(run_logs.get(output_ref, ()), input_commit)
        run = {"run_branch": branch, "run_head": head_ref, "run_tasks": tasks, "run_tasks_truncated": cut}
    base_reason = DECISION_REASONS.get(decision, decision)
    return PublicationRow(
        **{**common, "output_prefixes": prefixes or common["output_prefixes"]},
        decision=decision,
        reason=base_reason,
        input_commit=input_commit,
        input_ref=pins.get(input_commit or ""),
        output_ref=output_ref,
        staged_commit=staged,
        replaced=replaced,
        judgement=judgement,
        judgement_reason=reason,
        **run,
    )


__all__ = [
    "DECISION_REASONS",
    "DIED_BEFORE_REPORTING",
    "EVIDENCE_KEY",
    "JUDGEMENT_LABELS",
    "RUN_LOG_AMOUNT",
    "RUN_TASKS_LIMIT",
    "EvidenceRow",
    "PublicationRow",
    "RunTask",
    "TaskInstanceFacts",
    "commits_to_read",
    "history_rows",
    "needs_probe",
    "run_publication_of",
    "run_tasks_of",
]
