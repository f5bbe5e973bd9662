"""Deprecated: the plugin's old place and fixture names, for one release.

Until now this module loaded into every pytest session through a ``pytest11`` entry point, with
fixtures named ``lakefs_backend``, ``lakefs_server``, ``lakefs_client``, ``lakefs_repo`` and
``lakefs_controls``. Nothing loads it any more: use ``-p lakefence_testing.pytest_plugin`` and the
``lakefence_*`` fixtures. A suite not yet moved can opt in here instead
(``-p airflow_lakefence.testing.lakefs_server.pytest_plugin``): it gets the plugin and the old
names, each warning when used and each with its new namesake's scope (a session-scoped fixture of
the suite's own may use ``lakefs_server`` as it always could).
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Literal

import pytest

warnings.warn(f"{__name__} is deprecated: -p lakefence_testing.pytest_plugin and its lakefence_* fixtures",
              DeprecationWarning, stacklevel=2)  # fmt: skip
pytest_plugins = ["lakefence_testing.pytest_plugin"]

#: The old names and the scope of their ``lakefence_`` namesakes (lakefence_testing.pytest_plugin).
SCOPES: dict[str, Literal["session", "function"]] = {
    "lakefs_backend": "session",
    "lakefs_server": "session",
    "lakefs_client": "function",
    "lakefs_repo": "function",
    "lakefs_controls": "function",
}


def _alias(old: str) -> Any:
    """The fixture ``old``: the value of its ``lakefence_`` namesake, with a deprecation warning.

    It names the new fixture as its parameter, so pytest sees the dependency (``lakefence_backend``
    parametrizes the test under ``--lakefs-backend=both``) as it would for the new name.
    """
    new = old.replace("lakefs_", "lakefence_", 1)

    def fixture(**requested: Any) -> Any:
        warnings.warn(
            f"the pytest fixture {old!r} is deprecated: use {new!r} (-p lakefence_testing.pytest_plugin)",
            DeprecationWarning,
            stacklevel=2,
        )
        return requested[new]

    fixture.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(new, inspect.Parameter.KEYWORD_ONLY)]
    )
    fixture.__name__ = fixture.__qualname__ = old
    fixture.__doc__ = f"Deprecated: ``{new}``."
    return pytest.fixture(name=old, scope=SCOPES[old])(fixture)


lakefs_backend = _alias("lakefs_backend")
lakefs_server = _alias("lakefs_server")
lakefs_client = _alias("lakefs_client")
lakefs_repo = _alias("lakefs_repo")
lakefs_controls = _alias("lakefs_controls")
