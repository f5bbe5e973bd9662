"""What the Airflow 2.11 view's tests share: Airflow 2.11's webserver app (``airflow.www.app.create_app``)
with users whose roles are Flask AppBuilder's.

``viewer`` has Airflow's Viewer role (``can_read`` on ``DAGs``: every DAG); ``narrow`` has the Viewer
role's permissions but ``can_read`` on ``DAG:lf_py_workspace`` instead of ``DAGs``, so it may not
read :data:`~tests.integration.ui.publications_support.HIDDEN_DAG`.
"""

from __future__ import annotations

from typing import Any

from tests.integration.ui.publications_support import HIDDEN_DAG, NARROW_USER, PASSWORDS

VISIBLE_DAG = "lf_py_workspace"
NARROW_ROLE = "LakefenceNarrow"


def _add_users(app: Any) -> None:
    security = app.appbuilder.sm
    viewer = security.find_role("Viewer")
    narrow = security.find_role(NARROW_ROLE) or security.add_role(NARROW_ROLE)
    for permission in viewer.permissions:
        if (permission.action.name, permission.resource.name) != ("can_read", "DAGs"):
            security.add_permission_to_role(narrow, permission)
    security.add_permission_to_role(narrow, security.create_permission("can_read", f"DAG:{VISIBLE_DAG}"))
    assert f"DAG:{HIDDEN_DAG}" not in {p.resource.name for p in narrow.permissions}
    for name, role in (("admin", "Admin"), ("viewer", "Viewer"), (NARROW_USER, NARROW_ROLE)):
        if security.find_user(username=name) is None:
            role_object = security.find_role(role)
            added = security.add_user(name, name, "user", f"{name}@example.org", role_object, PASSWORDS[name])
            assert added, f"could not add the user {name}"


def webserver_app(csrf: bool = False) -> Any:
    """Airflow 2.11's webserver app (its plugins loaded from the entry points), with the users.

    :param csrf: keep the forms' CSRF check (a browser posts the token; the test client does not).
    """
    from airflow.www.app import create_app

    app = create_app(testing=True)
    app.config["WTF_CSRF_ENABLED"] = csrf
    with app.app_context():
        _add_users(app)
    return app


def login(client: Any, user: str) -> None:
    """Log ``client`` in through Flask AppBuilder's login form.

    :param client: a Flask test client of :func:`webserver_app`.
    :param user: ``admin``, ``viewer`` or ``narrow``.
    """
    answer = client.post("/login/", data={"username": user, "password": PASSWORDS[user]})
    assert answer.status_code == 302, answer.status_code
    assert "/login" not in answer.headers["Location"], "the login was refused"
