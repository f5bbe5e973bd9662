"""``lakefs://`` Assets and the events a publication emits (:mod:`airflow_lakefence.assets.lakefs`)."""

from airflow_lakefence import _moved

# ``airflow_lakefence.assets`` was a module: its names, for one release.
__getattr__ = _moved.forward("airflow_lakefence.assets", "airflow_lakefence.assets.lakefs")
