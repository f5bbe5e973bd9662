"""The rule that assigns tests to lakeFS backends under ``--lakefs-backend=both`` (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import reference_only


@pytest.mark.parametrize(
    ("nodeid", "expected"),
    [
        # Protocol tiers: real lakeFS only...
        ("tests/reliability/test_bad_input.py::test_x", True),
        ("tests/integration/core/publication/test_replacement.py::test_x", True),
        ("tests/integration/cost/test_cost_contract.py::test_x", True),
        ("tests/integration/operators/test_fenced_spark_faults.py::test_other", True),
        # ...except the local smoke (whole modules, or one test by name).
        ("tests/integration/operators/test_fenced_spark.py::test_no_changes_is_a_noop", False),
        ("tests/integration/operators/test_fenced_spark_faults.py::test_merge_answer_lost_is_not_repeated", False),
        ("tests/integration/operators/test_fenced_spark_hard_fence.py::test_x", False),
        ("tests/examples/test_examples.py::test_x", False),
        # A module whose name only starts like a smoke module's is not in the smoke.
        ("tests/integration/test_fenced_publish_more.py::test_x", True),
        # Other tiers keep both backends (conformance) or their own rule.
        ("tests/lakefs_server/test_lakefs_objects.py::test_x", False),
        ("tests/unit/core/fences/test_publish.py::test_x", False),
    ],
)
def test_reference_only(nodeid: str, expected: bool) -> None:
    assert reference_only(nodeid) is expected
