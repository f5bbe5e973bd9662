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
* a try that kept its staging branch as evidence: ``fail_closed``, with the error class and whether
  the branch is still there;
* any other try: ``unreported`` (it failed before publishing, was cleared, or died before reporting:
  a publication it made anyway is what the next try's ``replace`` replaced).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_lakefence.core.fences.publish import HeadState
from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.publication.abandonment import PublisherState, Verdict, judge, newest_try
from airflow_lakefence.core.records.metadata import decode_metadata, output_prefixes_of
from airflow_lakefence.core.records.run_state import (
    EVIDENCE_KEY,
    PIN_KEY,
    PUBLISHED_KEY,
    recorded_evidence,
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
    """

    branch: str
    error: str
    kept: bool
    head: str | None = None


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


def commits_to_read(records: Mapping[str, Any]) -> list[str]:
    """The commits a task instance's rows need (its reported outputs), in try order.

    :param records: the run's records (``{record key: value}``).
    """
    wanted: list[str] = []
    for key, value in sorted(records.items()):
        if key.startswith(PUBLISHED_KEY + "/") and isinstance(value, dict):
            ref = value.get("output_ref")
            if isinstance(ref, str) and ref not in wanted:
                wanted.append(ref)
    return wanted


def _published(records: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for key, value in records.items():
        if not key.startswith(PUBLISHED_KEY + "/") or not isinstance(value, dict):
            continue
        number, ref = value.get("try_number"), value.get("output_ref")
        if isinstance(number, int) and not isinstance(number, bool) and isinstance(ref, str):
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


def history_rows(
    ti: TaskInstanceFacts,
    records: Mapping[str, Any],
    commits: Mapping[str, CommitInfo],
    staging_branches: Sequence[tuple[str, str]],
) -> list[PublicationRow]:
    """The rows of one task instance, newest try first.

    :param ti: what Airflow says about the task instance.
    :param records: its run's records (``{record key: value}``, as the run-state store lists them).
    :param commits: the commits of :func:`commits_to_read` that could be read (``{id: commit}``).
    :param staging_branches: ``(name, head)`` of the staging branches of its key still in the repository.
    """
    state = _Records(records)
    published = _published(records)
    evidence = recorded_evidence(state)
    pins = _pins(records)
    present = dict(staging_branches)
    newest_staging = newest_try((name for name, _ in staging_branches), ti.key, ti.staging_prefix)
    kept_by: dict[int, list[EvidenceRow]] = {}
    for entry in evidence.values():
        if entry.try_number is None:
            continue
        row = EvidenceRow(entry.branch, entry.error, entry.branch in present, present.get(entry.branch))
        kept_by.setdefault(entry.try_number, []).append(row)
    # Which later try replaced each reported publication (the try that replaced or relocated it).
    superseded_by: dict[int, int] = {}
    numbers = sorted(published)
    for earlier, later in itertools.pairwise(numbers):
        if published[later].get("decision") in ("replace", "relocate"):
            superseded_by[earlier] = later
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
        }
        if number in published:
            rows.append(_published_row(ti, common, published, number, commits, pins, superseded_by, newest_staging))
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
        else:
            rows.append(PublicationRow(**common, decision="unreported", reason=DECISION_REASONS["unreported"]))
    return rows


def _published_row(
    ti: TaskInstanceFacts,
    common: dict[str, Any],
    published: Mapping[int, Mapping[str, Any]],
    number: int,
    commits: Mapping[str, CommitInfo],
    pins: Mapping[str, str],
    superseded_by: Mapping[int, int],
    newest_staging: int | None,
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
    if decision in ("replace", "relocate") and earlier:
        previous = published[max(earlier)]
        replaced = {"output_ref": previous["output_ref"], "try_number": previous.get("try_number")}
    judgement = reason = None
    if commit is not None and record is not None:
        head = HeadState(commit.id, commit.parents, commit.metadata, commit.version)
        publisher = PublisherState(ti.state, ti.output_ref, newest_staging, ti.supersedes)
        verdict = judge(head, record, publisher)
        judgement, reason = verdict.verdict.value, verdict.reason
    elif commit is not None:
        judgement, reason = Verdict.NOT_A_PUBLICATION.value, f"{output_ref} carries no lakefence record"
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
        superseded_by=superseded_by.get(number),
        judgement=judgement,
        judgement_reason=reason,
    )


__all__ = [
    "DECISION_REASONS",
    "EVIDENCE_KEY",
    "JUDGEMENT_LABELS",
    "EvidenceRow",
    "PublicationRow",
    "TaskInstanceFacts",
    "commits_to_read",
    "history_rows",
]
