"""Without real lakeFS the differential test is skipped, and fails on CI: the plugin's rule.

Each case runs the fidelity test in a pytest of its own where real lakeFS cannot be had: an empty
binary cache and no ``go`` on ``PATH``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run_without_go(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "LAKEFENCE_LAKEFS_BINARY")}
    env.update({"PATH": str(tmp_path / "bin"), "LAKEFENCE_CACHE_DIR": str(tmp_path / "cache")})
    if ci is not None:
        env["CI"] = ci
    (tmp_path / "bin").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "tests/fidelity/test_fidelity.py", "--lakefs-backend=real",
         "-p", "no:cacheprovider", "-q", "-rs"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_skipped_with_the_reason_off_ci(tmp_path: Path) -> None:
    result = _run_without_go(tmp_path, None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "real lakeFS unavailable: the Go toolchain (`go`) is not on PATH" in result.stdout
    assert "2 skipped" in result.stdout


def test_fails_on_ci(tmp_path: Path) -> None:
    result = _run_without_go(tmp_path, "true")
    assert result.returncode != 0
    assert "real lakeFS is mandatory on CI: the Go toolchain (`go`) is not on PATH" in result.stdout
    assert "skipped" not in result.stdout
