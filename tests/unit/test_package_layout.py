"""The package's rooms (docs/architecture.md): one basename per module, the top level kept to the
exception tree, the failpoints and the public entry points, and the test folders mirroring it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import airflow_lakefence

PACKAGE = Path(airflow_lakefence.__file__).parent
TESTS = Path(__file__).resolve().parents[1]
#: Airflow's convention: one ``lakefs.py`` per kind of thing (operators/, sensors/, hooks/, ...).
AIRFLOW_CONVENTION = {"__init__.py", "__main__.py", "lakefs.py"}
#: The last release's paths of the test helpers, kept for one release (they only redirect).
COMPAT = PACKAGE / "testing"


def _modules(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.py") if COMPAT not in p.parents]


def test_no_two_modules_share_a_basename() -> None:
    names = Counter(p.name for p in _modules(PACKAGE))
    twins = sorted(name for name, n in names.items() if n > 1 and name not in AIRFLOW_CONVENTION)
    assert twins == []


def test_the_top_level_holds_only_the_floor_and_the_entry_points() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "_moved.py", "exceptions.py", "failpoints.py", "provider_info.py"]


def test_every_unit_test_folder_names_a_room_of_the_package() -> None:
    unit = TESTS / "unit"
    folders = [p.relative_to(unit) for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    assert folders, "tests/unit has no room folders"
    missing = [str(f) for f in folders if not (PACKAGE / f).is_dir()]
    assert missing == []


def test_every_unit_test_module_names_a_module_of_its_room() -> None:
    unit = TESTS / "unit"
    strays = []
    for test in unit.rglob("test_*.py"):
        room = PACKAGE / test.parent.relative_to(unit)
        stem = test.stem.removeprefix("test_")
        if test.parent != unit and not any(stem.startswith(m.stem) for m in room.glob("*.py") if m.stem != "__init__"):
            if stem != "core_imports":  # the core's import rule, about the whole room
                strays.append(str(test.relative_to(TESTS)))
    assert strays == []
