"""What the publications view's tests share: a scenario, the API server app with users, and an auth
manager with users for the permission tests: Airflow's
SimpleAuthManager (users and roles from ``[core] simple_auth_manager_users``), where the user
``narrow`` (a viewer) may read every DAG but :data:`HIDDEN_DAG` - the per-DAG rule a real
deployment's auth manager (FAB, Keycloak...) expresses with its own permissions."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

try:
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
except ImportError:  # Airflow 2.11 has no auth managers of Airflow 3: its view's tests share the scenario only
    SimpleAuthManager = object

HIDDEN_DAG = "lf_py_retry"
NARROW_USER = "narrow"
PASSWORDS = {"admin": "admin-pw", "viewer": "viewer-pw", NARROW_USER: "narrow-pw"}


class PerDagSimpleAuthManager(SimpleAuthManager):
    """SimpleAuthManager, but :data:`NARROW_USER` has no access to :data:`HIDDEN_DAG`."""

    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        if user.get_name() == NARROW_USER and details is not None and details.id == HIDDEN_DAG:
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)

    def get_authorized_dag_ids(self, *, user: Any, method: Any = "GET", **kwargs: Any) -> set[str]:
        found = super().get_authorized_dag_ids(user=user, method=method, **kwargs)
        return {d for d in found if not (user.get_name() == NARROW_USER and d == HIDDEN_DAG)}


def deploy(*dags: Any) -> None:
    """Write ``dags`` to the DAG table as a DAG processor does, where ``dag.test()`` does not (Airflow
    2.11 and 3.0): the list of every DAG a user may read comes from that table. On 2.11 the DAGs are
    serialized too: the webserver reads them from there (the grid, the extra links).

    :param dags: the DAG objects.
    """
    from airflow.models.dag import DAG
    from airflow.models.serialized_dag import SerializedDagModel

    release = Version(importlib.metadata.version("apache-airflow")).release
    if release >= (3, 1):
        return
    if release < (3,):
        DAG.bulk_write_to_db(list(dags))
        for dag in dags:
            SerializedDagModel.write_dag(dag)
        return
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.serialization.serialized_objects import SerializedDAG

    DagBundlesManager().sync_bundles_to_db()
    # The scheduler's DAG, as the DAG processor hands it over (not the Task SDK's DAG a file defines).
    scheduler_dags = [SerializedDAG.deserialize_dag(SerializedDAG.serialize_dag(dag)) for dag in dags]
    DAG.bulk_write_to_db("dags-folder", None, scheduler_dags)


def publications_scenario(dags: Any, seeded: tuple[Any, str]) -> dict[str, Any]:
    """Every case of the view, on one repository's ``main`` under ``dag.test()``, in this order:

    * ``failed``: a try that failed closed (another writer committed during its job; its staging
      branch kept as evidence, with the error's message in the run state);
    * ``merged``: a first-try merge;
    * ``replaced``: a worker killed after publishing (``abandoned[0]``), its retry replacing that
      publication;
    * ``run``: a run-branch publication (``lf_run_branch``: the run branch, its task ``write``
      publishing into it, the run's publication ``publish`` merged into ``main``);
    * ``died``: a try killed after publishing with no retry left (``lf_py_direct``): its abandoned
      publication (``died_head``) stays ``main``'s HEAD, where the sensor's probe finds it.
    """
    from airflow_lakefence import failpoints
    from tests.conftest import load_dag_module
    from tests.integration.helpers import die_after_publishing, foreign_commit_during_the_job, publish_conf, run_dag

    repo, _ = seeded
    deploy(dags.py_workspace_dag, dags.py_retry_dag)
    failed, error = foreign_commit_during_the_job(dags.py_workspace_dag, dags.FAILURES, seeded)
    failpoints.disarm_all()
    merged = run_dag(dags.py_workspace_dag, publish_conf(repo, "main", {"files": {"out/b.txt": "B"}}))
    assert merged.state == "success"
    abandoned = die_after_publishing(repo)
    replaced = run_dag(dags.py_retry_dag, publish_conf(repo, "main", {"files": {"out/c.txt": "C"}}))
    assert replaced.state == "success" and len(abandoned) == 1
    failpoints.disarm_all()
    rdags = load_dag_module("testdags/run_branch_dags.py")
    run = run_dag(rdags.run_dag, {"repository": repo.id, "files": {"run/r.txt": "R"}})
    assert run.state == "success"
    died_heads = die_after_publishing(repo)
    died = run_dag(dags.py_direct_dag, publish_conf(repo, "main", {"files": {"out/d.txt": "D"}}))
    assert died.state == "failed" and len(died_heads) == 1
    failpoints.disarm_all()
    return {
        "repo": repo,
        "failed": failed,
        "error": error,
        "merged": merged,
        "replaced": replaced,
        "abandoned": abandoned[0],
        "run": run,
        "died": died,
        "died_head": died_heads[0],
    }


def plugin_entry_point_installed() -> bool:
    """Whether the installed distribution declares the view's ``airflow.plugins`` entry point."""
    return any(
        e.value.startswith("airflow_lakefence.") for e in importlib.metadata.entry_points(group="airflow.plugins")
    )


def api_server_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The Airflow API server's app (``airflow.api_fastapi.app.create_app()``, the UI included) with
    users: ``admin``, ``viewer`` and ``narrow`` (a viewer without :data:`HIDDEN_DAG`)."""
    from airflow import plugins_manager, settings
    from airflow.api_fastapi import app as api_app

    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", f"{__name__}.PerDagSimpleAuthManager")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", f"admin:admin,viewer:viewer,{NARROW_USER}:viewer")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    # Airflow 3.0 puts an unset issuer into its tokens as an empty list, which PyJWT (2.10 and later)
    # refuses to encode: no login works there without one (3.1 and later leave the claim out).
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_ISSUER", "lakefence-tests")
    if not plugin_entry_point_installed():
        # An environment installed before the entry point existed: load the provider info's plugins.
        monkeypatch.setattr(settings, "LAZY_LOAD_PROVIDERS", False)
    for cached in ("_get_plugins", "_get_ui_plugins"):
        getattr(getattr(plugins_manager, cached, None), "cache_clear", lambda: None)()
    api_app.purge_cached_app()
    return api_app.create_app()
