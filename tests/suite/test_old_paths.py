"""The last release's import paths still work for one release, each with a DeprecationWarning that
names the new path, and give the very objects of the new modules (a patch through either name is
seen by both). Checked in a fresh interpreter, where nothing was imported before.
"""

from __future__ import annotations

import json
import subprocess
import sys

from airflow_lakefence._moved import MOVED

#: Modules of the last release that are packages now: their names, through the package.
PACKAGES = {
    "airflow_lakefence.links": ("airflow_lakefence.links.lakefs", "LakeFSCommitLink"),
    "airflow_lakefence.assets": ("airflow_lakefence.assets.lakefs", "parse_uri"),
    "airflow_lakefence.lineage": ("airflow_lakefence.lineage.openlineage", "operator_lineage"),
    "airflow_lakefence.core.staging": ("airflow_lakefence.core.staging.stage", "StagingArea"),
}

PROBE = """
import importlib, json, sys, warnings
moved, packages = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for old, new in moved.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    deprecations = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    out[old] = {"same": module is importlib.import_module(new), "warnings": deprecations}
for old, (new, name) in packages.items():
    package = importlib.import_module(old)
    # Imported first: an import of Airflow inside the block would route warnings to logging.
    importlib.import_module(new)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(package, name)
    deprecations = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    out[old] = {"same": value is getattr(importlib.import_module(new), name), "warnings": deprecations}
print(json.dumps(out))
"""


def _probe(moved: dict[str, str], packages: dict[str, tuple[str, str]]) -> dict[str, dict[str, object]]:
    args = [sys.executable, "-c", PROBE, json.dumps(moved), json.dumps(packages)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_every_old_module_path_imports_the_new_module_with_a_deprecation_warning() -> None:
    result = _probe(MOVED, PACKAGES)
    assert set(result) == set(MOVED) | set(PACKAGES)
    for old, seen in result.items():
        new = MOVED.get(old) or PACKAGES[old][0]
        assert seen["same"] is True, old
        warned = seen["warnings"]
        assert isinstance(warned, list) and len(warned) == 1 and new in warned[0] and old in warned[0], (old, warned)


def test_a_patch_through_the_old_name_is_seen_through_the_new_one() -> None:
    probe = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "import airflow_lakefence.lakefs_client as old\n"
        "import airflow_lakefence.lakefs_adapter.client as new\n"
        "old.LakeFSClient = 'patched'\n"
        "print(new.LakeFSClient, old.__name__, old.__spec__.name)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    new = "airflow_lakefence.lakefs_adapter.client"
    assert out.split() == ["patched", new, new]


def test_the_probe_sees_a_path_that_does_not_warn() -> None:
    """The check can fail: a new path imports without a warning, and a name no module has fails."""
    result = _probe({"airflow_lakefence.core.engine": "airflow_lakefence.core.engine"}, {})
    assert result["airflow_lakefence.core.engine"]["warnings"] == []
    failed = subprocess.run(
        [sys.executable, "-c", "import airflow_lakefence.no_such_module"], capture_output=True, text=True
    )
    assert failed.returncode != 0 and "ModuleNotFoundError" in failed.stderr
