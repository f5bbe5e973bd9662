"""The demo of the README's UI path (``run_demo.py --ui``), started once per module, and a headless Chromium.

Chromium and its driver are Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them);
without them the browser test is skipped, with the reason, unless ``CI=true``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

DAG_ID = "lakefence_example_daily_counts"
#: Set to 1 to retake the docs' pictures of the publications view; otherwise a run leaves the tree as it was.
RETAKE_ENV = "LAKEFENCE_RETAKE_SCREENSHOTS"
#: Flags for a headless Chromium that talks to nothing but the pages it is sent to.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


def free_port() -> int:
    """A port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str, method: str = "GET", body: dict[str, Any] | None = None) -> Any:
    """One JSON request (the Airflow API of the demo needs no login)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


@dataclass
class Demo:
    """A running ``run_demo.py --ui``."""

    process: subprocess.Popen[bytes]
    home: Path
    output: Path
    port: int
    started: float
    #: When the UI listed the DAG (``time.monotonic()``).
    listed: float = 0.0

    @property
    def ui(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api(self) -> str:
        return f"{self.ui}/api/v2"

    def text(self) -> str:
        """What the demo printed so far."""
        return self.output.read_text(errors="replace")

    def lakefs_url(self) -> str:
        """The local lakeFS server's URL, as the demo printed it."""
        found = re.search(r"lakeFS \(local test server\): (http://[0-9.:]+)", self.text())
        assert found, self.text()
        return found.group(1)

    def wait_for(self, what: str, probe: Callable[[], Any], timeout: float) -> Any:
        """Poll ``probe`` until it returns a truthy value; fail if the demo died or the time passed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exited = self.process.poll()
            assert exited is None, f"run_demo.py --ui exited ({exited}) while waiting for {what}"
            try:
                result = probe()
            except OSError:
                result = None
            if result:
                return result
            time.sleep(1)  # polling a server's answer, bounded by the deadline
        raise AssertionError(f"timed out waiting for {what}\n{self.failure_report()}")

    def failure_report(self) -> str:
        """The end of the demo's output, of its components' output and of every task log."""
        parts = [self.text()[-3000:]]
        for log in sorted((self.home / "logs").rglob("*.log")):
            parts.append(f"--- {log.relative_to(self.home)}\n{log.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """``run_demo.py --ui`` on free ports, until the UI lists the DAG; stopped (SIGTERM, as Ctrl-C) after.

    Stopping it stops every Airflow component it started, and it exits cleanly.
    """
    base = tmp_path_factory.mktemp("demo")
    home, output = base / "home", base / "demo.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "LAKEFENCE_"))}
    command = [sys.executable, str(REPO / "dags_examples" / "run_demo.py"), "--ui", "--rows", "500"]
    port = free_port()
    with output.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--port", str(port), "--home", str(home)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    running = Demo(process, home, output, port, time.monotonic())
    try:
        running.wait_for("the UI to list the DAG", lambda: "The UI lists the DAG" in running.text(), 600)
        running.listed = time.monotonic()
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=180)
    assert process.returncode == 0, "a requested stop is a clean exit"
    # Every Airflow component runs in the demo's home (its cwd): none may outlive the demo.
    leftovers = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if os.readlink(proc / "cwd") == str(home.resolve()):
                leftovers.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
    assert not leftovers, leftovers
    with contextlib.suppress(OSError), urllib.request.urlopen(f"{running.api}/monitor/health", timeout=5):
        raise AssertionError("the Airflow API server still answers after the demo stopped")


def _executable(name: str, *fallbacks: str) -> str | None:
    return shutil.which(name) or next((f for f in fallbacks if os.access(f, os.X_OK)), None)


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium driven by Debian's chromedriver, with a fresh profile."""
    driver_path = _executable("chromedriver", "/usr/bin/chromedriver")
    binary = _executable("chromium", "/usr/bin/chromium")
    if driver_path is None or binary is None:
        message = "the browser test needs Debian's chromium and chromium-driver (apt-get install them)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
