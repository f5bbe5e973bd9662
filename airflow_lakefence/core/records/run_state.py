"""What an attempt remembers for the later tries of its run: the pinned input, the publication it
reported, the evidence it kept.

Every try of one task instance in one DAG run shares this state. It is made of **write-once
records** (the store is lakeFS itself on every Airflow version: :mod:`airflow_lakefence.lakefs_adapter.run_state_store`;
docs/protocol.md, "Run state"): a record is created atomically if absent and never changed, so two
live tries can race for a key but never overwrite each other's update. Three kinds:

* **the input pin** (:func:`pin_key`, one per rendered ``input_ref``): the first try resolves
  ``input_ref`` (a branch or a tag) to a commit and creates ``{"ref", "commit"}``; every later try of
  the run with the same ``input_ref`` uses that commit, so a retry never builds on a dead try's
  publication. Of two tries racing to pin, exactly one wins; the other stops
  (:class:`~airflow_lakefence.exceptions.RunStateConflictError`). A commit id pins itself (nothing
  is written). A different ``input_ref`` (a cleared upstream resolve task produced a new commit id)
  is resolved and pinned afresh: that is the user's choice of a new input.
* **the reported publication** (:func:`published_key`, one per try): created by a try right before
  it reports success, ``{"output_ref", "try_number", "decision"}``, and for a replacement or a
  relocation ``"replaced"``: the commit it took off the target (records written before that field
  existed lack it); the latest try's record counts.
  A later try that finds the target's HEAD to be exactly that commit replaces a *successful*
  publication (a deliberate clear): it *supersedes* it, as opposed to replacing an abandoned one.
* **the evidence list** (:func:`evidence_key`, one per kept branch): ``{"branch", "error",
  "try_number", "ti_id", "input_ref"}`` and, when the writer was given a redactor, ``"message"``: the
  error's message, redacted and cut to :data:`MESSAGE_LIMIT` characters (older entries lack it);
  created before the evidence marker commit on lakeFS, so a later try spares a kept branch even
  when the marker could not be written, and re-marks it as the attempt that kept it (a branch kept
  before staging still points at its input commit, whose record, if any, is another attempt's).

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.exceptions import RunStateConflictError

PIN_KEY = "pin"
PUBLISHED_KEY = "published"
EVIDENCE_KEY = "evidence"
#: The most characters of an error message an evidence entry keeps.
MESSAGE_LIMIT = 500


class RunStatePort(Protocol):
    """Durable, write-once records shared by every try of one task instance in one run.

    Every record is written once and never changed or deleted by a try: two live tries can race for
    one key, but never overwrite each other (:meth:`create` is a compare-and-set against "absent").
    Implementations raise :class:`~airflow_lakefence.exceptions.LakeFenceError` when the state
    cannot be read or written (the engine then fails closed).
    """

    def get(self, key: str) -> Any:
        """The value stored under ``key``, ``None`` when absent."""
        ...

    def items(self, prefix: str) -> dict[str, Any]:
        """Every record whose key starts with ``prefix``: ``{key: value}``."""
        ...

    def create(self, key: str, value: Any) -> Any:
        """Store a JSON-serializable ``value`` under ``key`` unless a record is there already.

        :return: the value stored under ``key`` afterwards: ``value``, or the record another try
            wrote first (atomically: exactly one of two racing writers wins).
        """
        ...


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def pin_key(ref: str) -> str:
    """The key of the pin of one ``input_ref`` (one pin per rendered ref).

    :param ref: the ``input_ref`` as rendered.
    """
    return f"{PIN_KEY}/{_digest(ref)}"


def published_key(try_number: int) -> str:
    """The key of the publication one try reported (one record per try).

    :param try_number: the try.
    """
    return f"{PUBLISHED_KEY}/{try_number:08d}"


def evidence_key(branch: str) -> str:
    """The key of one evidence entry (a staging branch is kept by its own attempt only).

    :param branch: the kept staging branch.
    """
    return f"{EVIDENCE_KEY}/{_digest(branch)}"


def pinned_input(state: RunStatePort, ref: str) -> str | None:
    """The commit an earlier try of the run resolved ``ref`` to, if any (the input is resolved once per run).

    :param state: the run state.
    :param ref: the ``input_ref`` as rendered for this try.
    """
    pin = state.get(pin_key(ref))
    if isinstance(pin, dict) and pin.get("ref") == ref and isinstance(pin.get("commit"), str):
        return str(pin["commit"])
    return None


def pin_input(state: RunStatePort, ref: str, commit: str) -> None:
    """Remember what ``ref`` resolved to, for every later try of the run (see :func:`pinned_input`).

    A commit id pins itself: nothing is written when ``ref`` is the commit.

    :param state: the run state.
    :param ref: the ``input_ref`` as rendered for this try.
    :param commit: the commit id it resolved to.
    :raises RunStateConflictError: another live try of the run pinned ``ref`` to another commit
        first (this try must not build on a different input: it fails closed).
    """
    if ref == commit:
        return
    stored = state.create(pin_key(ref), {"ref": ref, "commit": commit})
    if not isinstance(stored, dict) or stored.get("commit") != commit:
        pinned = stored.get("commit") if isinstance(stored, dict) else stored
        raise RunStateConflictError(
            f"another try of this run pinned input_ref {ref!r} to commit {pinned} while this try resolved it to "
            f"{commit}: this try stops before its job; the run's pin stands"
        )


def reported_publication(state: RunStatePort) -> dict[str, Any] | None:
    """The publication the latest try of the run reported (``{"output_ref", "try_number", ...}``).

    A try that also kept evidence reported nothing: its record went out beside the verification
    that then found a race (:func:`voided_tries`).

    :param state: the run state.
    """
    records = state.items(PUBLISHED_KEY + "/")
    voided = voided_tries(state)
    for _key, value in sorted(records.items(), reverse=True):
        if isinstance(value, dict) and isinstance(value.get("output_ref"), str):
            if value.get("try_number") not in voided:
                return value
    return None


def voided_tries(state: RunStatePort) -> set[int]:
    """The tries whose publication record does not count: each kept evidence, so it failed closed.

    A merge's verification travels beside the record of what the try reports; when it finds a
    race, the try keeps its evidence, and its evidence entry voids the record already written.

    :param state: the run state.
    """
    return {e.try_number for e in recorded_evidence(state).values() if e.try_number is not None}


def record_publication(
    state: RunStatePort, output_ref: str, try_number: int, decision: str, replaced: str | None = None
) -> None:
    """Remember what this try reports, for a later try of the run (see :func:`reported_publication`).

    :param state: the run state.
    :param output_ref: the commit the try stands behind.
    :param try_number: its try number.
    :param decision: its decision.
    :param replaced: the commit a replacement or relocation took off the target (an earlier try's
        publication, reported or abandoned), if any.
    """
    value: dict[str, Any] = {"output_ref": output_ref, "try_number": try_number, "decision": decision}
    if replaced:
        value["replaced"] = replaced
    state.create(published_key(try_number), value)


def bounded_message(text: str) -> str:
    """An error message as an evidence entry keeps it: one line, at most :data:`MESSAGE_LIMIT` characters.

    :param text: the (already redacted) message.
    """
    line = " ".join(text.split())
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 1] + "\u2026"


@dataclass(frozen=True)
class RecordedEvidence:
    """One entry of the run's evidence list.

    :param branch: the staging branch kept.
    :param error: the error class name.
    :param try_number: the try number of the attempt that kept it (``None`` in an older entry).
    :param ti_id: that attempt's task-instance id (``None`` in an older entry).
    :param input_ref: that attempt's input commit (``None`` in an older entry).
    :param message: the error's message, redacted and bounded (``None`` in an older entry, or when
        the writer had no redactor).
    """

    branch: str
    error: str
    try_number: int | None = None
    ti_id: str | None = None
    input_ref: str | None = None
    message: str | None = None

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
        if self.message is not None:
            value["message"] = self.message
        return value


def recorded_evidence(state: RunStatePort) -> dict[str, RecordedEvidence]:
    """Branches kept as evidence by tries of the run: ``{branch: entry}``.

    :param state: the run state.
    """
    entries = {}
    for _key, item in sorted(state.items(EVIDENCE_KEY + "/").items()):
        entry = _evidence_entry(item)
        if entry is not None:
            entries[entry.branch] = entry
    return entries


def _evidence_entry(item: Any) -> RecordedEvidence | None:
    if not isinstance(item, dict) or not isinstance(item.get("branch"), str):
        return None
    try_number, ti_id, input_ref = item.get("try_number"), item.get("ti_id"), item.get("input_ref")
    message = item.get("message")
    return RecordedEvidence(
        item["branch"],
        str(item.get("error", "")),
        try_number if isinstance(try_number, int) and not isinstance(try_number, bool) else None,
        ti_id if isinstance(ti_id, str) else None,
        input_ref if isinstance(input_ref, str) else None,
        message if isinstance(message, str) else None,
    )


def record_evidence(
    state: RunStatePort,
    branch: str,
    error: str,
    attempt: AttemptId | None = None,
    input_ref: str | None = None,
    message: str | None = None,
) -> dict[str, RecordedEvidence]:
    """Add a kept branch to the run's evidence list (its own record: no try overwrites another's).

    :param state: the run state.
    :param branch: the staging branch kept.
    :param error: the error class name.
    :param attempt: the attempt that kept it (so a later try can re-mark it as that attempt).
    :param input_ref: that attempt's input commit.
    :param message: the error's message, already redacted (cut to :data:`MESSAGE_LIMIT` here).
    :return: the evidence list after the write.
    """
    entry = RecordedEvidence(
        branch,
        error,
        None if attempt is None else attempt.try_number,
        None if attempt is None else attempt.ti_id,
        input_ref,
        None if message is None else bounded_message(message),
    )
    state.create(evidence_key(branch), entry.to_json())
    return recorded_evidence(state)


class MemoryRunState:
    """A :class:`RunStatePort` in a dict (tests; an engine without durable state)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        """The stored value, or ``None``.

        :param key: the key.
        """
        return self.values.get(key)

    def items(self, prefix: str) -> dict[str, Any]:
        """The records under ``prefix``.

        :param prefix: the key prefix.
        """
        return {key: value for key, value in self.values.items() if key.startswith(prefix)}

    def create(self, key: str, value: Any) -> Any:
        """Store a value unless one is there; return what is stored.

        :param key: the key.
        :param value: the value.
        """
        return self.values.setdefault(key, value)
