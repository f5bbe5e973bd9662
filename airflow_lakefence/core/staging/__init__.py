"""Staging: from the input commit to the staged commit (protocol steps 3 to 7), and after.

- :mod:`~airflow_lakefence.core.staging.stage`: the staging branch, the job, the staged commit;
- :mod:`~airflow_lakefence.core.staging.delta_tables`: the checks of declared Delta tables;
- :mod:`~airflow_lakefence.core.staging.evidence`: staging branches kept as evidence, and those of
  earlier tries removed;
- :mod:`~airflow_lakefence.core.staging.cleaner`: which staging branches the cleaner may delete.
"""

from airflow_lakefence import _moved

# ``airflow_lakefence.core.staging`` was a module: its names, for one release.
__getattr__ = _moved.forward("airflow_lakefence.core.staging", "airflow_lakefence.core.staging.stage")
