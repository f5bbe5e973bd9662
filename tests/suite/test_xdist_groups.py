"""The suite's xdist groups hold: tests of one ``xdist_group`` run on one worker under ``--dist loadgroup``.

tests/conftest.py relies on it (the slow tiers one after the other on one worker, each module's fixtures
built once). pytest 9.2 with pytest-xdist 3.8 silently dropped every group (setup.cfg pins pytest below it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("xdist")


def test_a_groups_tests_run_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(
        textwrap.dedent(
            """
            import os, time
            import pytest

            @pytest.mark.xdist_group("together")
            @pytest.mark.parametrize("n", range(8))
            def test_member(n):
                time.sleep(0.05)
                with open(os.path.join(os.path.dirname(__file__), "workers.txt"), "a") as f:
                    f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
            """
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path / "test_grouped.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 8
    assert len(set(workers)) == 1, f"one group ran on workers {sorted(set(workers))}"
