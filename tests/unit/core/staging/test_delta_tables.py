"""Delta tables as declared outputs: the pure checks of airflow_lakefence.core.staging.delta_tables."""

from __future__ import annotations

import pytest

from airflow_lakefence.core.staging.delta_tables import (
    DeltaTableOutput,
    PathChange,
    check_delta_changes,
    check_output_mode,
    classify_log_entry,
    find_table_roots,
    latest_version,
    normalise_table_roots,
)
from airflow_lakefence.exceptions import (
    DeltaLogError,
    DeltaOutputModeError,
    InvalidInputError,
    LakeFenceError,
    PublishFenceError,
)
from tests.integration.helpers import python_task

ROOT = "tables/events/"
LOG = ROOT + "_delta_log/"
UUID = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"


def v(n: int, suffix: str = ".json") -> str:
    return f"{LOG}{n:020d}{suffix}"


def data(name: str) -> str:
    return f"{ROOT}day=2026-11-03/part-{name}.snappy.parquet"


@pytest.mark.parametrize(
    ("name", "kind", "version"),
    [
        ("00000000000000000007.json", "commit", 7),
        ("00000000000000000010.checkpoint.parquet", "checkpoint", 10),
        ("00000000000000000010.checkpoint.0000000001.0000000002.parquet", "checkpoint", 10),
        (f"00000000000000000010.checkpoint.{UUID}.json", "checkpoint", 10),
        (f"00000000000000000010.checkpoint.{UUID}.parquet", "checkpoint", 10),
        ("00000000000000000007.crc", "checksum", 7),
        ("00000000000000000004.00000000000000000007.compacted.json", "compaction", 4),
        ("_last_checkpoint", "last_checkpoint", None),
        (f"_sidecars/{UUID}.parquet", "sidecar", None),
        ("7.json", "unknown", None),
        ("00000000000000000007.json.tmp", "unknown", None),
        ("_commits/00000000000000000007.uuid.json", "unknown", None),
    ],
)
def test_log_entries_are_classified_by_delta_s_names(name: str, kind: str, version: int | None) -> None:
    entry = classify_log_entry(name)
    assert (entry.kind, entry.version) == (kind, version)


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        ([], None),
        ([v(0)], 0),
        ([v(0), v(1), v(2), v(2, ".crc")], 2),
        ([v(0), v(10), v(10, ".checkpoint.parquet"), LOG + "_last_checkpoint", v(11)], 11),
        # Commits up to the checkpoint cleaned up: the checkpoint's version, not "no table".
        ([v(10, ".checkpoint.parquet"), LOG + "_last_checkpoint"], 10),
        ([v(10, ".checkpoint.parquet"), v(12)], 12),
        ([data("a")], None),
        # Another table's log is not this table's.
        (["tables/other/_delta_log/00000000000000000009.json", v(3)], 3),
    ],
)
def test_latest_version_is_the_highest_commit(paths: list[str], expected: int | None) -> None:
    assert latest_version(paths, DeltaTableOutput("tables/events")) == expected


def test_latest_version_of_names_relative_to_the_log() -> None:
    assert latest_version(["00000000000000000000.json", "00000000000000000001.json", "_last_checkpoint"]) == 1


def ok(changes: list[tuple[str, str]], input_version: int | None = 4, **kwargs: object) -> tuple[int, ...]:
    result = check_delta_changes(changes, [DeltaTableOutput("tables/events")], {ROOT: input_version}, **kwargs)  # type: ignore[arg-type]
    assert len(result) == 1
    return result[0].new_versions


@pytest.mark.parametrize(
    ("changes", "input_version", "expected"),
    [
        pytest.param([(v(5), "added"), (data("a"), "added")], 4, (5,), id="one append"),
        pytest.param([(v(5), "added"), (v(6), "added"), (v(7), "added"), (data("a"), "added")], 4, (5, 6, 7),
                     id="three commits"),
        pytest.param([(v(0), "added"), (data("a"), "added")], None, (0,), id="a new table starts at 0"),
        pytest.param(
            [(v(10), "added"), (v(10, ".checkpoint.parquet"), "added"), (LOG + "_last_checkpoint", "changed"),
             (v(10, ".crc"), "added"), (data("a"), "added")], 9, (10,), id="checkpoint and checksum",
        ),
        pytest.param([(LOG + "_last_checkpoint", "added"), (v(10), "added"), (v(10, ".checkpoint.parquet"), "added")],
                     9, (10,), id="first checkpoint"),
        pytest.param([(v(5), "added")], 4, (5,), id="a commit without data (a delete, metadata)"),
        pytest.param([], 4, (), id="nothing changed"),
        pytest.param([(f"{LOG}_sidecars/{UUID}.parquet", "added"), (v(5), "added")], 4, (5,), id="sidecar"),
        pytest.param(
            [(LOG, "added"), (LOG + "_staged_commits/", "added"), (v(0), "added"), (ROOT + "day=x/", "removed")],
            None,
            (0,),
            id="S3A directory markers",
        ),
        pytest.param([(LOG + "_staged_commits/", "added")], 4, (), id="markers alone"),
    ],
)
def test_contiguous_appends_are_accepted(
    changes: list[tuple[str, str]], input_version: int | None, expected: tuple[int, ...]
) -> None:
    assert ok(changes, input_version) == expected


@pytest.mark.parametrize(
    ("changes", "input_version", "message"),
    [
        pytest.param([(v(6), "added")], 4, "not contiguous on from 5", id="gap after the input"),
        pytest.param([(v(5), "added"), (v(7), "added")], 4, "not contiguous", id="gap between new commits"),
        pytest.param([(v(1), "added")], None, "not contiguous on from 0", id="new table not from 0"),
        pytest.param([(v(4), "added")], 4, "which the input already has", id="version the input has"),
        pytest.param([(v(3), "changed"), (v(5), "added")], 4, r"version 3\) was changed", id="earlier commit changed"),
        pytest.param([(v(3), "removed"), (v(5), "added")], 4, "delta.enableExpiredLogCleanup=false",
                     id="earlier commit removed"),
        pytest.param([(v(3, ".checkpoint.parquet"), "removed"), (v(5), "added")], 4, r"\(checkpoint\) was removed",
                     id="checkpoint removed"),
        pytest.param([(v(3, ".crc"), "changed"), (v(5), "added")], 4, r"\(checksum\) was rewritten",
                     id="crc rewritten"),
        pytest.param([(data("a"), "changed"), (v(5), "added")], 4, "rewritten in place", id="data file changed"),
        pytest.param([(data("a"), "removed"), (v(5), "added")], 4, "VACUUM", id="data file removed"),
        pytest.param([(data("a"), "added")], 4, "no Delta commit was", id="files without a commit"),
        pytest.param([(LOG + "00000000000000000005.json.tmp", "added"), (v(5), "added")], 4, "not a file of Delta",
                     id="unknown log file"),
        pytest.param([(LOG + "_commits/00000000000000000005.x.json", "added")], 4, "Coordinated",
                     id="coordinated commits"),
        pytest.param([(LOG + "_staged_commits/00000000000000000005.x.json", "added")], 4, "Coordinated",
                     id="catalog-managed staged commit"),
        pytest.param([(v(5), "added"), ("tables/other/x.parquet", "added")], 4, "outside the declared",
                     id="outside the roots"),
        pytest.param([(v(5), "conflict")], 4, "unexpected diff entry", id="unknown change type"),
    ],
)
def test_everything_else_fails_closed_naming_the_path(
    changes: list[tuple[str, str]], input_version: int | None, message: str
) -> None:
    with pytest.raises(DeltaLogError, match=message) as info:
        ok(changes, input_version, staging_branch="lakefence-x-t1-abc")
    assert "nothing was published" in str(info.value)
    assert info.value.staging_branch == "lakefence-x-t1-abc"
    assert isinstance(info.value, PublishFenceError) and isinstance(info.value, LakeFenceError)


def test_a_table_may_allow_vacuum() -> None:
    table = DeltaTableOutput("tables/events", allow_removed_data_files=True)
    [change] = check_delta_changes([(data("a"), "removed"), (v(5), "added")], [table], {ROOT: 4})
    assert change.new_versions == (5,) and change.published_version == 5


def test_changes_under_declared_file_prefixes_pass_and_each_table_is_checked_alone() -> None:
    tables = [DeltaTableOutput("tables/events"), DeltaTableOutput("tables/users/")]
    changes = [
        PathChange(v(5), "added"),
        PathChange("tables/users/_delta_log/00000000000000000000.json", "added"),
        PathChange("tables/users/part-0.parquet", "added"),
        PathChange("reports/daily.csv", "added"),
    ]
    result = check_delta_changes(changes, tables, {"tables/events": 4}, output_prefixes=["reports"])
    assert [(c.root, c.input_version, c.new_versions, c.data_files_added) for c in result] == [
        ("tables/events/", 4, (5,), 0),
        ("tables/users/", None, (0,), 1),
    ]
    assert result[1].published_version == 0
    assert check_delta_changes([], tables, {})[0].published_version is None


def test_the_outside_check_names_the_declarations() -> None:
    with pytest.raises(DeltaLogError, match=r"\['tables/events', 'reports/'\]: \['tables/eventsX/a'\]"):
        check_delta_changes([("tables/eventsX/a", "added")], ["tables/events"], {}, output_prefixes=["reports/"])


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ("tables/events", "not a string"),
        ([""], "non-empty"),
        ([DeltaTableOutput("t", format="iceberg")], "format must be one of"),
        (["tables/events", "tables/events/"], "overlap"),
        (["tables", "tables/events"], "overlap"),
        (["tables/events/_delta_log"], "_delta_log"),
        ([3], "DeltaTableOutput or a path"),
    ],
)
def test_declarations_are_validated(tables: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        normalise_table_roots(tables)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prefixes", "where"),
    [
        (["tables/events"], "is the table's root"),
        (["tables/events/"], "is the table's root"),
        (["tables/"], "contains the table"),
        (["tables/events/day=2026-11-03/"], "lies inside the table"),
    ],
)
def test_replace_on_a_table_root_is_refused_before_the_job(prefixes: list[str], where: str) -> None:
    with pytest.raises(DeltaOutputModeError, match=where) as info:
        check_output_mode("replace", prefixes, [DeltaTableOutput("tables/events")])
    text = str(info.value)
    assert "Delta log's earlier commits" in text and "Nothing was written" in text and "output_tables" in text
    assert isinstance(info.value, InvalidInputError)


@pytest.mark.parametrize(
    ("mode", "prefixes"),
    [("replace", ["tables/events2/", "reports/"]), ("replace", None), ("upsert", ["tables/events/"])],
)
def test_replace_elsewhere_and_upsert_are_fine(mode: str, prefixes: list[str] | None) -> None:
    check_output_mode(mode, prefixes, ["tables/events"])


def test_undeclared_tables_are_found_under_a_prefix() -> None:
    paths = [v(0), data("a"), "tables/other/file.csv", "_delta_log/00000000000000000000.json", "a/b/_delta_log/x"]
    assert find_table_roots(paths) == {ROOT, "", "a/b/"}


@pytest.mark.parametrize(
    ("prefixes", "write", "declared"),
    [
        (None, ("tables/a/", "tables/b/"), ()),
        (["reports/"], ("reports/", "tables/a/", "tables/b/"), ("reports/",)),
        # A declared prefix containing a table covers it (upsert: file-level replace there is refused).
        (["tables/"], ("tables/",), ("tables/",)),
    ],
)
def test_the_scoped_fence_s_write_set_holds_the_table_roots(
    prefixes: list[str] | None, write: tuple[str, ...], declared: tuple[str, ...]
) -> None:
    from airflow_lakefence.core.request import PublishRequest

    request = PublishRequest(
        repository="repo",
        target_branch="main",
        input_ref="main",
        write_mode="direct",
        output_prefixes=prefixes,
        output_mode="upsert",
        fence_scope="prefixes",
        output_tables=["tables/a", DeltaTableOutput("tables/b")],
    ).validated()
    assert request.scope is not None and request.scope.write == write
    # File-level output rules still see the declared prefixes only, never a table root.
    assert request.prefixes == declared


def test_the_branch_wide_fence_keeps_its_prefixes_and_no_scope() -> None:
    from airflow_lakefence.core.request import PublishRequest

    request = PublishRequest(
        repository="repo",
        target_branch="main",
        input_ref="main",
        write_mode="direct",
        output_prefixes=["reports/"],
        output_tables=["tables/a"],
    ).validated()
    assert request.scope is None and request.prefixes == ("reports/",)


def test_the_operator_accepts_a_scoped_task_whose_write_set_is_its_tables() -> None:
    task = python_task(write_mode="direct", fence_scope="prefixes", output_tables=["tables/a"])
    assert task.fence_scope == "prefixes"
    with pytest.raises(InvalidInputError, match="needs output_prefixes"):
        python_task(write_mode="direct", fence_scope="prefixes")
