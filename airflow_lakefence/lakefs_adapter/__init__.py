"""The lakeFS adapter: the one place that talks to lakeFS.

- :mod:`~airflow_lakefence.lakefs_adapter.client`: ``LakeFSClient``, every lakeFS call the package
  makes (refs, commits, merges, objects), each through one error-translating ``_call``;
- :mod:`~airflow_lakefence.lakefs_adapter.errors`: lakeFS's answers translated into the package's
  exception tree, once;
- :mod:`~airflow_lakefence.lakefs_adapter.run_state_store`: the run state kept in lakeFS itself.
"""
