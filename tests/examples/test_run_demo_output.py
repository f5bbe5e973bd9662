"""``run_demo.py`` sends its own output and its children's (Spark's) to the log file, then restores the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPT = """
import importlib.util, os, subprocess, sys
spec = importlib.util.spec_from_file_location("run_demo", sys.argv[1])
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)
print("before")
with demo._output_to(demo.Path(sys.argv[2])):
    print("from python")
    print("from python's stderr", file=sys.stderr)
    subprocess.run([sys.executable, "-c", "print('from a child')"], check=True)
print("after")
"""


def test_output_goes_to_the_log_file_and_comes_back(tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    log.write_text("earlier\n")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(REPO / "dags_examples" / "run_demo.py"), str(log)],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
    )
    earlier, *lines = log.read_text().splitlines()
    assert earlier == "earlier" and sorted(lines) == ["from a child", "from python", "from python's stderr"]
    assert result.stdout == "before\nafter\n" and result.stderr == ""
