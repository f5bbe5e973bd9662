"""Merge-only replacement and relocation of an abandoned publication (protected targets).

A protected lakeFS branch refuses hard resets (403) but accepts merges, and a merge runs the
pre-merge hooks (the hard fence, the users' own). So the replacement of an abandoned publication
*P* at the target's HEAD is built from merges, in a constant number of calls whatever the data
size or the chain's length:

1. ``createBranch`` *X* from *P* (hidden);
2. ``revertBranch`` on *X*: the commit whose revert (parent 1) turns *P*'s tree back into the
   input's (*P* itself, or what a chain link records; nothing when *P*'s tree already is the input's);
3. ``mergeIntoBranch`` the staged commit *C* into *X* (a replacement; a relocation skips it);
4. ``mergeIntoBranch`` *X* into the target naming *P* as the expected head (the hard fence's
   compare-and-swap), with the link metadata (:func:`~airflow_lakefence.core.hardfence.link_metadata`);
5. ``deleteBranch`` *X* (also after a failure: *X* holds nothing the target does not).

The target's tree then equals *C*'s (or the input's). Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_lakefence.core.fence import HeadState
from airflow_lakefence.core.hardfence import expected_head_metadata, link_metadata, unwind_ref
from airflow_lakefence.core.ports import LakeFSPort

#: The metadata key of the revert commit on the temporary branch: the publication it reverts.
REVERTS_KEY = "lakefence.reverts"
#: The metadata key of the merge of the staged commit into the temporary branch.
STAGES_KEY = "lakefence.merge_only_staged"
TEMP_SUFFIX = "-mo"


@dataclass(frozen=True)
class MergeOnlyOutcome:
    """What a merge-only replacement did.

    :param output_ref: the target's new HEAD (the final merge), or the HEAD itself when nothing was
        to do (a relocation onto a HEAD whose tree already is the input's).
    :param calls: the lakeFS calls made.
    :param unwind: what the new link records for the next replacement.
    """

    output_ref: str
    calls: int
    unwind: str | None


def temp_branch_name(staging_branch: str) -> str:
    """The temporary branch of a merge-only replacement: the staging branch's name plus a suffix.

    Staging names are unique per attempt and bounded well below lakeFS's limits, so this one is too.

    :param staging_branch: the attempt's staging branch.
    """
    return staging_branch + TEMP_SUFFIX


def replace_by_merge(
    port: LakeFSPort,
    *,
    repository: str,
    target: str,
    head: HeadState,
    input_commit: str,
    staged_commit: str,
    temp_branch: str,
    message: str,
    metadata: Mapping[str, str],
) -> MergeOnlyOutcome:
    """Replace (``staged_commit != input_commit``) or relocate the abandoned publication at ``head``.

    :param port: the lakeFS adapter.
    :param repository: the repository.
    :param target: the target branch.
    :param head: the target's HEAD as the fence decided on it: an abandoned publication of an earlier
        try of this key on ``input_commit`` (directly on the input, or a chain link).
    :param input_commit: the input commit.
    :param staged_commit: the staged commit (equal to ``input_commit`` when nothing changed).
    :param temp_branch: the temporary branch's name (see :func:`temp_branch_name`).
    :param message: the merge commits' message.
    :param metadata: the publication's metadata (the ``publish`` record and the user's metadata).
    :raises ValueError: if ``head`` is neither on the input nor a chain link.
    :raises LakeFSError: from the adapter; the final merge's 412 is the hard fence's (the target moved).
    """
    unwind = unwind_ref(head.commit_id, head.first_parent, head.metadata, input_commit)
    relocate = staged_commit == input_commit
    if relocate and unwind is None:
        # The HEAD's tree already is the input's: nothing to merge, and lakeFS refuses an empty merge.
        return MergeOnlyOutcome(head.commit_id, 0, None)
    calls = 0
    port.create_branch(repository, temp_branch, head.commit_id, hidden=True)
    calls += 1
    try:
        if unwind is not None:
            port.revert(
                repository,
                temp_branch,
                unwind,
                parent_number=1,
                message=f"lakefence: revert the abandoned publication {head.commit_id}",
                metadata={REVERTS_KEY: head.commit_id},
            )
            calls += 1
        source = temp_branch
        next_unwind: str | None = None
        if not relocate:
            # A commit whose first parent has the input's tree and whose tree is C's: the next
            # link reverts it to get back to the input.
            next_unwind = port.merge(repository, staged_commit, temp_branch, message, {STAGES_KEY: staged_commit})
            calls += 1
            source = next_unwind
        link = {**metadata, **expected_head_metadata(head.commit_id), **link_metadata(head.commit_id, next_unwind)}
        output = port.merge(repository, source, target, message, link)
        calls += 1
    finally:
        port.delete_branch(repository, temp_branch)
        calls += 1
    return MergeOnlyOutcome(output, calls, next_unwind)
