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
* **the evidence list** (:data:`EVIDENCE_KEY`): ``[{"branch", "error"}]``, written before the
  evidence marker commit on lakeFS, so a later try spares (and re-marks) a kept branch even when the
  marker could not be written.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

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


def pin_input(state: RunStatePort, ref: str, resolve: Callable[[str], str]) -> tuple[str, bool]:
    """Resolve ``ref`` once per run.

    :param state: the run state.
    :param ref: the ``input_ref`` as rendered for this try.
    :param resolve: turns a ref into a commit id (raises for an unknown ref).
    :return: ``(commit id, whether an earlier try had pinned it)``.
    """
    pin = state.get(PIN_KEY)
    if isinstance(pin, dict) and pin.get("ref") == ref and isinstance(pin.get("commit"), str):
        return pin["commit"], True
    commit = resolve(ref)
    state.set(PIN_KEY, {"ref": ref, "commit": commit})
    return commit, False


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


def recorded_evidence(state: RunStatePort) -> dict[str, str]:
    """Branches kept as evidence by tries of the run: ``{branch: error class}``.

    :param state: the run state.
    """
    value = state.get(EVIDENCE_KEY)
    if not isinstance(value, list):
        return {}
    return {
        str(item["branch"]): str(item.get("error", ""))
        for item in value
        if isinstance(item, dict) and isinstance(item.get("branch"), str)
    }


def record_evidence(state: RunStatePort, branch: str, error: str) -> None:
    """Add a kept branch to the run's evidence list.

    :param state: the run state.
    :param branch: the staging branch kept.
    :param error: the error class name.
    """
    kept = recorded_evidence(state)
    kept[branch] = error
    state.set(EVIDENCE_KEY, [{"branch": name, "error": err} for name, err in sorted(kept.items())])


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
