"""Staging branches kept as evidence, and the branches of earlier tries removed (step 3).

A fail-closed attempt keeps its staging branch: :meth:`Evidence.keep` records it in the run state
(with the attempt that kept it), tells the reporter and marks it on lakeFS with an empty marker
commit. A later try finds it through either record and never deletes it;
:meth:`Evidence.remove_earlier_branches` deletes everything else earlier tries left behind: their
staging branches and the temporary branches of their merge-only replacements.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import (
    parse_staging_branch_name,
    staging_branch_name,
    staging_branch_prefix,
)
from airflow_lakefence.core.ports import CommitInfo, LakeFSPort
from airflow_lakefence.core.publication.replacement import TEMP_SUFFIX
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.core.records.reporting import Log, Reporter
from airflow_lakefence.core.records.run_state import RecordedEvidence, RunStatePort, record_evidence, recorded_evidence
from airflow_lakefence.core.staging.cleaner import evidence_metadata, evidence_of
from airflow_lakefence.exceptions import LakeFenceError, LakeFSConflictError, PublishFenceError

#: Tries of the evidence marker commit.
MARKER_TRIES = 3


@dataclass
class Evidence:
    """The run's evidence branches as this try knows them, and the clean-up of earlier tries.

    :param lakefs: the lakeFS port.
    :param run_state: what the tries of the run share (the evidence list).
    :param repository: the repository.
    :param staging_prefix: the first part of staging branch names.
    :param log: where to log.
    :param marker_metadata: more metadata for the evidence marker (a scoped attempt's write set).
    :param redact: masks secrets in a text (the task log's masking); without it the run state keeps
        the error class only, never its message.
    """

    lakefs: LakeFSPort
    run_state: RunStatePort
    repository: str
    staging_prefix: str
    log: Log
    marker_metadata: Mapping[str, str] = field(default_factory=dict)
    redact: Callable[[str], str] | None = None
    # {branch: error class}; ``None`` when the run state could not be read (then never
    # reported: the cleaner would take a partial list for the whole).
    known: dict[str, str] | None = field(default_factory=dict, init=False)
    _kept: set[str] = field(default_factory=set, init=False)

    def kept(self, branch: str) -> bool:
        """Whether this try keeps ``branch`` as evidence.

        :param branch: a branch name.
        """
        return branch in self._kept

    def report(self, reporter: Reporter) -> None:
        """Tell the reporter the run's evidence branches, when known.

        :param reporter: the reporter.
        """
        if self.known is not None:
            reporter.evidence(dict(self.known))

    def keep(
        self,
        attempt: AttemptId,
        staging: str,
        input_commit: str,
        exc: PublishFenceError,
        reporter: Reporter,
        restore_from: str | None = None,
    ) -> None:
        """Record the kept branch in the run state and tell the reporter, then mark it on lakeFS.

        The cleaner keeps a branch that may be unmarked evidence unless its task instance succeeded
        without naming it. Never raises: the fail-closed error is what this try reports.

        :param attempt: this attempt.
        :param staging: its staging branch.
        :param input_commit: its input commit.
        :param exc: the fail-closed error.
        :param reporter: told the evidence list.
        :param restore_from: the staged commit, when the branch was deleted before the error was
            known (a merge's verification beside the report): the branch is made there again first.
        """
        error = type(exc).__name__
        self._kept.add(staging)
        if restore_from is not None:
            self._restore(staging, restore_from)
        try:
            # The message goes to lakeFS only redacted (the run state, never the marker commit).
            message = None if self.redact is None else self.redact(str(exc))
            kept = record_evidence(self.run_state, staging, error, attempt, input_commit, message)
            self.known = {name: entry.error for name, entry in kept.items()}
        except LakeFenceError as err:
            self.log.warning("Could not record staging branch %s as evidence in the run state: %s", staging, err)
            if self.known is not None:
                self.known[staging] = error
        try:
            self.report(reporter)
        except Exception as err:  # the fail-closed error is what this try reports
            self.log.warning("Could not report the run's evidence branches: %s", err)
        if not self.mark(attempt, staging, input_commit, error):
            self.log.warning(
                "Could not mark staging branch %s as evidence after %d tries; it is kept unmarked",
                staging,
                MARKER_TRIES,
            )

    def _restore(self, staging: str, commit: str) -> None:
        """Make a deleted staging branch again at ``commit`` (a branch still there is left as is)."""
        try:
            self.lakefs.create_branch(self.repository, staging, commit, hidden=True)
        except LakeFSConflictError:
            pass  # its delete failed: the branch is still there
        except LakeFenceError as err:
            self.log.warning("Could not make staging branch %s again at %s: %s", staging, commit, err)

    def mark(self, attempt: AttemptId, staging: str, input_commit: str, error: str) -> bool:
        """Commit the evidence marker on a kept branch; return whether it is there.

        The marker tells retries and the cleaner the branch is evidence, not a crash leftover; it
        names the error class only (a message could quote anything).

        :param attempt: the attempt that kept it.
        :param staging: the branch.
        :param input_commit: that attempt's input commit.
        :param error: the error class name.
        """
        metadata = {**evidence_metadata(attempt, input_commit, error), **self.marker_metadata}
        for _ in range(MARKER_TRIES):
            try:
                self.lakefs.commit(
                    self.repository, staging, f"lakefence: evidence of {error}", metadata, allow_empty=True
                )
                return True
            except LakeFenceError as err:
                self.log.warning("Marking staging branch %s as evidence failed: %s", staging, err)
                try:  # a lost answer may hide a marker that landed
                    if evidence_of(self.lakefs.get_commit(self.repository, staging).metadata):
                        return True
                except LakeFenceError:
                    pass
        return False

    def remove_earlier_branches(self, attempt: AttemptId, staging: str) -> None:
        """Step 3: delete the branches *earlier, dead* tries of this key left; never fail for it.

        Their staging branches, unless evidence (marked on lakeFS, or recorded in the run state and
        then re-marked), and the temporary branches of their merge-only replacements (which hold
        nothing the target does not). Only lower try numbers are touched: a newer try's branch is
        never ours to delete. One listing, which also returns the temporary branches (their names
        extend the staging branch's).

        :param attempt: this attempt.
        :param staging: its own staging branch.
        """
        # Try numbers only grow, so a first try has no predecessor to clean up: skip the listing.
        if attempt.try_number <= 1:
            return
        client, repo, prefix = self.lakefs, self.repository, self.staging_prefix
        try:
            recorded = recorded_evidence(self.run_state)
        except LakeFenceError as exc:
            # Without the evidence list no earlier branch is provably a leftover: leave them all.
            self.known = None
            self.log.warning("Could not read the run's evidence list: %s (earlier tries' branches left)", exc)
            return
        self.known = {name: entry.error for name, entry in recorded.items()}
        try:
            branches = client.list_branches(repo, staging_branch_prefix(attempt.key, prefix), show_hidden=True)
        except LakeFenceError as exc:
            self.log.warning("Could not list earlier tries' staging branches: %s (the cleaner will)", exc)
            return
        for name, _commit in branches:
            temporary = name.endswith(TEMP_SUFFIX)
            info = parse_staging_branch_name(name.removesuffix(TEMP_SUFFIX) if temporary else name, prefix)
            if name == staging or info is None or info.try_number >= attempt.try_number:
                continue
            try:
                if not temporary and self._is_evidence(name, recorded, attempt.key):
                    continue
                client.delete_branch(repo, name)
                what = "temporary branch of a merge-only replacement" if temporary else "staging branch"
                self.log.info("Removed %s %s of an earlier try", what, name)
            except LakeFenceError as exc:
                self.log.warning("Could not clean up branch %s: %s (the cleaner will)", name, exc)

    def _is_evidence(self, name: str, recorded: dict[str, RecordedEvidence], key: PublicationKey) -> bool:
        head = self.lakefs.get_commit(self.repository, name)
        if evidence_of(head.metadata):
            self.log.info("Keeping staging branch %s of an earlier try: evidence", name)
            return True
        if name not in recorded:
            return False
        self.log.info("Keeping staging branch %s of an earlier try: evidence (re-marking it)", name)
        kept_by = self._kept_by(recorded[name], head, key)
        if kept_by is None:
            self.log.warning("Staging branch %s: which attempt kept it is unknown; left unmarked", name)
        elif not self.mark(kept_by[0], name, kept_by[1], recorded[name].error):
            self.log.warning("Could not re-mark staging branch %s as evidence; left unmarked", name)
        return True

    def _kept_by(self, entry: RecordedEvidence, head: CommitInfo, key: PublicationKey) -> tuple[AttemptId, str] | None:
        """The attempt that kept an evidence branch, and its input commit.

        From the run state's entry (it names the attempt, which the branch name must match), else
        from the branch HEAD's record when that is the branch's own ``stage`` commit; never from any
        other record on HEAD: a branch kept before staging still points at its input commit, which
        may be another attempt's publication.
        """
        prefix = self.staging_prefix
        record = decode_metadata(head.metadata)
        own = record if record is not None and staging_branch_name(record.attempt, prefix) == entry.branch else None
        attempt = entry.attempt(key)
        if attempt is not None and staging_branch_name(attempt, prefix) == entry.branch:
            input_ref = entry.input_ref or (own.input_ref if own is not None else None)
            if input_ref:
                return attempt, input_ref
        return None if own is None else (own.attempt, own.input_ref)
