"""An auth manager with users for the publications view's permission tests: Airflow's
SimpleAuthManager (users and roles from ``[core] simple_auth_manager_users``), where the user
``narrow`` (a viewer) may read every DAG but :data:`HIDDEN_DAG` - the per-DAG rule a real
deployment's auth manager (FAB, Keycloak...) expresses with its own permissions."""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

HIDDEN_DAG = "lf_py_retry"
NARROW_USER = "narrow"


class PerDagSimpleAuthManager(SimpleAuthManager):
    """SimpleAuthManager, but :data:`NARROW_USER` has no access to :data:`HIDDEN_DAG`."""

    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        if user.get_name() == NARROW_USER and details is not None and details.id == HIDDEN_DAG:
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)

    def get_authorized_dag_ids(self, *, user: Any, method: Any = "GET", **kwargs: Any) -> set[str]:
        found = super().get_authorized_dag_ids(user=user, method=method, **kwargs)
        return {d for d in found if not (user.get_name() == NARROW_USER and d == HIDDEN_DAG)}
