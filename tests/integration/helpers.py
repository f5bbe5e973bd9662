"""Shared helpers of the integration tests: run DAGs, read Airflow and lakeFS state."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import lakefs

from airflow_lakefence import failpoints

#: What every fenced task needs, for tests that build one only to see it accepted or refused.
SPARK_TASK: dict[str, Any] = {
    "task_id": "t",
    "application": "job.py",
    "repository": "repo",
    "target_branch": "main",
    "input_ref": "main",
}


def spark_task(**kwargs: Any) -> Any:
    """A ``FencedSparkPublishOperator`` of :data:`SPARK_TASK`; ``kwargs`` add and override."""
    from airflow_lakefence.operators import FencedSparkPublishOperator

    return FencedSparkPublishOperator(**{**SPARK_TASK, **kwargs})


def python_task(**kwargs: Any) -> Any:
    """A ``FencedPythonPublishOperator`` calling ``print``, else as :func:`spark_task`."""
    from airflow_lakefence.operators import FencedPythonPublishOperator

    fields = {k: v for k, v in SPARK_TASK.items() if k != "application"}
    return FencedPythonPublishOperator(**{**fields, "python_callable": print, **kwargs})


def commit_files(repo: lakefs.Repository, branch: str, files: dict[str, str], message: str) -> str:
    """Upload ``files`` to ``branch`` and commit; return the commit id."""
    ref = repo.branch(branch)
    for path, text in files.items():
        ref.object(path).upload(text.encode(), pre_sign=False)
    return ref.commit(message).get_commit().id


def publish_conf(
    repo: lakefs.Repository, input_ref: str, job: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """The run conf of the fenced test DAGs: run ``job`` (default: write ``out/a.txt``) on
    ``input_ref`` and publish into ``main``; ``extra`` adds operator arguments (``output_prefixes``...).
    """
    return {
        "repository": repo.id,
        "target": "main",
        "input_ref": input_ref,
        "job": {"files": {"out/a.txt": "A"}} if job is None else job,
        **extra,
    }


def publications_on_top_of(repo: lakefs.Repository, input_commit: str) -> list[str]:
    """Commit ids on main's first-parent line above ``input_commit``, newest first."""
    above = []
    for commit in repo.branch("main").log(first_parent=True):
        if commit.id == input_commit:
            return above
        above.append(commit.id)
    raise AssertionError("input commit is not on main's history")


def leave_branch_at(point: str, lakefence_controls: Any) -> None:
    """The attempt dies at ``point`` and its staging-branch delete fails: the branch is left behind."""

    def die() -> None:
        lakefence_controls.add_fault("deleteBranch", status=500)
        raise RuntimeError(f"worker died at {point}")

    failpoints.arm(point, die)


def die_after_publishing(
    repo: lakefs.Repository | None = None, *, times: int = 1, also: Callable[[], None] | None = None
) -> list[str]:
    """Arm ``after_verify`` so the first ``times`` tries die right after publishing (a worker death).

    :param repo: give it to learn main's HEAD as each dying try left it (its abandoned publication):
        one ``getCommit`` per dying try, so leave it out where lakeFS calls are counted.
    :param times: how many tries die.
    :param also: run by each dying try before it raises.
    :return: one entry per try that died, filled as they die: main's HEAD with ``repo``, else ``"died"``.
    """
    abandoned: list[str] = []

    def die() -> None:
        if len(abandoned) < times:
            abandoned.append(repo.branch("main").get_commit().id if repo is not None else "died")
            if also is not None:
                also()
            raise RuntimeError("worker died after publishing")

    failpoints.arm("after_verify", die)
    return abandoned


def read_text(repo: lakefs.Repository, ref: str, path: str) -> str:
    """Read one object as text."""
    with repo.ref(ref).object(path).reader(mode="r", pre_sign=False) as fd:
        return str(fd.read())


def staging_branches(repo: lakefs.Repository, prefix: str = "lakefence") -> list[str]:
    """Names of the staging branches left in ``repo`` (hidden ones included)."""
    return [b.id for b in repo.branches(prefix=prefix, show_hidden=True)]


def branches(repo: lakefs.Repository) -> list[str]:
    """Every branch of ``repo`` (hidden ones included) but the run-state branch (the runs' records)."""
    from airflow_lakefence.lakefs_adapter.run_state_store import RUN_STATE_BRANCH

    return [b.id for b in repo.branches(show_hidden=True) if b.id != RUN_STATE_BRANCH]


def run_dag(dag: Any, run_conf: dict[str, Any]) -> Any:
    """Run ``dag`` once under ``dag.test()`` and return the DagRun."""
    return dag.test(run_conf=run_conf)


def xcoms(dag_run: Any, task_id: str) -> dict[str, Any]:
    """All XComs of ``task_id`` in ``dag_run`` as {key: value}."""
    from airflow.utils.session import create_session

    try:
        from airflow.models.xcom import XComModel
    except ImportError:  # Airflow 2: the ORM class deserializes the value when it loads a row
        from airflow.models.xcom import XCom

        with create_session() as session:
            rows = session.query(XCom).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id).all()
            values = {row.key: row.value for row in rows}
        # Airflow 3 stores each extra link's URL as an XCom "_link_<class>" when the task ends; Airflow 2's
        # webserver asks the link itself: ask it the same way, under the same key.
        dag = getattr(dag_run, "dag", None)
        if dag is not None and dag.has_task(task_id):
            task, ti = dag.get_task(task_id), dag_run.get_task_instance(task_id)
            for link in task.operator_extra_links:
                values[f"_link_{type(link).__name__}"] = link.get_link(task, ti_key=ti.key)
        return values
    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id).all()
        return {row.key: XComModel.deserialize_value(row) for row in rows}


def ti_state(dag_run: Any, task_id: str) -> tuple[str | None, int]:
    """(state, try_number) of a task instance of ``dag_run``."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id).one()
        return (None if ti.state is None else str(ti.state), ti.try_number)


def update_ti(dag_id: str, task_id: str, *, state: str | None = None, clear: bool = False) -> None:
    """Play the UI on the running task instance: mark it ``state``, or clear it (a new try)."""
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session

    with create_session() as session:
        # Airflow 2's dag.test() runs tasks in test mode, which saves no ``running`` state: the row
        # of the running try is the one not finished yet.
        live = ["running"] if hasattr(TaskInstance, "id") else ["running", "queued", "scheduled"]
        rows = session.query(TaskInstance).filter_by(dag_id=dag_id, task_id=task_id)
        ti = rows.filter(TaskInstance.state.in_(live)).one()
        if clear:
            clear_task_instances([ti], session)
        else:
            ti.state = state


def only(lines: list[str], text: str) -> int:
    """The index of the one line holding ``text``."""
    (index,) = [i for i, line in enumerate(lines) if text in line]
    return index


def attempt_and_summary(
    lines: list[str], input_commit: str, values: dict[str, Any], summary_facts: tuple[str, ...]
) -> tuple[int, int]:
    """The indexes of a first try's attempt line and merge summary line in its task log, each checked
    for what it must say (the attempt: input commit, staging branch, target HEAD)."""
    attempt = only(lines, "lakefence attempt: try 1 ")
    for fact in (
        f"commit {input_commit}",
        f"staging branch {values['staging_branch']}",
        f"target main at {input_commit}",
    ):
        assert fact in lines[attempt], lines[attempt]
    summary = only(lines, "lakefence merge: output ref ")
    for fact in summary_facts:
        assert fact in lines[summary], lines[summary]
    return attempt, summary


def run_together(calls: Sequence[Callable[[], Any]], *, timeout: float = 300) -> list[Any]:
    """Run ``calls`` in threads released together; their results or exceptions, in order."""
    results: list[Any] = [RuntimeError("not run")] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        except BaseException as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return results


def foreign_commit_during_the_job(dag: Any, failures: dict[Any, BaseException], seeded: Any) -> tuple[Any, Any]:
    """Run ``dag`` (writing ``out/a.txt``) while another writer commits on ``main`` after the job; check
    that the try failed closed with ``main`` at that commit; return the run and the try's error."""
    from airflow_lakefence.exceptions import PublishFenceError

    repo, input_commit = seeded
    foreign: list[str] = []
    failpoints.arm("after_job", lambda: foreign.append(commit_files(repo, "main", {"other.txt": "x"}, "racer")))
    dr = run_dag(dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    error = failures[(dag.dag_id, 1)]
    assert type(error) is PublishFenceError
    assert repo.branch("main").get_commit().id == foreign[0]
    return dr, error


def run_existing(dag: Any, run_id: str) -> Any:
    """Run an existing DAG run (queued, or with cleared task instances) to its end with dag.test()'s
    loop, in this process: what the scheduler would do; return the refreshed DagRun."""
    import importlib.metadata
    import inspect

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState

    airflow_2 = importlib.metadata.version("apache-airflow").startswith("2.")
    if airflow_2:  # dag.test()'s loop of Airflow 2.11: the DAG object itself, the task run in the session
        from airflow.models.dag import _run_task as run_task_2

        def run(ti: Any, session: Any) -> None:
            ti.task = dag.task_dict[ti.task_id]
            run_task_2(ti=ti, inline_trigger=True, session=session)

        run_dag_object = dag
    else:
        from airflow.sdk.definitions.dag import _run_task

        try:
            from airflow.serialization.serialized_objects import DagSerialization
        except ImportError:  # Airflow 3.1 and 3.2
            from airflow.serialization.serialized_objects import SerializedDAG as DagSerialization

        takes_task = "task" in inspect.signature(_run_task).parameters

        def run(ti: Any, session: Any) -> None:
            if takes_task:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
            else:  # Airflow 3.0: the task rides on the task instance
                ti.task = dag.task_dict[ti.task_id]
                _run_task(ti=ti, run_triggerer=True)

        run_dag_object = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))

    with create_session() as session:
        dr = session.query(DagRun).filter_by(dag_id=dag.dag_id, run_id=run_id).one()
        dr.dag = run_dag_object
        dr.state = DagRunState.RUNNING
        session.commit()
        while dr.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = dr.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            for ti in [t for t in dr.get_task_instances(session=session) if t.state == TaskInstanceState.SCHEDULED]:
                try:
                    run(ti, session)
                except Exception:  # the failure is recorded by the DAG's callback, as under dag.test()
                    pass
            session.expire_all()
    with create_session() as session:
        dr = session.query(DagRun).filter_by(dag_id=dag.dag_id, run_id=run_id).one()
        session.expunge(dr)
        return dr
