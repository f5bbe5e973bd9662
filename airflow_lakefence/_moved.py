"""The import paths of the last release, kept for one release with a :class:`DeprecationWarning`.

The package was arranged into rooms (docs/architecture.md): an old path such as
``airflow_lakefence.lakefs_client`` now names the module at its new place. A meta path finder
answers for the old names only, so nothing is imported until a caller asks for an old path, and
the module object is the same under both names (a patch through either one is seen by both).
Where an old module path is a package now (``airflow_lakefence.links``), the package forwards
its old names itself (:func:`forward`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

#: Old module path -> the module that holds its names now.
MOVED: dict[str, str] = {
    "airflow_lakefence.lakefs_client": "airflow_lakefence.lakefs_adapter.client",
    "airflow_lakefence.lakefs_objects": "airflow_lakefence.lakefs_adapter.client",
    "airflow_lakefence.lakefs_errors": "airflow_lakefence.lakefs_adapter.errors",
    "airflow_lakefence.run_state": "airflow_lakefence.lakefs_adapter.run_state_store",
    "airflow_lakefence.attempt": "airflow_lakefence.airflow_adapter.attempt_fence",
    "airflow_lakefence.task_instances": "airflow_lakefence.airflow_adapter.task_instances",
    "airflow_lakefence.spark_submit": "airflow_lakefence.spark.submit",
    "airflow_lakefence.delta": "airflow_lakefence.spark.delta",
    "airflow_lakefence.core.keys": "airflow_lakefence.core.names.keys",
    "airflow_lakefence.core.naming": "airflow_lakefence.core.names.staging_names",
    "airflow_lakefence.core.locations": "airflow_lakefence.core.names.locations",
    "airflow_lakefence.core.metadata": "airflow_lakefence.core.records.metadata",
    "airflow_lakefence.core.run_state": "airflow_lakefence.core.records.run_state",
    "airflow_lakefence.core.reporting": "airflow_lakefence.core.records.reporting",
    "airflow_lakefence.core.evidence": "airflow_lakefence.core.staging.evidence",
    "airflow_lakefence.core.cleanup": "airflow_lakefence.core.staging.cleaner",
    "airflow_lakefence.core.delta": "airflow_lakefence.core.staging.delta_tables",
    "airflow_lakefence.core.guard": "airflow_lakefence.core.fences.attempt",
    "airflow_lakefence.core.fence": "airflow_lakefence.core.fences.publish",
    "airflow_lakefence.core.scope": "airflow_lakefence.core.fences.scope",
    "airflow_lakefence.core.hardfence": "airflow_lakefence.core.fences.hard",
    "airflow_lakefence.core.hardfence_action": "airflow_lakefence.core.fences.hard_hooks",
    "airflow_lakefence.core.publish": "airflow_lakefence.core.publication.publisher",
    "airflow_lakefence.core.scoped_publish": "airflow_lakefence.core.publication.scoped_publisher",
    "airflow_lakefence.core.merging": "airflow_lakefence.core.publication.target_merge",
    "airflow_lakefence.core.merge_only": "airflow_lakefence.core.publication.replacement",
    "airflow_lakefence.core.abandoned": "airflow_lakefence.core.publication.abandonment",
    "airflow_lakefence.core.run_branch": "airflow_lakefence.core.publication.run_branches",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolve an old module path to the new module, warning once per import of the old name."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} is deprecated and will be removed in the next release: import {new} instead",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the old name's spec on the shared module: give it its own back,
        # so pickling, reload and ``python -m`` keep seeing the module where it lives.
        for old, spec in list(self._specs.items()):
            if spec is not None and spec.name == module.__name__:
                module.__spec__ = spec
                del self._specs[old]


def install() -> None:
    """Answer the old paths (idempotent: one finder per interpreter)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())


def forward(package: str, module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for a package that was a module: its old names, with a warning.

    :param package: the package's name (the old module path).
    :param module: the module inside it that holds the names now.
    :return: the ``__getattr__`` to assign in the package.
    """

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        target = importlib.import_module(module)
        try:
            value = getattr(target, name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        warnings.warn(
            f"{package}.{name} is deprecated and will be removed in the next release: "
            f"import it from {module} instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return value

    return __getattr__
