"""What a task with Delta tables reports: the asset event's extra and the OpenLineage datasets."""

from __future__ import annotations

import pytest

from airflow_lakefence.assets.lakefs import event_extra
from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput
from airflow_lakefence.exceptions import DeltaOutputModeError, InvalidInputError

VERSIONS = {"tables/events/": 4, "tables/users/": None}


def extra(prefix: str) -> dict[str, object]:
    return event_extra(
        repository="repo",
        output_ref="o" * 64,
        input_ref="i" * 64,
        staged_commit="s" * 64,
        decision="merge",
        prefix=prefix,
        delta_versions=VERSIONS,
    )


def test_an_asset_that_is_a_table_names_it_and_its_version() -> None:
    got = extra("tables/events")
    assert (got["delta_table"], got["delta_version"]) == ("tables/events", 4)
    assert got["delta_versions"] == {"tables/events/": 4}
    assert got["commit_uri"] == f"lakefs://repo/{'o' * 64}/tables/events"


def test_an_asset_above_tables_lists_them_and_one_beside_them_none() -> None:
    assert extra("tables")["delta_versions"] == VERSIONS and "delta_table" not in extra("tables")
    assert extra("")["delta_versions"] == VERSIONS
    beside = extra("reports/events")
    assert not {"delta_versions", "delta_table", "delta_version"} & set(beside)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"write_mode": "workspace"}, InvalidInputError, "need write_mode='direct'"),
        ({"read_only": True}, InvalidInputError, "output_tables does not apply"),
        ({"output_prefixes": ["tables/"]}, DeltaOutputModeError, "contains the table"),
        ({"output_tables": ["tables/events", "tables/events/sub"]}, InvalidInputError, "overlap"),
    ],
)
def test_the_operator_refuses_what_can_never_work_at_parse_time(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    from airflow_lakefence.operators import FencedPythonPublishOperator

    args: dict[str, object] = {
        "task_id": "t",
        "python_callable": lambda locations: None,
        "repository": "repo",
        "target_branch": "main",
        "input_ref": "main",
        "write_mode": "direct",
        "output_tables": [DeltaTableOutput("tables/events")],
        **kwargs,
    }
    if args.get("read_only"):
        args.pop("write_mode")
    with pytest.raises(error, match=match):
        FencedPythonPublishOperator(**args)


def test_templated_roots_are_checked_in_the_try_not_at_parse_time() -> None:
    from airflow_lakefence.operators import FencedPythonPublishOperator

    op = FencedPythonPublishOperator(
        task_id="t",
        python_callable=lambda locations: None,
        repository="repo",
        target_branch="main",
        input_ref="main",
        write_mode="direct",
        output_prefixes=["{{ params.p }}"],
        output_tables=[DeltaTableOutput("tables/{{ params.t }}")],
    )
    assert "output_tables" in op.template_fields
