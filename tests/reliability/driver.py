"""The attempt driver: one try of a fenced task, in its own process.

``python -m tests.reliability.driver SPEC.json`` runs the **real**
``FencedSparkPublishOperator.execute(context)`` with a context whose Airflow side (``ti``,
``task_state_store``) is the shared :class:`~tests.reliability.registry.AttemptRegistry`; lakeFS is
the real (local) server over HTTP, the Spark engine the fake spark-submit running
``tests/reliability/race_job.py``. Connections come from ``AIRFLOW_CONN_*`` environment variables.

The spec (JSON): ``registry`` (path), ``ti_id`` or ``await_try`` (``{dag_id, run_id, task_id,
try_number, delay}``: import everything, then wait until the scheduler mints that try and start
``delay`` seconds later, so a process's start-up time does not decide the interleaving),
``result`` (path of the outcome file), ``operator`` (keyword arguments of the operator:
repository, target_branch, input_ref, write_mode...), ``job`` (the race_job spec), ``delays``
(``{failpoint: seconds}``: a sleep at that boundary), ``waits`` (``{failpoint: [who, what, point]}``:
block at that boundary until the timeline shows the event, for interleavings chosen exactly; ``point``
is a failpoint name or a mapping of the event detail's fields, e.g. ``{"try_number": 2}``),
``who_prefix`` (prepended to ``try<N>`` on the timeline, when several keys share one registry) and
``lose_merge_answer`` (the first merge into the target lands on lakeFS, then the client reports it
unavailable: a lost answer, injected in the process so it works on real lakeFS too).

Every failpoint reached and every publish-fence decision is appended to the registry's timeline.
``LAKEFENCE_FAILPOINTS=<point>=exit`` in the environment crashes the process there (exit code 86,
no ``except``/``finally`` runs). Otherwise the outcome file gets ``{"status": "success", "output_ref"}``
or ``{"status": "error", "type", "types", "message", "staging_branch"}``; the exit code is 0 or 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FAKE_SPARK_DIR = REPO / "tests" / "fake_spark"
JOB = HERE / "race_job.py"


def _write(path: str, payload: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fd:
        json.dump(payload, fd, default=str)
    os.replace(tmp, path)


def preload() -> None:
    """Import everything an attempt needs (the fork server calls this once, before forking)."""
    import lakefs  # noqa: F401
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # noqa: F401
    from airflow.sdk import BaseHook  # noqa: F401
    from airflow.sdk.bases.operator import ExecutorSafeguard  # noqa: F401

    from airflow_lakefence.operators.fenced_spark import FencedSparkPublishOperator  # noqa: F401
    from tests.reliability.registry import AttemptRegistry  # noqa: F401


def run(spec: dict[str, Any]) -> int:
    """Run one attempt as ``spec`` says; return the exit code (0 success, 1 error)."""
    from airflow.sdk.bases.operator import ExecutorSafeguard

    from airflow_lakefence import failpoints
    from airflow_lakefence.core import engine as fenced_engine
    from airflow_lakefence.core.publication import publisher as fenced_publish
    from airflow_lakefence.operators.fenced_spark import FencedSparkPublishOperator
    from tests.reliability.registry import AttemptRegistry, StandInTaskInstance, StandInTaskStateStore

    registry = AttemptRegistry(spec["registry"])
    ti_id = spec.get("ti_id")
    if ti_id is None:
        wanted = spec["await_try"]
        deadline = time.monotonic() + float(wanted.get("timeout", 120))
        while (
            ti_id := registry.find_try(wanted["dag_id"], wanted["run_id"], wanted["task_id"], wanted["try_number"])
        ) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"try {wanted['try_number']} was never started")
            time.sleep(0.02)
        time.sleep(float(wanted.get("delay", 0)))
    row = registry.ti(ti_id)
    who = f"{spec.get('who_prefix', '')}try{row.try_number}"
    delays: dict[str, float] = spec.get("delays", {})
    waits: dict[str, list[Any]] = spec.get("waits", {})
    barrier: dict[str, Any] | None = spec.get("barrier")

    phase = {"publishing": False}

    def at_point(point: str) -> Any:
        def callback() -> None:
            registry.record(who, "point", {"point": point})
            if point == "after_fence_2":
                phase["publishing"] = True
            if point in waits:
                registry.wait_for(*waits[point])
                registry.record(who, "waited", {"point": point, "for": waits[point]})
            if barrier and point == barrier["point"]:
                # Released at one instant: every party has reached this point.
                registry.record(who, "barrier", {"point": point})
                for party in barrier["parties"]:
                    registry.wait_for(party, "barrier", point)
            if delays.get(point):
                time.sleep(delays[point])

        return callback

    for point in failpoints.POINTS:
        failpoints.arm(point, at_point(point))

    original_decide = fenced_engine.decide_publish

    def recording_decide(head: Any, input_ref: str, attempt: Any, changed: bool, staged: str) -> Any:
        decision = original_decide(head, input_ref, attempt, changed, staged)
        registry.record(
            who,
            "decision",
            {
                "head": head.commit_id,
                "action": decision.action.value,
                "output_ref": decision.output_ref,
                "early": not phase["publishing"],  # the pre-job check, which never acts
            },
        )
        return decision

    # Observed, not changed: the check before the job (engine) and the publish fence (publish).
    fenced_engine.decide_publish = recording_decide
    fenced_publish.decide_publish = recording_decide
    _observe_scoped(registry, who)
    if spec.get("lose_merge_answer"):
        _lose_first_merge_answer(registry, who, spec["operator"]["target_branch"])

    kwargs = dict(spec["operator"])
    job = json.dumps(spec.get("job", {}))
    operator = FencedSparkPublishOperator(
        task_id=row.task_id,
        conn_id=kwargs.pop("conn_id", "spark_local"),
        application=str(JOB),
        application_args=[f"spec={job}"],
        env_vars={
            "PATH": f"{FAKE_SPARK_DIR}{os.pathsep}{os.environ.get('PATH', '')}",
            "LAKEFENCE_TEST_PYTHON": sys.executable,
        },
        stale_grace_period=kwargs.pop("stale_grace_period", 0),
        **kwargs,
    )
    ti = StandInTaskInstance(registry, row)
    context = {"ti": ti, "task_instance": ti, "task_state_store": StandInTaskStateStore(registry, row.id)}
    registry.record(who, "start", {"ti_id": row.id, "pid": os.getpid()})
    try:
        # The sentinel is how Airflow's task runner calls execute (no "outside the Task Runner" guard).
        output_ref = operator.execute(
            context, **{"FencedSparkPublishOperator__sentinel": ExecutorSafeguard.sentinel_value}
        )
    except BaseException as exc:
        outcome = {
            "status": "error",
            "type": type(exc).__name__,
            "types": [cls.__name__ for cls in type(exc).__mro__],
            "message": str(exc),
            "staging_branch": getattr(exc, "staging_branch", None),
            "traceback": traceback.format_exc(),
        }
        registry.record(who, "end", {"status": "error", "type": type(exc).__name__})
        registry.finish(row.id, "failed")
        _write(spec["result"], {**outcome, "ti_id": row.id})
        return 1
    registry.record(who, "end", {"status": "success", "output_ref": output_ref})
    registry.finish(row.id, "success")
    _write(spec["result"], {"status": "success", "output_ref": output_ref, "ti_id": row.id})
    return 0


def _observe_scoped(registry: Any, who: str) -> None:
    """Record the scoped publish's decisions on the timeline (observed, not changed)."""
    from airflow_lakefence.core.publication.scoped_publisher import ScopedPublish

    original_decide = ScopedPublish._decide_and_act
    original_done = ScopedPublish._done
    seen: dict[str, str | None] = {"head": None}

    def decide_and_act(self: Any, head: Any, *args: Any, **kwargs: Any) -> Any:
        seen["head"] = head.commit_id
        return original_decide(self, head, *args, **kwargs)

    def done(self: Any, action: Any, reason: str, output: str, *args: Any, **kwargs: Any) -> Any:
        detail = {"head": seen["head"], "action": action.value, "output_ref": output, "early": False, "scoped": True}
        registry.record(who, "decision", detail)
        return original_done(self, action, reason, output, *args, **kwargs)

    ScopedPublish._decide_and_act = decide_and_act  # type: ignore[method-assign]
    ScopedPublish._done = done  # type: ignore[method-assign]


def _lose_first_merge_answer(registry: Any, who: str, target: str) -> None:
    """The first merge into ``target`` lands, then its answer is lost (the client sees lakeFS unavailable)."""
    from airflow_lakefence.exceptions import LakeFSUnavailableError
    from airflow_lakefence.lakefs_adapter.client import LakeFSClient

    original = LakeFSClient.merge
    armed = {"on": True}

    def merge(self: Any, repository: str, source_ref: str, destination: str, *args: Any, **kwargs: Any) -> str:
        result = original(self, repository, source_ref, destination, *args, **kwargs)
        if destination == target and armed["on"]:
            armed["on"] = False
            registry.record(who, "answer_lost", {"operation": "merge", "landed": result})
            raise LakeFSUnavailableError(
                "lakeFS merge: no response (answer lost on purpose)", status=None, operation="merge"
            )
        return result

    LakeFSClient.merge = merge  # type: ignore[method-assign]


def main() -> None:
    with open(sys.argv[1]) as fd:
        spec = json.load(fd)
    code = run(spec)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (Airflow's atexit hooks take seconds); the outcome file is written.
    os._exit(code)


if __name__ == "__main__":
    main()
