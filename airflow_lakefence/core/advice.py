"""Fail-closed messages that say what happened *and what to do*.

The publish fence (:mod:`airflow_lakefence.core.fence`) decides; this module explains a
``fail_closed`` decision for the person who reads the task log, from the same values: the target's
HEAD, the input commit and the attempt. Every message ends with ``What to do:``.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from airflow_lakefence.core.fence import HeadState
from airflow_lakefence.core.keys import AttemptId, PublicationKey
from airflow_lakefence.core.metadata import decode_metadata

WHAT_TO_DO = "What to do:"
_PIN_DOC = "docs/output-correctness.md#the-input-pin"


def _who(key: PublicationKey) -> str:
    where = f"{key.dag_id}.{key.task_id} (run {key.run_id}"
    return where + (f", map index {key.map_index})" if key.map_index >= 0 else ")")


def fail_closed_message(
    head: HeadState,
    input_ref: str,
    attempt: AttemptId,
    target: str,
    *,
    before_job: bool = True,
    job_name: str = "job",
    kept_in: str | None = None,
) -> str:
    """Explain why publishing into ``target`` is refused, and what the user can do.

    :param head: the target's HEAD.
    :param input_ref: the (pinned) input commit of the attempt.
    :param attempt: this attempt.
    :param target: the target branch name.
    :param before_job: refused before the job ran (the check before the job); ``False``: by the
        publish fence, after the job ran.
    :param job_name: how the message names the job (``before_job=False``).
    :param kept_in: the staging branch keeping the job's output (``before_job=False``).
    """
    if before_job:
        outcome = "Nothing was run."
    else:
        kept = f", its output is kept in staging branch {kept_in!r}" if kept_in else ""
        outcome = f"The {job_name} ran; nothing was published{kept}."
    record = decode_metadata(head.metadata)
    mine = attempt.key
    at = f"{target!r} is at {head.commit_id}"
    if record is not None:
        key = record.attempt.key
        same_task = (key.dag_id, key.task_id) == (mine.dag_id, mine.task_id)
        if same_task and key.run_id == mine.run_id and key.map_index != mine.map_index:
            return (
                f"{at}, a publication of another mapped instance of this task, {_who(key)}. Mapped instances of "
                f"one task cannot publish into one target branch: each builds on the same input, so the second "
                f"finds the first's publication where its input should be. {outcome} {WHAT_TO_DO} give "
                "each mapped instance its own target branch (for example one per map index) and merge them in a "
                "downstream task; or write every partition from one unmapped task; or chain separate tasks, each "
                "resolving its input after the previous one published (a 1-slot pool per target alone does not "
                "help: the instances share one pinned input)."
            )
        if same_task and key.run_id != mine.run_id:
            return (
                f"{at}, published by a later run of this task, {_who(key)}, on top of this run's input "
                f"{input_ref}. Replacing this run's publication would discard that later run's. {WHAT_TO_DO} to "
                "re-run this day, re-run the later runs too, in order; or publish this run on top of the current "
                f"HEAD: delete this task's input pin ({_PIN_DOC}) and clear the task."
            )
        if not same_task:
            return (
                f"{at}, a publication of another task, {_who(key)}, not a commit this attempt may replace. "
                f"{WHAT_TO_DO} keep one writer per target branch: put every task that publishes into {target!r} "
                "in the same 1-slot pool (and max_active_tis_per_dag=1) so that each resolves its input after the "
                "previous one published; then clear this task together with the task that resolves its input."
            )
        if record.input_ref != input_ref:
            return (
                f"{at}, a publication of this task instance built on input {record.input_ref}, not on this "
                f"attempt's pinned input {input_ref}. {WHAT_TO_DO} if the pinned input is the wrong one, delete "
                f"the input pin ({_PIN_DOC}) and clear the task; otherwise repair {target!r} by hand "
                "(docs/abandoned-publications.md#repair)."
            )
        if record.attempt.try_number >= attempt.try_number:
            return (
                f"{at}, published by try {record.attempt.try_number} of this very task instance, not by an "
                f"earlier try than this one ({attempt.try_number}): two processes of this task publish at once. "
                f"{WHAT_TO_DO} make sure the other process is gone (Airflow killed the stale one), then clear this "
                "task."
            )
    if head.first_parent == input_ref and record is None:
        return (
            f"{at}, a commit without a lakefence record directly on top of the input {input_ref}: someone wrote "
            f"to {target!r} outside this task. {WHAT_TO_DO} find out who wrote it (lakectl log); if it belongs "
            f"there, publish on top of it: delete the input pin ({_PIN_DOC}) or clear the task that resolves the "
            "input, then clear this task; if it does not, revert it and clear this task."
        )
    return (
        f"{at}: {target!r} moved since the input {input_ref} was pinned (HEAD is neither the input nor a "
        f"commit directly on top of it; its first parent is {head.first_parent}). {WHAT_TO_DO} to build on the "
        f"current HEAD, delete the input pin ({_PIN_DOC}) or clear the task that resolves the input, then clear "
        "this task; to publish on the pinned input anyway, reset the target by hand first."
    )
