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
   compare-and-swap), with the link metadata (:func:`~airflow_lakefence.core.fences.hard.link_metadata`);
5. ``deleteBranch`` *X* (also after a failure: *X* holds nothing the target does not).

The target's tree then equals *C*'s (or the input's). Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from airflow_lakefence.core.fences.hard import expected_head_metadata, link_metadata, unwind_ref
from airflow_lakefence.core.fences.publish import HeadState
from airflow_lakefence.core.ports import LakeFSPort
from airflow_lakefence.exceptions import LakeFenceError

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


#: Sends the final merge: ``(source ref, link metadata) -> merge commit id``.
Send = Callable[[str, Mapping[str, str]], str]


def replace_through_temp_branch(
    port: LakeFSPort,
    *,
    repository: str,
    temp_branch: str,
    head_commit: str,
    unwind: str | None,
    revert_message: str,
    revert_metadata: Mapping[str, str],
    input_commit: str,
    staged_commit: str,
    message: str,
    publish: Callable[[str, str | None], str],
    on_delete_error: Callable[[LakeFenceError], None] | None = None,
) -> MergeOnlyOutcome:
    """The one merge-only replacement both publish strategies use (steps 1 to 5 of the module).

    :param port: the lakeFS adapter.
    :param repository: the repository.
    :param temp_branch: the temporary branch's name (see :func:`temp_branch_name`).
    :param head_commit: the target's HEAD the replacement builds on.
    :param unwind: the commit whose revert (parent 1) takes the earlier publication back, ``None``
        when the target already holds the input's content there.
    :param revert_message: the revert commit's message.
    :param revert_metadata: the revert commit's metadata.
    :param input_commit: the input commit.
    :param staged_commit: the staged commit (equal to ``input_commit``: a relocation).
    :param message: the message of the staged commit's merge into the temporary branch.
    :param publish: merges ``(source, next_unwind)`` into the target its own way (its metadata, its
        verification) and returns the merge commit.
    :param on_delete_error: told when the temporary branch could not be deleted (``None``: raise).
    :return: what was done; nothing (``calls`` 0, the HEAD) for a relocation with nothing to revert.
    """
    relocate = staged_commit == input_commit
    if relocate and unwind is None:
        # The HEAD's tree already is the input's: nothing to merge, and lakeFS refuses an empty merge.
        return MergeOnlyOutcome(head_commit, 0, None)
    calls = 0
    port.create_branch(repository, temp_branch, head_commit, hidden=True)
    calls += 1
    try:
        if unwind is not None:
            port.revert(
                repository, temp_branch, unwind, parent_number=1, message=revert_message, metadata=revert_metadata
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
        output = publish(source, next_unwind)
        calls += 1
    finally:
        calls += 1
        try:
            port.delete_branch(repository, temp_branch)
        except LakeFenceError as exc:
            if on_delete_error is None:
                raise
            on_delete_error(exc)  # it holds nothing the target needs: the cleaner deletes it
    return MergeOnlyOutcome(output, calls, next_unwind)


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
    send: Send | None = None,
) -> MergeOnlyOutcome:
    """Replace (``staged_commit != input_commit``) or relocate the abandoned publication at ``head`` (branch-wide).

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
    :param send: sends the final merge (the publisher's, which reads lakeFS's refusals); ``None``:
        a plain merge into ``target``.
    :raises ValueError: if ``head`` is neither on the input nor a chain link.
    :raises LakeFSError: from the adapter; the final merge's 412 is the hard fence's (the target moved).
    """
    unwind = unwind_ref(head.commit_id, head.first_parent, head.metadata, input_commit)
    final: Send = send or (lambda source, link: port.merge(repository, source, target, message, link, allow_empty=True))

    def publish(source: str, next_unwind: str | None) -> str:
        link = {**metadata, **expected_head_metadata(head.commit_id), **link_metadata(head.commit_id, next_unwind)}
        return final(source, link)

    return replace_through_temp_branch(
        port,
        repository=repository,
        temp_branch=temp_branch,
        head_commit=head.commit_id,
        unwind=unwind,
        revert_message=f"lakefence: revert the abandoned publication {head.commit_id}",
        revert_metadata={REVERTS_KEY: head.commit_id},
        input_commit=input_commit,
        staged_commit=staged_commit,
        message=message,
        publish=publish,
    )
