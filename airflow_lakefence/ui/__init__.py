"""The "lakeFS publications" view of the Airflow UI: a publication history read from lakeFS.

:mod:`~airflow_lakefence.ui.source` reads the task instances from Airflow's database,
:mod:`~airflow_lakefence.ui.reader` their history from lakeFS (bounded and cached),
:mod:`~airflow_lakefence.ui.page` reads and renders a page (no web framework),
:mod:`~airflow_lakefence.ui.app` serves it on Airflow 3 and :mod:`~airflow_lakefence.ui.fab` on
Airflow 2.11 (JSON and HTML, behind the auth manager), and :mod:`~airflow_lakefence.ui.plugin`
registers it.
"""

#: Where the API server mounts the view's app.
URL_PREFIX = "/lakefence"
