"""Extra links from a task to what it wrote in lakeFS, computed from that try's XCom.

Airflow computes extra links in the worker when a try ends and stores them per try, so a retry
links to its own commit and staging branch, never to an earlier try's.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from airflow.sdk import BaseOperatorLink

from airflow_lakefence.hooks.lakefs import LakeFSHook
from airflow_lakefence.task_instances import OUTPUT_REF_KEY, xcom_value


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
        value = xcom_value(ti_key, self.source_key)
        repository = getattr(operator, "repository", None)
        if not value or not repository:
            return ""
        base = LakeFSHook(getattr(operator, "lakefs_conn_id", LakeFSHook.default_conn_name)).settings["ui_base_url"]
        return self._build(str(base), str(repository), str(value))


class LakeFSCommitLink(_LakeFSXComLink):
    """ "lakeFS commit": the commit the fenced task published (XCom ``output_ref``)."""

    name = "lakeFS commit"
    source_key = OUTPUT_REF_KEY

    def _build(self, ui_base_url: str, repository: str, value: str) -> str:
        return commit_url(ui_base_url, repository, value)


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
        staged = xcom_value(ti_key, "staged_commit")
        repository = getattr(operator, "repository", None)
        if staged and repository:
            base = LakeFSHook(getattr(operator, "lakefs_conn_id", LakeFSHook.default_conn_name)).settings["ui_base_url"]
            return commit_url(str(base), str(repository), str(staged))
        return super().get_link(operator, ti_key=ti_key)

    def _build(self, ui_base_url: str, repository: str, value: str) -> str:
        return branch_url(ui_base_url, repository, value)


class LakeFSSensorCommitLink(_LakeFSXComLink):
    """ "lakeFS commit" of a sensor: the commit it saw (its return value)."""

    name = "lakeFS commit"
    source_key = "return_value"

    def _build(self, ui_base_url: str, repository: str, value: str) -> str:
        return commit_url(ui_base_url, repository, value)
