"""The Airflow adapter: what the package asks Airflow, in one place.

- :mod:`~airflow_lakefence.airflow_adapter.attempt_fence`: "is this process still the current try
  of its task?", the attempt fence's question on every supported Airflow;
- :mod:`~airflow_lakefence.airflow_adapter.task_instances`: task instances, their tries and states.
"""
