"""The newcomer's documents: names, links GitHub can follow, the example's needs, one entry per exception."""

from __future__ import annotations

import ast
import configparser
import re
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from airflow_lakefence import exceptions

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# Pages a newcomer reads on GitHub as well as on the docs site.
GITHUB_PAGES = [
    REPO / "README.md",
    DOCS / "getting-started.md",
    DOCS / "troubleshooting.md",
    DOCS / "howto" / "rerun-past-day.md",
    DOCS / "protocol-diagram.md",
]


def _setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    return parser


def _names(requirements: str) -> set[str]:
    lines = (line.strip() for line in requirements.splitlines())
    return {re.split(r"[<>=!~\[ ;]", line, maxsplit=1)[0].lower() for line in lines if line and line[0] != "#"}


def test_readme_and_docs_name_the_package_as_pip_does() -> None:
    name = _setup_cfg()["metadata"]["name"]
    assert name == "airflow-provider-lakefence"
    for page in (REPO / "README.md", DOCS / "index.md"):
        text = page.read_text()
        assert text.splitlines()[0] == f"# {name}", page
        assert f"pip install {name}" in text and "import airflow_lakefence" in text, page


@pytest.mark.parametrize("page", GITHUB_PAGES, ids=lambda p: p.name)
def test_pages_use_plain_markdown_links_that_resolve(page: Path) -> None:
    """No MyST roles ({doc}, {ref}: GitHub shows them raw); every relative link names an existing file."""
    text = page.read_text()
    assert not re.search(r"\{(doc|ref|any|py:\w+)\}`", text), "a MyST role GitHub would show raw"
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{page.name}: broken link {target}"


def test_getting_started_names_the_pool_the_unpause_and_the_test_button() -> None:
    text = (DOCS / "getting-started.md").read_text()
    assert "airflow pools set lakefs_<repository>_<branch> 1" in text
    assert "Switch the DAG on" in text and "Unpause the DAG" in text
    assert "test_connection = Enabled" in text
    assert 'pip install ".[examples]"' in text and "run_demo.py --ui" in text
    readme = (REPO / "README.md").read_text()
    assert 'pip install ".[examples]"' in readme and "python dags_examples/run_demo.py --ui" in readme


def test_troubleshooting_explains_every_exception_class() -> None:
    text = (DOCS / "troubleshooting.md").read_text()
    headings = re.findall(r"^### `(\w+)`$", text, flags=re.MULTILINE)
    names = list(exceptions.__all__)
    assert sorted(headings) == sorted(names)
    for name in names:
        section = text.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0]
        if name not in ("LakeFenceError", "LakeFSError"):
            assert "**What happened**" in section and "**What to do**" in section, name


def test_protocol_diagram_is_a_mermaid_fence_the_docs_build_renders() -> None:
    text = (DOCS / "protocol-diagram.md").read_text()
    diagram = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert diagram.startswith("flowchart TD\n")
    for step in range(1, 13):
        if step != 4 and step != 7:  # actions, not decisions, but named too
            assert f'"{step}. ' in diagram, step
    for error in (
        "InvalidInputError",
        "SparkJobError",
        "StaleAttemptError",
        "PublishBudgetError",
        "PublishFenceError",
        "PublishRaceError",
        "OutputPrefixError",
    ):
        assert error in diagram, error
    conf = (DOCS / "conf.py").read_text()
    assert '"sphinxcontrib.mermaid"' in conf and 'myst_fence_as_directive = ["mermaid"]' in conf
    assert "sphinxcontrib-mermaid" in (REPO / "tox.ini").read_text()
    index = (DOCS / "index.md").read_text()
    for page in ("protocol-diagram", "troubleshooting", "howto/rerun-past-day"):
        assert f"\n{page}\n" in index, page


def _third_party_imports(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    ours = {"airflow_lakefence", "lakefence_testing"}  # the distribution's own packages
    return {m for m in modules if m not in __import__("sys").stdlib_module_names and m not in ours}


def test_the_examples_need_only_the_package_and_its_examples_extra() -> None:
    """Every third-party import of dags_examples/ comes with `pip install airflow-provider-lakefence[examples]`."""
    cfg = _setup_cfg()
    allowed = _names(cfg["options"]["install_requires"]) | _names(cfg["options.extras_require"]["examples"])
    # Airflow's own distributions come with apache-airflow.
    allowed |= {"apache-airflow-core", "apache-airflow-task-sdk"} if "apache-airflow" in allowed else set()
    distributions = packages_distributions()
    files = sorted((REPO / "dags_examples").rglob("*.py"))
    assert len(files) >= 4
    for path in files:
        for module in _third_party_imports(path):
            owners = {d.lower() for d in distributions.get(module, [])}
            assert owners & allowed, f"{path.name} imports {module} ({owners}), not in install_requires or [examples]"
