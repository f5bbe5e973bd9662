"""Test helpers for DAG authors' test suites (the ``testing`` extra); nothing here imports Airflow.

- :mod:`airflow_lakefence.testing.lakefs_server`: a local lakeFS-compatible server (the demo's
  embedded lakeFS too).
- :mod:`airflow_lakefence.testing.proxy`: the fault-injecting proxy in front of any lakeFS (request
  counts, latency, scripted faults).
- :mod:`airflow_lakefence.testing.pytest_plugin`: the opt-in pytest plugin (``-p
  airflow_lakefence.testing.pytest_plugin``); no entry point loads it into other pytest sessions.

The tools only this repository's own tests use (the real-lakeFS builder, the PostgreSQL launcher)
live in its ``tests/tools``, not in the package.
"""
