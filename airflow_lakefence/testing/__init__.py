"""Test helpers for airflow-lakefence users and for the project's own test suite.

Nothing under this package imports Airflow.
"""
