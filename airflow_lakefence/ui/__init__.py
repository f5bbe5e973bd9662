"""The "lakeFS publications" view of the Airflow UI: a publication history read from lakeFS.

:mod:`~airflow_lakefence.ui.source` reads the task instances from Airflow's database,
:mod:`~airflow_lakefence.ui.reader` their history from lakeFS (bounded and cached),
:mod:`~airflow_lakefence.ui.app` serves it (JSON and HTML, behind Airflow's auth manager) and
:mod:`~airflow_lakefence.ui.plugin` registers it with Airflow 3.1+.
"""

#: Where the API server mounts the view's app.
URL_PREFIX = "/lakefence"
