"""What a publish strategy is handed: one attempt's staged output, ready for steps 10 and 11."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from airflow_lakefence.core.names.keys import AttemptId
from airflow_lakefence.core.ports import CommitInfo


class StagedOutput(NamedTuple):
    """One attempt's staged output and the record its publication carries.

    :param attempt: the attempt.
    :param staging: its staging branch.
    :param input_commit: the input commit it built on.
    :param staged: the staged commit.
    :param record: the publication's metadata (the ``publish`` record and the user's metadata).
    """

    attempt: AttemptId
    staging: str
    input_commit: str
    staged: CommitInfo
    record: Mapping[str, str]
