"""What a DAG author writes: the common case in a few arguments, the expert knobs in ``PublishOptions``."""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

import pytest

from airflow_lakefence.exceptions import InvalidInputError
from airflow_lakefence.operators import FencedPythonPublishOperator, FencedSparkPublishOperator, PublishOptions
from airflow_lakefence.operators.fenced_base import FencedPublishOperatorBase


def test_the_common_case_needs_the_application_where_to_publish_and_what_it_writes() -> None:
    task = FencedSparkPublishOperator(
        task_id="daily_counts",
        application="jobs/daily_counts.py",
        repository="lake",
        target_branch="main",
        output_prefixes=["tables/daily_counts/"],
    )
    assert task.input_ref == "main"  # the target, resolved by the run's first try and pinned for its retries
    assert task.max_active_tis_per_dag == 1  # one writer per target among this DAG's runs
    assert task.write_mode == "workspace" and task.options == PublishOptions()


def test_a_templated_target_is_the_default_input_too() -> None:
    task = FencedPythonPublishOperator(
        task_id="t", python_callable=print, repository="lake", target_branch="{{ dag_run.conf['target'] }}"
    )
    assert task.input_ref == "{{ dag_run.conf['target'] }}" and "input_ref" in task.template_fields


@pytest.mark.parametrize(
    ("kwargs", "limit"),
    [
        ({"max_active_tis_per_dag": 4}, 4),  # the author's value wins
        ({"fence_scope": "prefixes"}, None),  # many writers by design
        ({"read_only": True}, None),  # writes nothing
    ],
)
def test_the_one_writer_default_applies_to_the_branch_wide_fence_only(
    kwargs: dict[str, Any], limit: int | None
) -> None:
    writes = {} if kwargs.get("read_only") else {"output_prefixes": ["t/"]}
    task = FencedPythonPublishOperator(
        task_id="t", python_callable=print, repository="lake", target_branch="main", **writes, **kwargs
    )
    assert task.max_active_tis_per_dag == limit


def test_the_operator_names_fewer_parameters_than_before() -> None:
    """14 of its own (21 before the expert knobs moved into PublishOptions)."""
    own = [
        name
        for name, p in inspect.signature(FencedPublishOperatorBase.__init__).parameters.items()
        if name != "self" and p.kind is p.KEYWORD_ONLY
    ]
    assert own[:3] == ["repository", "target_branch", "output_prefixes"]
    assert len(own) == 14 and "options" in own
    assert {"hard_fence", "publish_budget", "workspace_check"}.isdisjoint(own)


def test_a_knob_passed_the_old_way_still_works_with_a_deprecation_warning() -> None:
    expected = r"options=PublishOptions\(hard_fence=..., publish_budget=...\)"
    with pytest.warns(DeprecationWarning, match=expected) as caught:
        task = FencedSparkPublishOperator(
            task_id="t",
            application="a.py",
            repository="lake",
            target_branch="main",
            hard_fence="require",
            publish_budget=timedelta(minutes=1),
        )
    assert task.options == PublishOptions(hard_fence="require", publish_budget=timedelta(minutes=1))
    assert caught[0].filename == __file__  # the warning points at the DAG file's line


def test_a_knob_given_both_ways_or_options_of_another_type_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="inside options"):
        FencedSparkPublishOperator(
            task_id="t",
            application="a.py",
            repository="lake",
            target_branch="main",
            hard_fence="auto",
            options=PublishOptions(),
        )
    with pytest.raises(InvalidInputError, match="options must be a PublishOptions"):
        FencedSparkPublishOperator(
            task_id="t", application="a.py", repository="lake", target_branch="main", options={"hard_fence": "auto"}
        )


def test_one_options_object_serves_many_tasks_unchanged() -> None:
    from airflow.sdk import DAG

    shared = PublishOptions(workspace_dir="/tmp/{{ run_id }}", hard_fence="auto")
    with DAG("shared_options", schedule=None):
        a = FencedPythonPublishOperator(
            task_id="a", python_callable=print, repository="lake", target_branch="main", options=shared
        )
    a.render_template_fields({"run_id": "r1"})
    assert a.workspace_dir == "/tmp/r1" and shared.workspace_dir == "/tmp/{{ run_id }}"


def test_the_old_spelling_works_in_partial_too() -> None:
    from airflow.sdk import DAG

    with DAG("old_partial", schedule=None):
        mapped = FencedPythonPublishOperator.partial(
            task_id="t", python_callable=print, repository="lake", target_branch="main", hard_fence="auto"
        ).expand(output_prefixes=[["a/"], ["b/"]])
    with pytest.warns(DeprecationWarning):
        task = mapped.unmap({"output_prefixes": ["a/"], "params": {}})  # what a mapped try runs
    assert task.options.hard_fence == "auto"
