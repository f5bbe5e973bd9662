"""lakefs:// asset URIs, asset-event extras, link URLs and OpenLineage datasets."""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest

from airflow_lakefence.assets.lakefs import DEPRECATED_EXTRA_KEYS, create_asset, event_extra, parse_uri, sanitize_uri
from airflow_lakefence.lineage.openlineage import operator_lineage
from airflow_lakefence.links.lakefs import branch_url, commit_url, common_directory, objects_url


@pytest.mark.parametrize(
    ("uri", "normalised"),
    [
        ("lakefs://repo/main", "lakefs://repo/main"),
        ("lakefs://repo/main/", "lakefs://repo/main"),
        ("lakefs://repo/main/tables/daily/", "lakefs://repo/main/tables/daily"),
        ("lakefs://repo/main//tables///daily", "lakefs://repo/main/tables/daily"),
        ("lakefs://my-repo-01/feature_x/a%20b", "lakefs://my-repo-01/feature_x/a b"),
    ],
)
def test_valid_uris_are_normalised(uri: str, normalised: str) -> None:
    assert urllib.parse.urlunsplit(sanitize_uri(urllib.parse.urlsplit(uri))) == normalised


@pytest.mark.parametrize(
    "uri",
    [
        "lakefs://repo",
        "lakefs://repo/",
        "lakefs://Repo/main",
        "lakefs://ab/main",
        "lakefs://repo/bad branch/x",
        "lakefs://repo/-main",
        "lakefs://repo/main/../secret",
        "lakefs://repo/main?x=1",
        "lakefs://repo/main#frag",
        "lakefs://user:pw@repo/main",
        "lakefs://repo:8000/main",
        "s3://repo/main",
    ],
)
def test_invalid_uris_are_rejected(uri: str) -> None:
    with pytest.raises(ValueError):
        sanitize_uri(urllib.parse.urlsplit(uri))


def test_parse_and_create() -> None:
    assert parse_uri("lakefs://repo/main/tables/daily/") == ("repo", "main", "tables/daily")
    assert parse_uri("lakefs://repo/main") == ("repo", "main", "")
    asset = create_asset(repository="repo", branch="main", prefix="/tables/daily/")
    assert asset.uri == "lakefs://repo/main/tables/daily"
    with pytest.raises(ValueError):
        create_asset(repository="r", branch="main")


def _merged_extra(**prefixes: Any) -> dict[str, Any]:
    """The event extra of a merge into ``repo`` (output ``o…``, input ``i…``, staged ``s…``)."""
    return event_extra(
        repository="repo", output_ref="o" * 64, input_ref="i" * 64, staged_commit="s" * 64, decision="merge", **prefixes
    )


def test_event_extra_names_the_exact_commit() -> None:
    extra = _merged_extra(prefix="t/d")
    assert extra["commit_uri"] == f"lakefs://repo/{'o' * 64}/t/d"
    assert extra["input_ref"] == "i" * 64 and extra["decision"] == "merge"


def test_link_urls() -> None:
    assert commit_url("http://ui:8000", "repo", "abc") == "http://ui:8000/repositories/repo/commits/abc"
    assert (
        branch_url("http://ui:8000", "repo", "lakefence-x")
        == "http://ui:8000/repositories/repo/objects?ref=lakefence-x"
    )


def test_scoped_event_extra_names_the_write_set() -> None:
    extra = _merged_extra(prefix="t", output_prefixes=["t/date=1/", "u/date=1/"], input_prefixes=["d/"])
    assert extra["fence_scope"] == "prefixes" and extra["input_prefixes"] == ["d/"]
    assert extra["output_uris"] == [f"lakefs://repo/{'o' * 64}/t/date=1", f"lakefs://repo/{'o' * 64}/u/date=1"]
    assert extra["output_prefixes"] == ["t/date=1/", "u/date=1/"]
    for old, new in DEPRECATED_EXTRA_KEYS.items():
        assert extra[old] == extra[new]  # the keys of earlier releases, until the next one
    plain = event_extra(repository="r", output_ref="o", input_ref="i", staged_commit=None, decision="merge", prefix="")
    assert "fence_scope" not in plain and "output_uris" not in plain and "write_uris" not in plain


def test_output_link_opens_the_write_set() -> None:
    assert objects_url("http://ui", "repo", "abc", "t/date=1/") == "http://ui/repositories/repo/objects?ref=abc&path=t%2Fdate%3D1%2F"
    assert objects_url("http://ui", "repo", "abc") == "http://ui/repositories/repo/objects?ref=abc"
    assert common_directory(["t/date=1/"]) == "t/date=1/"
    assert common_directory(["tables/t/date=1/", "tables/u/date=1/"]) == "tables/"
    assert common_directory(["a/", "b/"]) == "" and common_directory([]) == ""


def test_scoped_openlineage_inputs_are_the_read_set() -> None:
    pytest.importorskip("airflow.providers.openlineage")
    lineage = operator_lineage(
        endpoint="http://h",
        repository="repo",
        input_ref="c" * 64,
        input_commit="c" * 64,
        target_branch="main",
        output_prefixes=["t/date=1/"],
        output_commit="o" * 64,
        input_prefixes=["d/", "e/f/"],
    )
    assert [d.name for d in lineage.inputs] == [f"repo/{'c' * 64}/d", f"repo/{'c' * 64}/e/f"]
    assert [d.name for d in lineage.outputs] == ["repo/main/t/date=1"]
