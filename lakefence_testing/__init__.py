"""A lakeFS for DAG authors' test suites: a local lakeFS-compatible server, a fault-injecting proxy and
opt-in pytest fixtures. Shipped in the provider's distribution, installed by its ``testing`` extra
(``pip install 'airflow-provider-lakefence[testing]'``); nothing here imports Airflow.

- :mod:`lakefence_testing.lakefs_server`: the local lakeFS-compatible server (the demo's embedded
  lakeFS too).
- :mod:`lakefence_testing.proxy`: the fault-injecting proxy in front of any lakeFS, local or real;
  :mod:`lakefence_testing.controls`: its controls (request counts, latency, scripted faults, hooks).
- :mod:`lakefence_testing.pytest_plugin`: the opt-in pytest plugin (``-p
  lakefence_testing.pytest_plugin``); no entry point loads it into other pytest sessions.

The tools only this repository's own tests use (the real-lakeFS builder, the PostgreSQL launcher)
live in its ``tests/tools``, not in the package.
"""
