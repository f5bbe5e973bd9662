"""Deprecated: ``python -m lakefence_testing.lakefs_server``."""

import warnings

from lakefence_testing.lakefs_server.__main__ import main

if __name__ == "__main__":
    warnings.warn("python -m airflow_lakefence.testing.lakefs_server is deprecated: "
                  "python -m lakefence_testing.lakefs_server", DeprecationWarning, stacklevel=1)  # fmt: skip
    main()
