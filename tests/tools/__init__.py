"""Tools only this repository's tests (and benchmarks) use; none of them ships in the package.

- :mod:`tests.tools.real_lakefs`: builds real lakeFS from its Go module and runs it (``.ci/run``
  builds it first: ``python -m tests.tools.real_lakefs --module tests/real_lakefs``).
- :mod:`tests.tools.postgres`: a throw-away PostgreSQL cluster (the Airflow stacks' metadata DB,
  real lakeFS's KV store on CI).

The local lakeFS-compatible server, the fault-injecting proxy and the opt-in pytest plugin ship with
the provider (:mod:`lakefence_testing`, the ``testing`` extra): DAG authors' tests use them too.
"""
