"""The React view's built bundle (``publications.js``, from ``airflow_lakefence/ui/www``): a package so
that setuptools ships it as package data; :mod:`airflow_lakefence.ui.bundle` serves it."""
