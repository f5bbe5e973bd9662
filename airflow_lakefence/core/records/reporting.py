"""What an attempt tells the outside world, and to whom: the result and the reporter.

The engine tells its :class:`Reporter` five things at fixed moments of the protocol; the Airflow
adapter turns each into XCom pushes (and, for the result, asset events and the closing log line).

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

#: The decision reported by a read-only attempt.
DECISION_READ_ONLY = "read_only"


@dataclass(frozen=True)
class PublishResult:
    """The outcome of one attempt (what the adapter reports).

    :param output_ref: the commit the task reports (published, or the input when nothing was).
    :param decision: the fence's action (``merge``, ``noop``, ``replace``...) or ``read_only``.
    :param input_ref: the resolved input commit.
    :param staged_commit: the staged commit, ``None`` when read-only.
    :param staging_branch: the attempt's staging branch, ``None`` when read-only.
    :param reason: the fence's explanation.
    :param target_head: the target's HEAD when the attempt started.
    :param files: files uploaded from the workspace.
    :param bytes: bytes uploaded from the workspace.
    :param supersedes: the successful publication of an earlier try this attempt replaced (a
        deliberate clear): ``{"output_ref", "try_number"}``, else ``None``.
    :param delta_versions: each declared Delta table's root (``tables/events/``) and its latest
        version at ``output_ref`` (``None``: no table there); empty without declared tables.
    """

    output_ref: str
    decision: str
    input_ref: str
    staged_commit: str | None
    staging_branch: str | None
    reason: str = ""
    target_head: str | None = None
    files: int = 0
    bytes: int = 0
    supersedes: Mapping[str, Any] | None = None
    delta_versions: Mapping[str, int | None] = field(default_factory=dict)

    def summary(self) -> str:
        """One log line saying what the attempt did."""
        uploaded = f"; {self.files} files, {self.bytes} bytes uploaded" if self.files else ""
        tables = "".join(f"; Delta table {root} at version {v}" for root, v in self.delta_versions.items())
        return (
            f"lakefence {self.decision}: output ref {self.output_ref} (input {self.input_ref}, staged commit "
            f"{self.staged_commit}, staging branch {self.staging_branch}){uploaded}{tables}"
        )


class Reporter(Protocol):
    """Who the engine tells what the attempt did, as it happens (the Airflow adapter: XCom)."""

    def staging_created(self, name: str) -> None:
        """Step 3: the staging branch exists (told at once, so a failing try can still link to it).

        :param name: the staging branch.
        """
        ...

    def supersedes(self, value: Mapping[str, Any]) -> None:
        """Before the job: the successful publication this attempt will replace (a deliberate clear),
        so that monitoring does not call it abandoned.

        :param value: ``{"output_ref", "try_number"}``.
        """
        ...

    def evidence(self, value: Mapping[str, str]) -> None:
        """The run's evidence branches (``{branch: error class}``, marked or not), told by a try that
        keeps one (fail-closed) and by a try that succeeds, right before :meth:`published`: the
        cleaner keeps a branch whose marker could not be written when a succeeding try names it.

        :param value: the evidence branches.
        """
        ...

    def reporting(self, result: PublishResult) -> None:
        """Step 12, after the last fence check, while the run state's record of the outcome is being
        written: the outcome's details (the decision, its reason, the input and staged commits), so
        that telling them overlaps that write. Not yet the output ref a try stands behind: that
        waits for the record (:meth:`published`).

        :param result: what the attempt did.
        """
        ...

    def published(self, result: PublishResult) -> None:
        """Step 12: the outcome, once the run state recorded it (after :meth:`reporting`); the staging
        branch's delete may still be in flight.

        :param result: what the attempt did.
        """
        ...


class SilentReporter:
    """A reporter that tells nobody (the engine's default)."""

    def staging_created(self, name: str) -> None:
        """Ignore it. :param name: the staging branch."""

    def supersedes(self, value: Mapping[str, Any]) -> None:
        """Ignore it. :param value: the superseded publication."""

    def evidence(self, value: Mapping[str, str]) -> None:
        """Ignore it. :param value: the evidence branches."""

    def reporting(self, result: PublishResult) -> None:
        """Ignore it. :param result: the outcome."""

    def published(self, result: PublishResult) -> None:
        """Ignore it. :param result: the outcome."""


class Log(Protocol):
    """Where the engine logs (a ``logging.Logger``, Airflow's task logger...)."""

    def info(self, msg: str, /, *args: Any) -> Any:
        """Log at INFO."""
        ...

    def warning(self, msg: str, /, *args: Any) -> Any:
        """Log at WARNING."""
        ...
