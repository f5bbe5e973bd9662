"""One name for the prefix sets everywhere: ``output_prefixes`` (the write set) and ``input_prefixes``
(the read set), in parameters, ``Scope``, commit metadata and asset extras; the old spellings keep
working for one release, with a DeprecationWarning where code reads them."""

from __future__ import annotations

import json
import warnings

import pytest

from airflow_lakefence.core.fences.scope import Scope, parse_scope
from airflow_lakefence.core.records import metadata


def test_the_scope_names_its_sets_as_the_operator_does() -> None:
    scope = parse_scope(["t/date=1/"], ["dims/"], "prefixes")
    assert scope is not None
    assert (scope.output_prefixes, scope.input_prefixes) == (("t/date=1/",), ("dims/",))
    with pytest.warns(DeprecationWarning, match="Scope.write is deprecated"):
        assert scope.write == scope.output_prefixes
    with pytest.warns(DeprecationWarning, match="Scope.read is deprecated"):
        assert scope.read == scope.input_prefixes
    assert Scope(output_prefixes=("a/",)).fenced == ("a/",)


def test_commits_name_their_output_prefixes_under_the_new_key_and_old_commits_still_read() -> None:
    written = metadata.output_prefixes_metadata(["t/date=1/"])
    assert written == {"lakefence.output_prefixes": json.dumps(["t/date=1/"])}
    assert metadata.output_prefixes_of(written) == ("t/date=1/",)
    # A staged commit or evidence marker an earlier release wrote.
    old = {"lakefence.write_prefixes": json.dumps(["t/date=2/"])}
    assert metadata.output_prefixes_of(old) == ("t/date=2/",)
    assert metadata.output_prefixes_of({**old, **written}) == ("t/date=1/",)  # the new key wins
    assert metadata.output_prefixes_of({"lakefence.write_prefixes": "not json"}) == ()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("WRITE_SET_KEY", "LEGACY_OUTPUT_PREFIXES_KEY"),
        ("write_set_metadata", "output_prefixes_metadata"),
        ("write_set_of", "output_prefixes_of"),
    ],
)
def test_the_old_names_of_the_metadata_helpers_still_import_with_a_warning(old: str, new: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(metadata, old)
    assert value is getattr(metadata, new)
    assert [w.category for w in caught] == [DeprecationWarning]
