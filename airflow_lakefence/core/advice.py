"""Fail-closed messages that say what happened *and what to do*.

The publish fence (:mod:`airflow_lakefence.core.fences.publish`) decides; this module explains a
``fail_closed`` decision for the person who reads the task log, from the same values: the target's
HEAD, the input commit and the attempt. Every message ends with ``What to do:``.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from airflow_lakefence.core.fences.publish import HeadState, Reason
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.records.metadata import decode_metadata

WHAT_TO_DO = "What to do:"
_PIN_DOC = "docs/output-correctness.md#the-input-pin"


def _who(key: PublicationKey) -> str:
    where = f"{key.dag_id}.{key.task_id} (run {key.run_id}"
    return where + (f", map index {key.map_index})" if key.map_index >= 0 else ")")


def fail_closed_message(
    code: Reason | None,
    head: HeadState,
    input_ref: str,
    attempt: AttemptId,
    target: str,
    *,
    before_job: bool = True,
    job_name: str = "job",
    kept_in: str | None = None,
) -> str:
    """Say why publishing into ``target`` is refused, and what the user can do: the message of the
    fence's refusal ``code`` (:func:`~airflow_lakefence.core.fences.publish.decide_publish` decided it; this
    only words it).

    :param code: the refusal's code (a fail-closed :class:`~airflow_lakefence.core.fences.publish.Reason`).
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
    key = record.attempt.key if record is not None else attempt.key
    facts = {
        "at": f"{target!r} is at {head.commit_id}",
        "who": _who(key),
        "input": input_ref,
        "recorded_input": record.input_ref if record is not None else "",
        "try": record.attempt.try_number if record is not None else "",
        "this_try": attempt.try_number,
        "target": repr(target),
        "first_parent": head.first_parent,
        "outcome": outcome,
        "what": WHAT_TO_DO,
        "pin": _PIN_DOC,
    }
    return _MESSAGES[code if code in _MESSAGES else Reason.MOVED].format(**facts)


#: One message per refusal code: what is true, then what to do.
_MESSAGES = {
    Reason.OTHER_MAPPED_INSTANCE: (
        "{at}, a publication of another mapped instance of this task, {who}. Mapped instances of one task cannot "
        "publish into one target branch: each builds on the same input, so the second finds the first's "
        "publication where its input should be. {outcome} {what} give each mapped instance its own target branch "
        "(for example one per map index) and merge them in a downstream task; or write every partition from one "
        "unmapped task; or chain separate tasks, each resolving its input after the previous one published (a "
        "1-slot pool per target alone does not help: the instances share one pinned input)."
    ),
    Reason.LATER_RUN: (
        "{at}, published by a later run of this task, {who}, on top of this run's input {input}. Replacing this "
        "run's publication would discard that later run's. {what} to re-run this day, re-run the later runs too, "
        "in order; or publish this run on top of the current HEAD: delete this task's input pin ({pin}) and clear "
        "the task."
    ),
    Reason.OTHER_TASK: (
        "{at}, a publication of another task, {who}, not a commit this attempt may replace. {what} keep one "
        "writer per target branch: put every task that publishes into {target} in the same 1-slot pool (and "
        "max_active_tis_per_dag=1) so that each resolves its input after the previous one published; then clear "
        "this task together with the task that resolves its input."
    ),
    Reason.OTHER_INPUT: (
        "{at}, a publication of this task instance built on input {recorded_input}, not on this attempt's pinned "
        "input {input}. {what} if the pinned input is the wrong one, delete the input pin ({pin}) and clear the "
        "task; otherwise repair {target} by hand (docs/abandoned-publications.md#repair)."
    ),
    Reason.NOT_EARLIER_TRY: (
        "{at}, published by try {try} of this very task instance, not by an earlier try than this one "
        "({this_try}): two processes of this task publish at once. {what} make sure the other process is gone "
        "(Airflow killed the stale one), then clear this task."
    ),
    Reason.FOREIGN_ON_INPUT: (
        "{at}, a commit without a lakefence record directly on top of the input {input}: someone wrote to "
        "{target} outside this task. {what} find out who wrote it (lakectl log); if it belongs there, publish on "
        "top of it: delete the input pin ({pin}) or clear the task that resolves the input, then clear this task; "
        "if it does not, revert it and clear this task."
    ),
    Reason.MOVED: (
        "{at}: {target} moved since the input {input} was pinned (HEAD is neither the input nor a commit directly "
        "on top of it; its first parent is {first_parent}). {what} to build on the current HEAD, delete the input "
        "pin ({pin}) or clear the task that resolves the input, then clear this task; to publish on the pinned "
        "input anyway, reset the target by hand first."
    ),
}
