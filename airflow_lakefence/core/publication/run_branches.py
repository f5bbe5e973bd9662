"""A run branch: one lakeFS branch per DAG run (and map index), made once from the run's pinned input.

The run's tasks publish into it with the fenced protocol; one fenced step then publishes the run
branch's head into the target (docs/howto/branch-per-run.md). This module holds the pure parts:

* the name (:func:`run_branch_name`): the DAG author's rendered template, made valid for lakeFS
  (``^\\w[-\\w]*$``, bounded) and unique to the run by a hash of ``(dag_id, run_id, map_index)``;
* the record a try keeps in the run state once the branch is known to be this run's
  (:data:`RECORD_KEY`), read back by later tries and clears;
* the one decision about a branch of that name that already exists (:func:`judge_existing`).

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_lakefence.core.names.staging_names import MAX_BRANCH_NAME_LENGTH, is_valid_branch_name
from airflow_lakefence.exceptions import InvalidInputError, RunBranchError

#: The run state key of the record "this run made run branch B from input I".
RECORD_KEY = "lakefence.run_branch"
#: The default template of a run branch name (rendered by Airflow, then made valid here).
DEFAULT_TEMPLATE = "run-{{ dag.dag_id }}-{{ run_id }}"
#: The commit metadata key naming the run branch a run publication published (not ``lakefence.``:
#: that prefix is the protocol's own record).
RUN_BRANCH_METADATA_KEY = "lakefence_run_branch"
#: The staged-commit metadata key naming the run branch's HEAD the run publication squashed: where
#: the run's tasks' commits it published are read back (the publications view).
RUN_HEAD_METADATA_KEY = "lakefence_run_head"

_RUN_HASH_LENGTH = 12
_STEM_LENGTH = MAX_BRANCH_NAME_LENGTH - _RUN_HASH_LENGTH - 1
_NON_WORD_RE = re.compile(r"[^\w-]+", re.ASCII)


def run_hash(dag_id: str, run_id: str, map_index: int = -1) -> str:
    """The short, stable hash that makes a run branch name unique to its run and map index.

    :param dag_id: the DAG id.
    :param run_id: the run id.
    :param map_index: the map index, ``-1`` when not mapped.
    """
    value = json.dumps([dag_id, run_id, map_index]).encode()
    return hashlib.sha256(value).hexdigest()[:_RUN_HASH_LENGTH]


def run_branch_name(rendered: str, dag_id: str, run_id: str, map_index: int = -1) -> str:
    """The run branch's name: the rendered template made valid for lakeFS, then the run's hash.

    Characters lakeFS refuses become ``_``, the stem is cut to keep the name within
    :data:`~airflow_lakefence.core.names.staging_names.MAX_BRANCH_NAME_LENGTH`, and ``-<hash of the run>`` is
    appended, so two runs (or two map indexes) never share a branch whatever the template renders to.

    :param rendered: the rendered ``run_branch`` template (e.g. ``run-etl-manual__2026-01-01T00:00:00+00:00``).
    :param dag_id: the DAG id.
    :param run_id: the run id.
    :param map_index: the map index, ``-1`` when not mapped.
    :raises InvalidInputError: if the template renders to nothing usable.
    """
    if not isinstance(rendered, str):
        raise InvalidInputError(f"run_branch must render to a string, got {type(rendered).__name__}")
    stem = _NON_WORD_RE.sub("_", rendered.strip())[:_STEM_LENGTH].strip("-")
    if not stem:
        raise InvalidInputError(f"run_branch {rendered!r} renders to no usable branch name")
    name = f"{stem}-{run_hash(dag_id, run_id, map_index)}"
    if not is_valid_branch_name(name):  # a leading '-' or '_'-only stem: lakeFS needs a word first
        name = f"r{name}"[:MAX_BRANCH_NAME_LENGTH]
    return name


@dataclass(frozen=True)
class RunBranchRecord:
    """What the run state remembers about its run branch.

    :param branch: the run branch.
    :param input_commit: the commit it was made from (the run's pinned input).
    :param repository: the repository.
    """

    branch: str
    input_commit: str
    repository: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form kept in the run state."""
        return {"branch": self.branch, "input_commit": self.input_commit, "repository": self.repository}

    @classmethod
    def of(cls, value: Any) -> RunBranchRecord | None:
        """The record a run state value holds, ``None`` for anything else.

        :param value: what the run state returned.
        """
        if not isinstance(value, Mapping):
            return None
        fields = [value.get(k) for k in ("branch", "input_commit", "repository")]
        if not all(isinstance(f, str) and f for f in fields):
            return None
        return cls(*(str(f) for f in fields))


#: The commit metadata keys naming the DAG and run of a commit written by airflow-provider-lakefs's
#: operators (and by this package's operators of the same names).
PROVIDER_DAG_ID_KEY = "::lakefs::Airflow::dag_id"
PROVIDER_RUN_ID_KEY = "::lakefs::Airflow::dag_run_id"


#: The task id key airflow-provider-lakefs puts on its commits and merges.
PROVIDER_TASK_ID_KEY = "airflow_task_id"
#: The map index of the task instance that wrote a commit (this package's provider-compatible operators).
PROVIDER_MAP_INDEX_KEY = "::lakefs::Airflow::map_index"


def provider_metadata(dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> dict[str, str]:
    """The metadata this package's provider-compatible ``LakeFSCommitOperator`` and ``LakeFSMergeOperator``
    add to their commits: airflow-provider-lakefs's keys naming the DAG, the run and the task, and the
    map index and try number, so a later try (or a re-read after a lost answer) recognises the commit.

    :param dag_id: the DAG id.
    :param run_id: the run id.
    :param task_id: the task id.
    :param map_index: the map index.
    :param try_number: the try number.
    """
    return {
        PROVIDER_TASK_ID_KEY: task_id,
        PROVIDER_DAG_ID_KEY: dag_id,
        PROVIDER_RUN_ID_KEY: run_id,
        PROVIDER_MAP_INDEX_KEY: str(map_index),
        "::lakefs::Airflow::try_number": str(try_number),
    }


def written_by_task(metadata: Mapping[str, str], dag_id: str, run_id: str, task_id: str, map_index: int) -> bool:
    """Whether a commit carries :func:`provider_metadata` of this task instance (any try of it).

    :param metadata: the commit's metadata.
    :param dag_id: the DAG id.
    :param run_id: the run id.
    :param task_id: the task id.
    :param map_index: the map index.
    """
    keys = (PROVIDER_DAG_ID_KEY, PROVIDER_RUN_ID_KEY, PROVIDER_TASK_ID_KEY, PROVIDER_MAP_INDEX_KEY)
    return tuple(metadata.get(k) for k in keys) == (dag_id, run_id, task_id, str(map_index))


def written_by_run(metadata: Mapping[str, str], dag_id: str, run_id: str) -> bool:
    """Whether a commit's metadata names this run as its writer.

    A fenced task's commits carry the protocol's record (``lakefence.dag_id``, ``lakefence.run_id``);
    a raw commit or merge of the lakeFS provider's operators carries ``::lakefs::Airflow::dag_id`` and
    ``::lakefs::Airflow::dag_run_id``.

    :param metadata: the commit's metadata.
    :param dag_id: the run's DAG id.
    :param run_id: the run id.
    """
    ours = (metadata.get("lakefence.dag_id"), metadata.get("lakefence.run_id")) == (dag_id, run_id)
    return ours or (metadata.get(PROVIDER_DAG_ID_KEY), metadata.get(PROVIDER_RUN_ID_KEY)) == (dag_id, run_id)


def first_foreign(
    commits: Sequence[tuple[str, Mapping[str, str]]], input_commit: str, dag_id: str, run_id: str
) -> str | None:
    """The first commit above the run's input that this run did not write, in a branch's log.

    :param commits: ``(id, metadata)`` of the branch's log, newest first.
    :param input_commit: the run's input.
    :param dag_id: the run's DAG id.
    :param run_id: the run id.
    :return: that commit's id; ``input_commit`` itself when the log never reaches the input (the
        branch does not descend from it, or too much was written to tell); ``None`` when every
        commit above the input is the run's.
    """
    for commit_id, metadata in commits:
        if commit_id == input_commit:
            return None
        if not written_by_run(metadata, dag_id, run_id):
            return commit_id
    return input_commit


def judge_existing(branch: str, head: str, input_commit: str, *, recorded: bool, foreign: str | None) -> str:
    """Decide whether an existing branch of the run branch's name is this run's; say why.

    * HEAD is the run's input: made from the intended source (by an earlier try whose answer or
      record was lost, or by anyone: the same branch either way), nothing written into it yet.
    * The run state records that this run made it from the input, and every commit above the input
      is one this run wrote: the run's tasks have written into it (a cleared or retried creation step).
    * Anything else fails closed: another source, commits of another writer, or a branch this run
      never recorded making.

    :param branch: the branch name.
    :param head: its HEAD commit.
    :param input_commit: the run's pinned input.
    :param recorded: whether the run state records this run making it from ``input_commit``.
    :param foreign: the first commit above the input this run did not write (see :func:`first_foreign`),
        ``None`` when there is none; not asked when ``recorded`` is false.
    :return: why it is this run's branch.
    :raises RunBranchError: when it is not.
    """
    if head == input_commit:
        return f"run branch {branch!r} exists at the run's input {input_commit}: used as it is"
    if recorded and foreign is None:
        return f"run branch {branch!r} was made by this run from {input_commit} and holds its writes (HEAD {head})"
    if not recorded:
        why = "this run never recorded making it"
    elif foreign == input_commit:
        why = "its history does not lead to the run's input through this run's commits"
    else:
        why = f"its commit {foreign} was not written by this run"
    raise RunBranchError(
        f"a branch {branch!r} already exists at {head}, not at the run's input {input_commit}, and {why}: it is "
        "not this run's branch, so nothing was written into it. What to do: delete that branch if it is a "
        "leftover (nothing of this run is in it), or name the branch uniquely for the run (run_branch's "
        "template, or branch); then clear the task."
    )
