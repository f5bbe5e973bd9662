"""Fixtures of the example-DAG tests: a repository of each test's own for the examples."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator

import lakefs
import pytest
from lakefs.exceptions import NotFoundException


def _forget_example_modules() -> None:
    for name in [m for m in sys.modules if m.startswith("lakefence_dag_examples_")]:
        del sys.modules[name]


@pytest.fixture
def example_repository(lakefence_client: lakefs.Client, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A repository name of the test's own for the example DAGs (``LAKEFENCE_EXAMPLE_REPOSITORY``, read
    when an example module is imported: the examples are imported afresh), deleted after the test.

    Not one ``example-repo`` deleted and created again by each test: lakeFS keeps a repository's record
    in a cache for 5 to 7 s (``graveler.repository_cache``), so a repository created again under a name
    just deleted is answered from the deleted one's record ("branch 'main' not found").
    """
    name = f"example-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("LAKEFENCE_EXAMPLE_REPOSITORY", name)
    _forget_example_modules()
    yield name
    _forget_example_modules()
    try:
        lakefs.Repository(name, client=lakefence_client).delete()
    except NotFoundException:
        pass
