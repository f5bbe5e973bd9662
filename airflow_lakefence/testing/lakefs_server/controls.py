"""Deprecated: :mod:`lakefence_testing.controls` (the very module, under its old name)."""

import sys

from airflow_lakefence.testing import moved

sys.modules[__name__] = moved(__name__, "lakefence_testing.controls")
