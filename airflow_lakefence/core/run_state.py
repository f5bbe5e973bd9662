"""What an attempt remembers for the later tries of its run: the pinned input, the publication it
reported, the evidence it kept.

Every try of one task instance in one DAG run shares this state (in Airflow: the task's
``task_state_store``, scoped to dag run, task and map index; a manual clear keeps it, deleting the
DAG run drops it). Three records:

* **the input pin** (:data:`PIN_KEY`): the first try resolves ``input_ref`` (a branch, a tag or a
  commit id) to a commit and stores ``{"ref", "commit"}``; every later try of the run with the same
  ``input_ref`` uses that commit, so a retry never builds on a dead try's publication. A different
  ``input_ref`` (a cleared upstream resolve task produced a new commit id) is resolved and pinned
  afresh: that is the user's choice of a new input.
* **the reported publication** (:data:`PUBLISHED_KEY`): written by a try right before it reports
  success, ``{"output_ref", "try_number", "decision"}``. A later try that finds the target's HEAD
  to be exactly that commit replaces a *successful* publication (a deliberate clear): it
  *supersedes* it, as opposed to replacing an abandoned one.
* **the evidence list** (:data:`EVIDENCE_KEY`): ``[{"branch", "error", "try_number", "ti_id",
  "input_ref"}]``, written before the evidence marker commit on lakeFS, so a later try spares a kept
  branch even when the marker could not be written, and re-marks it as the attempt that kept it
  (a branch kept before staging still points at its input commit, whose record, if any, is another
  attempt's).

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from airflow_lakefence.core.keys import AttemptId, PublicationKey

PIN_KEY = "lakefence.input_pin"
PUBLISHED_KEY = "lakefence.published"
EVIDENCE_KEY = "lakefence.evidence"


class RunStatePort(Protocol):
    """Durable key/value state shared by every try of one task instance in one run.

    Implementations raise :class:`~airflow_lakefence.exceptions.LakeFenceError` when the state
    cannot be read or written (the engine then fails closed).
    """

    def get(self, key: str) -> Any:
        """The value stored under ``key``, ``None`` when absent."""
        ...

    def set(self, key: str, value: Any) -> None:
        """Store a JSON-serializable ``value`` under ``key``."""
        ...


def pinned_input(state: RunStatePort, ref: str) -> str | None:
    """The commit an earlier try of the run resolved ``ref`` to, if any (the input is resolved once per run).

    :param state: the run state.
    :param ref: the ``input_ref`` as rendered for this try.
    """
    pin = state.get(PIN_KEY)
    if isinstance(pin, dict) and pin.get("ref") == ref and isinstance(pin.get("commit"), str):
        return str(pin["commit"])
    return None


def pin_input(state: RunStatePort, ref: str, commit: str) -> None:
    """Remember what ``ref`` resolved to, for every later try of the run (see :func:`pinned_input`).

    :param state: the run state.
    :param ref: the ``input_ref`` as rendered for this try.
    :param commit: the commit id it resolved to.
    """
    state.set(PIN_KEY, {"ref": ref, "commit": commit})


def reported_publication(state: RunStatePort) -> dict[str, Any] | None:
    """The publication an earlier try of the run reported (``{"output_ref", "try_number", ...}``).

    :param state: the run state.
    """
    value = state.get(PUBLISHED_KEY)
    if isinstance(value, dict) and isinstance(value.get("output_ref"), str):
        return value
    return None


def record_publication(state: RunStatePort, output_ref: str, try_number: int, decision: str) -> None:
    """Remember what this try reports, for a later try of the run (see :func:`reported_publication`).

    :param state: the run state.
    :param output_ref: the commit the try stands behind.
    :param try_number: its try number.
    :param decision: its decision.
    """
    state.set(PUBLISHED_KEY, {"output_ref": output_ref, "try_number": try_number, "decision": decision})


@dataclass(frozen=True)
class RecordedEvidence:
    """One entry of the run's evidence list.

    :param branch: the staging branch kept.
    :param error: the error class name.
    :param try_number: the try number of the attempt that kept it (``None`` in an older entry).
    :param ti_id: that attempt's task-instance id (``None`` in an older entry).
    :param input_ref: that attempt's input commit (``None`` in an older entry).
    """

    branch: str
    error: str
    try_number: int | None = None
    ti_id: str | None = None
    input_ref: str | None = None

    def attempt(self, key: PublicationKey) -> AttemptId | None:
        """The attempt that kept the branch (every try of a run shares ``key``), if recorded.

        :param key: the publication key of the run's task instance.
        """
        if self.try_number is None or self.ti_id is None:
            return None
        return AttemptId(key, self.try_number, self.ti_id)

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        value: dict[str, Any] = {"branch": self.branch, "error": self.error}
        if self.try_number is not None and self.ti_id is not None:
            value.update(try_number=self.try_number, ti_id=self.ti_id)
        if self.input_ref is not None:
            value["input_ref"] = self.input_ref
        return value


def recorded_evidence(state: RunStatePort) -> dict[str, RecordedEvidence]:
    """Branches kept as evidence by tries of the run: ``{branch: entry}``.

    :param state: the run state.
    """
    value = state.get(EVIDENCE_KEY)
    if not isinstance(value, list):
        return {}
    entries = {}
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("branch"), str):
            continue
        try_number, ti_id, input_ref = item.get("try_number"), item.get("ti_id"), item.get("input_ref")
        entries[item["branch"]] = RecordedEvidence(
            item["branch"],
            str(item.get("error", "")),
            try_number if isinstance(try_number, int) and not isinstance(try_number, bool) else None,
            ti_id if isinstance(ti_id, str) else None,
            input_ref if isinstance(input_ref, str) else None,
        )
    return entries


def record_evidence(
    state: RunStatePort, branch: str, error: str, attempt: AttemptId | None = None, input_ref: str | None = None
) -> dict[str, RecordedEvidence]:
    """Add a kept branch to the run's evidence list.

    :param state: the run state.
    :param branch: the staging branch kept.
    :param error: the error class name.
    :param attempt: the attempt that kept it (so a later try can re-mark it as that attempt).
    :param input_ref: that attempt's input commit.
    :return: the evidence list as written.
    """
    kept = recorded_evidence(state)
    kept[branch] = RecordedEvidence(
        branch,
        error,
        None if attempt is None else attempt.try_number,
        None if attempt is None else attempt.ti_id,
        input_ref,
    )
    state.set(EVIDENCE_KEY, [entry.to_json() for _name, entry in sorted(kept.items())])
    return kept


class MemoryRunState:
    """A :class:`RunStatePort` in a dict (tests; adapters without durable state)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        """The stored value, or ``None``.

        :param key: the key.
        """
        return self.values.get(key)

    def set(self, key: str, value: Any) -> None:
        """Store a value.

        :param key: the key.
        :param value: the value.
        """
        self.values[key] = value
