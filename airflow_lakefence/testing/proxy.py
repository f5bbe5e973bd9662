"""Deprecated: :mod:`lakefence_testing.proxy` (the very module, under its old name)."""

import sys
import warnings

from airflow_lakefence.testing import moved

if __name__ == "__main__":
    warnings.warn("python -m airflow_lakefence.testing.proxy is deprecated: python -m lakefence_testing.proxy",
                  DeprecationWarning, stacklevel=1)  # fmt: skip
    from lakefence_testing.proxy import main

    raise SystemExit(main())
sys.modules[__name__] = moved(__name__, "lakefence_testing.proxy")
