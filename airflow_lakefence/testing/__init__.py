"""Deprecated for one release: the old import paths of :mod:`lakefence_testing`.

The local lakeFS server, the fault-injecting proxy and the pytest plugin are the package
``lakefence_testing`` now (in this distribution, installed by the same ``testing`` extra). Each old
path below still imports, with a ``DeprecationWarning`` naming the new one:

- ``airflow_lakefence.testing.lakefs_server``: :mod:`lakefence_testing.lakefs_server`; its
  ``Controls``, ``Fault`` and ``RemoteControls``, and ``.controls``: :mod:`lakefence_testing.controls`.
- ``airflow_lakefence.testing.proxy``: :mod:`lakefence_testing.proxy`.
- ``airflow_lakefence.testing.pytest_plugin``: :mod:`lakefence_testing.pytest_plugin`.
- ``airflow_lakefence.testing.lakefs_server.pytest_plugin``: the new plugin plus the old fixture
  names (``lakefs_server``, ...), each with its new namesake's scope.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType


def moved(old: str, new: str) -> ModuleType:
    """Warn that the module ``old`` is now ``new``, and return ``new``.

    :param old: the deprecated module path (the caller's ``__name__``).
    :param new: where it lives now.
    """
    # stacklevel 3: past this function and the old module's body, at the import statement.
    warnings.warn(f"{old} is deprecated: import {new}", DeprecationWarning, stacklevel=3)
    return importlib.import_module(new)


warnings.warn("airflow_lakefence.testing is deprecated: import lakefence_testing", DeprecationWarning, stacklevel=2)
