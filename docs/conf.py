"""Sphinx configuration of the airflow-lakefence docs (built by ``tox -e docs``, warnings are errors)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# autodoc imports the operators, which import Airflow: give it a throw-away home.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="lakefence-docs-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

import airflow_lakefence  # noqa: E402

project = "airflow-provider-lakefence"
author = "the airflow-lakefence authors"
release = version = airflow_lakefence.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.viewcode", "sphinxcontrib.mermaid"]
myst_enable_extensions = ["colon_fence"]
# ```mermaid fences (which GitHub renders too) become the mermaid directive: one diagram source for both.
myst_fence_as_directive = ["mermaid"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"airflow-provider-lakefence {release}"
autodoc_member_order = "bysource"
autodoc_inherit_docstrings = False
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_default_options = {"members": True, "show-inheritance": True}
# Type hints name classes of Airflow, lakefs_sdk and the standard library that this site does not
# document; a reference to them is not an error of ours.
nitpicky = False
suppress_warnings = ["myst.xref_missing"]
