"""``@task.lakefs_publish``: a TaskFlow function whose output is published into lakeFS, fenced.

.. code-block:: python

    @task.lakefs_publish(repository="lake", target_branch="main", output_prefixes=["tables/counts/"])
    def counts(lakefence):
        events = pandas.read_csv(lakefence.input_uri + "events.csv", storage_options=lakefence.storage_options)
        (lakefence.workspace / "tables/counts").mkdir(parents=True)
        events.groupby("kind").size().to_csv(lakefence.workspace / "tables/counts/counts.csv")

    counts()  # the input: main, pinned by the first try; or counts.override(input_ref=resolve.output)()

The function's ``lakefence`` argument is the attempt's
:class:`~airflow_lakefence.operators.fenced_python.LakeFenceAttempt`; the arguments of
:class:`~airflow_lakefence.operators.fenced_python.FencedPythonPublishOperator` go to the decorator.
The task's XCom ``return_value`` is the published ``output_ref``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_lakefence.exceptions import InvalidInputError
from airflow_lakefence.operators.fenced_python import ATTEMPT_ARG, FencedPythonPublishOperator


class _LakeFSPublishDecoratedOperator(DecoratedOperator, FencedPythonPublishOperator):
    """The operator behind ``@task.lakefs_publish``."""

    template_fields: Sequence[str] = FencedPythonPublishOperator.template_fields
    custom_operator_name: str = "@task.lakefs_publish"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Sequence[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        op_kwargs = dict(op_kwargs or {})
        # The attempt is only known at run time: a placeholder lets the signature check pass.
        if ATTEMPT_ARG in inspect.signature(python_callable).parameters:
            op_kwargs.setdefault(ATTEMPT_ARG, None)
        super().__init__(
            kwargs_to_upstream={"python_callable": python_callable, "op_args": op_args, "op_kwargs": op_kwargs},
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            **kwargs,
        )


def lakefs_publish_task(
    python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """Wrap a function into a fenced lakeFS publish task (``@task.lakefs_publish``).

    :param python_callable: the function (when used without parentheses).
    :param multiple_outputs: must stay unset: the task's return value is the published ``output_ref``.
    :param kwargs: the arguments of :class:`~airflow_lakefence.operators.fenced_python.FencedPythonPublishOperator`.
    :raises InvalidInputError: if ``multiple_outputs`` is requested.
    """
    if multiple_outputs:
        raise InvalidInputError(
            "@task.lakefs_publish returns the published output_ref: multiple_outputs is not supported"
        )
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=False,
        decorated_operator_class=_LakeFSPublishDecoratedOperator,
        **kwargs,
    )
