"""Opening a page of lakeFS's web UI in the browser tier, on either backend.

Real lakeFS is built here with its web UI (``tests/tools/real_lakefs.py``): a page asks for the
installation's communication preferences once (``/setup``) and then for a login (``/auth/login``)
before it draws. :func:`open_lakefs_page` answers both as an operator would (the preferences through
lakeFS's API, the login through the page's form) and returns the page's text once lakeFS has drawn
it. The local server draws the same routes without a login.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from typing import Any
from urllib.parse import urlsplit

import lakefs_sdk
from lakefs_sdk import CommPrefsInput

#: A business address: lakeFS refuses free and disposable mail domains and unknown top-level domains.
PREFERENCES_EMAIL = "ci@airflow-lakefence.org"


def _answer_preferences(endpoint: str, access_key_id: str, secret_access_key: str) -> None:
    config = lakefs_sdk.Configuration(host=f"{endpoint}/api/v1", username=access_key_id, password=secret_access_key)
    with lakefs_sdk.ApiClient(config) as api:
        internal = lakefs_sdk.InternalApi(api)
        if internal.get_setup_state().comm_prefs_missing:
            internal.setup_comm_prefs(
                CommPrefsInput(email=PREFERENCES_EMAIL, feature_updates=False, security_updates=False)
            )


def open_lakefs_page(
    chromium: Any,
    url: str,
    *,
    access_key_id: str,
    secret_access_key: str,
    expect: str,
    timeout: float = 30.0,
) -> str | None:
    """Open ``url`` of lakeFS's web UI and return the page's text once it shows ``expect``.

    :param chromium: the Selenium driver.
    :param url: a page of lakeFS's UI (what a link of the provider points at).
    :param access_key_id: the installation's access key (the login form's user name).
    :param secret_access_key: its secret (the form's password).
    :param expect: text the page shows once drawn (the UI draws after its API calls return).
    :param timeout: seconds to wait for it.
    :returns: the page's text; ``None`` where real lakeFS was built without its web UI (no npm outside
        CI: it answers "lakeFS UI Not Built"), after checking the tab reached ``url``.
    :raises AssertionError: if the page does not show ``expect`` in time, with what it shows; under CI
        also if lakeFS has no web UI.
    """
    from selenium.webdriver.common.by import By

    parts = urlsplit(url)
    _answer_preferences(f"{parts.scheme}://{parts.netloc}", access_key_id, secret_access_key)
    chromium.get(url)
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        if urlsplit(chromium.current_url).path == "/auth/login":
            fields = {f.get_attribute("name"): f for f in chromium.find_elements(By.TAG_NAME, "input")}
            if {"username", "password"} <= fields.keys():
                fields["username"].send_keys(access_key_id)
                fields["password"].send_keys(secret_access_key)
                chromium.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
                time.sleep(0.5)
                continue
        text = " ".join(chromium.find_element(By.TAG_NAME, "body").text.split())
        if expect in text:
            return text
        if "lakeFS UI Not Built" in text:
            assert not os.environ.get("CI"), "real lakeFS was built without its web UI (LAKEFENCE_LAKEFS_WEB_UI=0?)"
            assert urllib.parse.unquote(chromium.current_url) == urllib.parse.unquote(url)
            return None
        time.sleep(0.25)
    raise AssertionError(f"{url} did not show {expect!r} within {timeout:.0f} s; it shows: {text[:500]!r}")
