"""Extra links from a task to what it wrote in lakeFS, computed from that try's outcome or XCom.

Airflow computes extra links in the worker when a try ends and stores them per try, so a retry
links to its own commit and staging branch, never to an earlier try's. A fenced task that reported
an outcome links from it (the values it pushed as XCom), without reading them back; otherwise (a
failed try, a sensor) the links read the try's XCom.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any

from airflow.providers.common.compat.sdk import BaseOperatorLink

from airflow_lakefence.airflow_adapter.task_instances import OUTPUT_REF_KEY, rendered_field, xcom_value
from airflow_lakefence.hooks.lakefs import LakeFSHook


def commit_url(ui_base_url: str, repository: str, commit_id: str) -> str:
    """The lakeFS UI page of a commit.

    :param ui_base_url: the lakeFS UI base URL.
    :param repository: the repository.
    :param commit_id: the commit id.
    """
    return f"{ui_base_url}/repositories/{urllib.parse.quote(repository)}/commits/{urllib.parse.quote(commit_id)}"


def branch_url(ui_base_url: str, repository: str, branch: str) -> str:
    """The lakeFS UI object browser of a branch.

    :param ui_base_url: the lakeFS UI base URL.
    :param repository: the repository.
    :param branch: the branch.
    """
    query = urllib.parse.urlencode({"ref": branch})
    return f"{ui_base_url}/repositories/{urllib.parse.quote(repository)}/objects?{query}"


def objects_url(ui_base_url: str, repository: str, ref: str, path: str = "") -> str:
    """The lakeFS UI object browser of a ref, opened at a directory.

    :param ui_base_url: the lakeFS UI base URL.
    :param repository: the repository.
    :param ref: a commit id or branch.
    :param path: the directory (a path prefix ending with ``/``), ``""`` for the root.
    """
    query = urllib.parse.urlencode({"ref": ref, **({"path": path} if path else {})})
    return f"{ui_base_url}/repositories/{urllib.parse.quote(repository)}/objects?{query}"


def common_directory(prefixes: Sequence[str]) -> str:
    """The deepest directory holding every prefix (``""`` when they share none, or none is given).

    :param prefixes: normalised path prefixes (each ending with ``/``).
    """
    if not prefixes:
        return ""
    split = [p.rstrip("/").split("/") for p in prefixes]
    common: list[str] = []
    for segments in zip(*split, strict=False):
        if len(set(segments)) != 1:
            break
        common.append(segments[0])
    return "/".join(common) + "/" if common else ""


def _ui_base(operator: Any) -> str:
    """The lakeFS UI base URL of the operator's connection (its own hook when it has one)."""
    hook = getattr(operator, "lakefs_hook", None)
    if not isinstance(hook, LakeFSHook):
        hook = LakeFSHook(getattr(operator, "lakefs_conn_id", LakeFSHook.default_conn_name))
    return str(hook.settings["ui_base_url"])


def _reported(operator: Any, ti_key: Any, name: str) -> Any:
    """The value the try reported under XCom ``name``: from the outcome the operator kept in this
    process when it has one (the same value it pushed), else read from XCom."""
    outcome = getattr(operator, "_outcome", None)
    if outcome is not None and hasattr(outcome, name):
        return getattr(outcome, name)
    return xcom_value(ti_key, name)


def _repository(operator: Any, ti_key: Any) -> str | None:
    """The repository the try used: the operator's, or the try's rendered value when the operator's
    is still a template (Airflow 2 asks links with the task as declared)."""
    repository = getattr(operator, "repository", None)
    if isinstance(repository, str) and "{{" in repository:
        repository = rendered_field(ti_key, "repository")
    if not isinstance(repository, str) or not repository or "{{" in repository:
        return None
    return repository


class _LakeFSXComLink(BaseOperatorLink):
    """A link built from one XCom value of the try and the operator's repository and connection."""

    source_key = "return_value"

    def _build(self, ui_base_url: str, repository: str, value: str) -> str:
        raise NotImplementedError

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """Return the URL, or an empty string when the try recorded nothing to link to.

        :param operator: the task.
        :param ti_key: the task instance (key) whose XCom is read.
        """
        value = _reported(operator, ti_key, self.source_key)
        repository = _repository(operator, ti_key)
        if not value or not repository:
            return ""
        return self._build(_ui_base(operator), str(repository), str(value))


class LakeFSCommitLink(_LakeFSXComLink):
    """ "lakeFS commit": the commit the fenced task published (XCom ``output_ref``)."""

    name = "lakeFS commit"
    source_key = OUTPUT_REF_KEY

    def _build(self, ui_base_url: str, repository: str, value: str) -> str:
        return commit_url(ui_base_url, repository, value)


class LakeFSOutputLink(_LakeFSXComLink):
    """ "lakeFS output": the published commit's objects, opened at what the task wrote.

    The object browser at XCom ``output_ref``, in the directory of the declared output prefixes (the
    write set of a scoped publication; the deepest directory holding them all when there are
    several), where the commit page would show a publication among other writers' data.
    """

    name = "lakeFS output"
    source_key = OUTPUT_REF_KEY

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """Return the URL, or an empty string when the try published nothing.

        :param operator: the task (its rendered ``output_prefixes``).
        :param ti_key: the task instance (key) whose XCom is read.
        """
        value = _reported(operator, ti_key, self.source_key)
        repository = _repository(operator, ti_key)
        if not value or not repository:
            return ""
        prefixes = getattr(operator, "output_prefixes", None) or []
        if isinstance(prefixes, str) or not all(isinstance(p, str) for p in prefixes):
            prefixes = []  # not rendered (a link asked for outside the try): the root
        normalised = [p.strip().strip("/") + "/" for p in prefixes if p.strip().strip("/")]
        return objects_url(_ui_base(operator), str(repository), str(value), common_directory(normalised))


class LakeFSStagingLink(_LakeFSXComLink):
    """ "lakeFS staging": what the try staged.

    After a publish the staging branch is deleted, so the link shows the staged commit (XCom
    ``staged_commit``, which stays readable by id); for a try that failed closed, the staging branch
    it kept as evidence; nothing when the try kept no branch.
    """

    name = "lakeFS staging"
    source_key = "staging_branch"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """Return the staged commit's page, else the kept staging branch's, else an empty string.

        :param operator: the task.
        :param ti_key: the task instance (key) whose XCom is read.
        """
        staged = _reported(operator, ti_key, "staged_commit")
        repository = _repository(operator, ti_key)
        if staged and repository:
            return commit_url(_ui_base(operator), str(repository), str(staged))
        return super().get_link(operator, ti_key=ti_key)

    def _build(self, ui_base_url: str, repository: str, value: str) -> str:
        return branch_url(ui_base_url, repository, value)


class LakeFSSensorCommitLink(_LakeFSXComLink):
    """ "lakeFS commit" of a sensor: the commit it saw (its return value)."""

    name = "lakeFS commit"
    source_key = "return_value"

    def _build(self, ui_base_url: str, repository: str, value: str) -> str:
        return commit_url(ui_base_url, repository, value)


#: Where the "lakeFS publications" view is served (``airflow_lakefence.ui``; Airflow 2.11 and 3).
PUBLICATIONS_VIEW_PATH = "/lakefence/view"


def publications_url(base_url: str, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """The "lakeFS publications" view of one task instance (its history: every try, what each published).

    :param base_url: the Airflow API server's base URL (``[api] base_url``), ``""`` for a link
        relative to the UI's host.
    :param dag_id: the DAG.
    :param run_id: the run.
    :param task_id: the task.
    :param map_index: the map index.
    """
    query = urllib.parse.urlencode({"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index})
    return f"{base_url.rstrip('/')}{PUBLICATIONS_VIEW_PATH}?{query}"


class LakeFSPublicationsLink(BaseOperatorLink):
    """ "lakeFS publications": the task instance's publication history (every try, its decision,
    commits, what it replaced and what the abandoned-publication sensor says of it now), served by
    the provider's plugin: in the Airflow API server (Airflow 3), in the webserver (Airflow 2.11)."""

    name = "lakeFS publications"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        """Return the view's URL for the task instance of ``ti_key``.

        :param operator: the task.
        :param ti_key: the task instance (key).
        """
        import importlib.metadata

        from airflow.configuration import conf

        if importlib.metadata.version("apache-airflow").startswith("2."):
            # The webserver's own view, on the UI's host: only the path of its base URL (the part
            # Airflow mounts the UI under), so the link works whatever host name the user reached.
            base = urllib.parse.urlsplit(conf.get("webserver", "base_url", fallback="") or "").path
        else:
            # Unset: a path on the UI's own host (the API server serves both).
            base = conf.get("api", "base_url", fallback="") or ""
        map_index = getattr(ti_key, "map_index", None)
        map_index = -1 if map_index is None else map_index
        return publications_url(base, ti_key.dag_id, ti_key.run_id, ti_key.task_id, map_index)
