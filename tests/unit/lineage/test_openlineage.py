"""OpenLineage datasets of a publication: the input commit and the published prefixes and tables, each
with its commit (and Delta version) as the dataset's version."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("airflow.providers.openlineage")

from airflow_lakefence.lineage.openlineage import namespace, operator_lineage


def lineage(**overrides: Any) -> Any:
    """The lineage of a publication of ``repo``'s ``main``, ``overrides`` replacing the defaults."""
    arguments: dict[str, Any] = {
        "endpoint": "http://127.0.0.1:8000",
        "repository": "repo",
        "input_ref": "main",
        "input_commit": "i" * 64,
        "target_branch": "main",
        "output_prefixes": ["tables/a/", "tables/b"],
        "output_commit": "o" * 64,
    }
    return operator_lineage(**{**arguments, **overrides})


def test_openlineage_datasets() -> None:
    assert namespace("https://lakefs.example.com:8443/api/v1") == "lakefs://lakefs.example.com:8443"
    got = lineage()
    assert [(d.namespace, d.name) for d in got.inputs] == [("lakefs://127.0.0.1:8000", "repo/main")]
    assert got.inputs[0].facets["version"].datasetVersion == "i" * 64
    assert [d.name for d in got.outputs] == ["repo/main/tables/a", "repo/main/tables/b"]
    assert {d.facets["version"].datasetVersion for d in got.outputs} == {"o" * 64}
    nothing = lineage(endpoint="http://h", input_commit=None, output_prefixes=[], output_commit=None)
    assert nothing.outputs == [] and nothing.inputs[0].facets == {}


def test_lineage_names_each_table_with_its_delta_version() -> None:
    got = lineage(output_prefixes=["reports/"], delta_versions={"tables/events/": 4})
    assert [d.name for d in got.outputs] == ["repo/main/reports", "repo/main/tables/events"]
    table = got.outputs[1]
    assert table.facets["version"].datasetVersion == "o" * 64
    assert table.facets["storage"].storageLayer == "delta"
    assert [(t.key, t.value) for t in table.facets["tags"].tags] == [("delta.version", "4")]
    # Tables only: no whole-branch dataset beside them.
    only = lineage(endpoint="http://h", output_prefixes=[], delta_versions={"tables/events/": 0})
    assert [d.name for d in only.outputs] == ["repo/main/tables/events"]
