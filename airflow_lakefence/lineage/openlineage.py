"""OpenLineage datasets of a fenced publication (used when the openlineage provider is installed).

Datasets are named by repository, branch and prefix, which stay stable across runs; the exact
commits travel as the dataset version facet. The namespace is ``lakefs://<endpoint host>``.
A declared Delta table is a dataset of its own (``<repository>/<branch>/<table root>``) with the
storage facet ``storageLayer="delta"`` and its published Delta version as the tag ``delta.version``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any


def namespace(endpoint: str) -> str:
    """The OpenLineage namespace of a lakeFS installation.

    :param endpoint: the lakeFS endpoint URL.
    """
    parsed = urllib.parse.urlsplit(endpoint)
    return f"lakefs://{parsed.netloc or parsed.path}"


def _dataset(ns: str, name: str, version: str | None) -> Any:
    from openlineage.client.generated.base import Dataset, DatasetFacet
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet

    facets: dict[str, DatasetFacet] = {"version": DatasetVersionDatasetFacet(datasetVersion=version)} if version else {}
    return Dataset(namespace=ns, name=name, facets=facets)


def _table_dataset(ns: str, name: str, commit: str, delta_version: int | None) -> Any:
    from openlineage.client.generated.storage_dataset import StorageDatasetFacet
    from openlineage.client.generated.tags_dataset import TagsDatasetFacet, TagsDatasetFacetFields

    dataset = _dataset(ns, name, commit)
    dataset.facets["storage"] = StorageDatasetFacet(storageLayer="delta", fileFormat="parquet")
    if delta_version is not None:
        tag = TagsDatasetFacetFields(key="delta.version", value=str(delta_version), source="lakefence")
        dataset.facets["tags"] = TagsDatasetFacet(tags=[tag])
    return dataset


def operator_lineage(
    *,
    endpoint: str,
    repository: str,
    input_ref: str,
    input_commit: str | None,
    target_branch: str,
    output_prefixes: Sequence[str],
    output_commit: str | None,
    delta_versions: Mapping[str, int | None] | None = None,
    input_prefixes: Sequence[str] = (),
) -> Any:
    """Build the ``OperatorLineage`` of a fenced publication.

    A scoped publication declares its read set: one input dataset per read prefix
    (``<repository>/<input_ref>/<prefix>``) instead of the whole input ref; its outputs are its
    write set, one dataset per write prefix.

    :param endpoint: the lakeFS endpoint URL.
    :param repository: the repository.
    :param input_ref: the input ref as given (a branch, tag or commit id).
    :param input_commit: the resolved input commit, once known.
    :param target_branch: the target branch.
    :param output_prefixes: the declared output prefixes (the whole branch when empty).
    :param output_commit: the published commit; ``None`` when nothing was published (no outputs).
    :param delta_versions: the declared Delta tables' roots and their versions at ``output_commit``.
    :param input_prefixes: a scoped publication's read set (the whole input ref when empty).
    """
    from airflow.providers.openlineage.extractors import OperatorLineage

    ns = namespace(endpoint)
    inputs = [_dataset(ns, f"{repository}/{input_ref}/{p.strip('/')}", input_commit) for p in input_prefixes] or [
        _dataset(ns, f"{repository}/{input_ref}", input_commit)
    ]
    outputs = []
    if output_commit is not None:
        tables = dict(delta_versions or {})
        names = [f"{repository}/{target_branch}/{p.strip('/')}" for p in output_prefixes]
        if not names and not tables:
            names = [f"{repository}/{target_branch}"]
        outputs = [_dataset(ns, name, output_commit) for name in names]
        outputs += [
            _table_dataset(ns, f"{repository}/{target_branch}/{root.strip('/')}", output_commit, version)
            for root, version in tables.items()
        ]
    return OperatorLineage(inputs=inputs, outputs=outputs)
