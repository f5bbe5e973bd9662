"""Extra links from a task to what it wrote in lakeFS (:mod:`airflow_lakefence.links.lakefs`)."""

from airflow_lakefence import _moved

# ``airflow_lakefence.links`` was a module: its names, for one release.
__getattr__ = _moved.forward("airflow_lakefence.links", "airflow_lakefence.links.lakefs")
