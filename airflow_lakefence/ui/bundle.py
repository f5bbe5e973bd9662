"""The React view's bundle: the file the Airflow UI (3.1+) imports for the plugin's ``react_apps``.

It is built from ``airflow_lakefence/ui/www`` (``npm ci && npm run build``, Vite; React and its JSX
runtime come from the globals the host UI sets) into ``airflow_lakefence/ui/static/publications.js``,
committed and shipped in the wheel. The plugin's app serves it at
``{URL_PREFIX}/static/publications.<digest>.js``: the digest is the file's own SHA-256, so a new
release's bundle has a new URL and browsers may keep each one forever.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from fastapi import FastAPI, HTTPException, status
from fastapi.responses import FileResponse

from airflow_lakefence.ui import URL_PREFIX

#: The built bundle inside the package.
BUNDLE = Path(__file__).with_name("static") / "publications.js"
#: How long a browser may keep a bundle: its URL changes with its content.
IMMUTABLE = "public, max-age=31536000, immutable"


@lru_cache(maxsize=1)
def bundle_name() -> str | None:
    """``publications.<first 16 hex digits of its SHA-256>.js``, or ``None`` when the package has no
    bundle (a source tree where it was removed): the plugin then shows the server-rendered page."""
    try:
        content = BUNDLE.read_bytes()
    except FileNotFoundError:
        return None
    return f"publications.{hashlib.sha256(content).hexdigest()[:16]}.js"


def bundle_url() -> str | None:
    """The bundle's URL on the API server (an absolute path: the UI of Airflow 3.1 and 3.2 imports it
    as given, 3.3's resolves it against the page's base), or ``None`` without a bundle."""
    name = bundle_name()
    return None if name is None else f"{URL_PREFIX}/static/{name}"


def add_bundle_route(app: FastAPI) -> None:
    """Serve the bundle from ``app`` at ``/static/<bundle_name()>`` (public: it is code, not data).

    :param app: the plugin's app.
    """

    @app.get("/static/{name}", include_in_schema=False)
    def bundle(name: str) -> FileResponse:
        if name != bundle_name():
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such bundle")
        return FileResponse(BUNDLE, media_type="text/javascript", headers={"Cache-Control": IMMUTABLE})
