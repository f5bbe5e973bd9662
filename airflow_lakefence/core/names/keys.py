"""Publication keys and attempt identities (protocol: "Names")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublicationKey:
    """One logical output of one task: (dag_id, run_id, task_id, map_index).

    :param dag_id: the DAG id.
    :param run_id: the DAG run id.
    :param task_id: the task id.
    :param map_index: the map index, ``-1`` for an unmapped task.
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1


@dataclass(frozen=True)
class AttemptId:
    """One try of a publication: the key, the try number and the task-instance id.

    The task-instance id changes on every retry and clear (Airflow 3 mints a new one), so it
    distinguishes two tries even when a try number is reused.

    :param key: the publication key.
    :param try_number: Airflow's try number, from 1.
    :param ti_id: the task-instance id (a uuid string).
    """

    key: PublicationKey
    try_number: int
    ti_id: str
