"""What the test DAGs need to behave the same on every Airflow version the package supports.

Airflow 3.0 and 3.1 run ``dag.test()``'s tasks in-process (``run_task_in_process``) and call the
failure callbacks without ``context["exception"]`` (the forked task runner sets it): the test DAGs'
callbacks record the exception a try raised, so the in-process path gets it too. Test-only.
"""

from __future__ import annotations

from typing import Any


def keep_the_exception_in_failure_callbacks() -> None:
    """Make ``finalize`` put the try's error into the context before it calls the callbacks."""
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:  # Airflow 2: the context carries the exception already
        return
    original = task_runner.finalize
    if getattr(original, "keeps_exception", False):
        return

    def finalize(ti: Any, state: Any, context: Any, log: Any, error: BaseException | None = None) -> Any:
        if error is not None:
            context.setdefault("exception", error)
        return original(ti, state, context, log, error)

    finalize.keeps_exception = True  # type: ignore[attr-defined]
    task_runner.finalize = finalize


keep_the_exception_in_failure_callbacks()
