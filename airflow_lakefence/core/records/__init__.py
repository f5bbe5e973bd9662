"""Records: what an attempt writes down for the outside world and for later tries.

- :mod:`~airflow_lakefence.core.records.metadata`: the ``lakefence.*`` commit metadata;
- :mod:`~airflow_lakefence.core.records.run_state`: the run state (input pin, reported
  publication, evidence) and its port;
- :mod:`~airflow_lakefence.core.records.reporting`: the result an attempt reports, and to whom.
"""
