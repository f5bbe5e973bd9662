"""OpenLineage datasets of a publication (:mod:`airflow_lakefence.lineage.openlineage`)."""

from airflow_lakefence import _moved

# ``airflow_lakefence.lineage`` was a module: its names, for one release.
__getattr__ = _moved.forward("airflow_lakefence.lineage", "airflow_lakefence.lineage.openlineage")
