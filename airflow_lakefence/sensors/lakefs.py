"""``LakeFSCommitSensor`` and ``LakeFSFileSensor``: wait for a new commit, or for an object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_lakefence.core.records.run_state import pin_input, pinned_input
from airflow_lakefence.exceptions import InvalidInputError
from airflow_lakefence.lakefs_adapter.run_state_store import task_run_state
from airflow_lakefence.links.lakefs import LakeFSSensorCommitLink
from airflow_lakefence.sensors.base import LakeFSBaseSensor
from airflow_lakefence.triggers.lakefs import LakeFSCommitTrigger, LakeFSFileTrigger
from airflow_lakefence.triggers.probes import probe_new_commit, probe_object


def _required(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _one_of(value: str | None, name: str, alias: str | None, alias_name: str) -> str:
    """The value given under ``name`` or under airflow-provider-lakefs's ``alias_name``, not both."""
    if value is not None and alias is not None:
        raise InvalidInputError(f"give {name} or {alias_name}, not both")
    result = value if value is not None else alias
    if result is None:
        raise InvalidInputError(f"{name} is required")
    return result


class _CommitIdSensor(LakeFSBaseSensor):
    """A sensor that returns the commit it saw: the "lakeFS commit" link opens it."""

    ui_color = "#c8e6c9"
    operator_extra_links = (LakeFSSensorCommitLink(),)


class LakeFSCommitSensor(_CommitIdSensor):
    """Wait until a branch's HEAD moves away from ``since_ref``, optionally changing ``prefix``.

    Returns the HEAD commit id it saw (XCom ``return_value``): read at that id, not at the branch
    name, to read exactly what the sensor saw. A poke costs one ``get_commit`` while nothing moved,
    and one more call (a one-entry diff under ``prefix``, or resolving ``since_ref``) when HEAD differs.

    airflow-provider-lakefs's parameters are accepted too (``repo`` for ``repository``,
    ``prev_commit_id`` for ``since_ref``), and without either ``since_ref`` the sensor waits for the
    branch to move from the HEAD it finds when it starts (as that provider's sensor does).

    :param repository: the lakeFS repository (templated).
    :param branch: the branch to watch (templated).
    :param since_ref: the commit to compare with, e.g. the commit an earlier task read (templated).
        A branch name works too but is resolved on every poke. ``None``: the branch's HEAD when the
        sensor starts (one more ``get_commit``).
    :param prefix: only a change under this path prefix counts (templated); a commit touching
        nothing under it is ignored.
    :param repo: airflow-provider-lakefs's name of ``repository``.
    :param prev_commit_id: airflow-provider-lakefs's name of ``since_ref``.
    :param kwargs: :class:`~airflow_lakefence.sensors.base.LakeFSBaseSensor` arguments.
    :raises InvalidInputError: when both names of one parameter are given.
    """

    template_fields: Sequence[str] = ("repository", "branch", "since_ref", "prefix")
    trigger_class = LakeFSCommitTrigger

    def __init__(
        self,
        *,
        repository: str | None = None,
        branch: str,
        since_ref: str | None = None,
        prefix: str | None = None,
        repo: str | None = None,
        prev_commit_id: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.repository = _one_of(repository, "repository", repo, "repo")
        self.branch = branch
        if since_ref is not None and prev_commit_id is not None:
            raise InvalidInputError("give since_ref or prev_commit_id, not both")
        self.since_ref = since_ref if since_ref is not None else prev_commit_id
        self.prefix = prefix

    def execute(self, context: Any) -> Any:
        """Wait for the branch to move; without ``since_ref``, from the HEAD it has now.

        :param context: the Airflow context.
        """
        if not self.since_ref:
            # Resolved once per run: a reschedule or a retry waits from the same commit.
            repository = _required(self.repository, "repository")
            state = task_run_state(context, self.client, repository, source_branch=self.branch)
            self.since_ref = pinned_input(state, self.branch)
            if self.since_ref is None:
                self.since_ref = self.client.get_commit(repository, self.branch).id
                pin_input(state, self.branch, self.since_ref)
            self.log.info("Waiting for %s to move from %s", self.branch, self.since_ref)
        return super().execute(context)

    def probe_arguments(self) -> dict[str, Any]:
        """The repository, the branch, the commit to compare with and the prefix."""
        return {
            "repository": _required(self.repository, "repository"),
            "branch": _required(self.branch, "branch"),
            "since_ref": _required(self.since_ref, "since_ref"),
            "prefix": self.prefix or None,
        }

    def probe(self) -> tuple[bool, Any]:
        """One look at the branch; ``(moved, HEAD or None)``."""
        head = probe_new_commit(self.client, **self.probe_arguments())
        return head is not None, head


class LakeFSFileSensor(_CommitIdSensor):
    """Wait until an object (``path``) or anything under a prefix (``prefix``) exists at ``ref``.

    Returns the commit id ``ref`` pointed at when the object was found (XCom ``return_value``): the
    ref is resolved first and the object looked up in that very commit. Two lakeFS calls a poke.

    airflow-provider-lakefs's parameters are accepted too (``repo`` for ``repository``, ``branch`` for
    ``ref``); given ``branch``, the sensor also sees uncommitted objects, as that provider's does.

    :param repository: the lakeFS repository (templated).
    :param ref: a branch, tag or commit id (templated).
    :param path: the object path (templated); or
    :param prefix: a path prefix (templated).
    :param repo: airflow-provider-lakefs's name of ``repository``.
    :param branch: airflow-provider-lakefs's name of ``ref``.
    :param uncommitted: look ``path`` up on the branch itself, uncommitted objects included (then the
        commit returned is the branch's HEAD, which need not hold the object yet); default: only when
        ``branch`` is given.
    :param kwargs: :class:`~airflow_lakefence.sensors.base.LakeFSBaseSensor` arguments.
    :raises InvalidInputError: unless exactly one of ``path`` and ``prefix`` is given, or when both
        names of one parameter are given.
    """

    template_fields: Sequence[str] = ("repository", "ref", "path", "prefix")
    trigger_class = LakeFSFileTrigger

    def __init__(
        self,
        *,
        repository: str | None = None,
        ref: str | None = None,
        path: str | None = None,
        prefix: str | None = None,
        repo: str | None = None,
        branch: str | None = None,
        uncommitted: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (path is None) == (prefix is None):
            raise InvalidInputError("LakeFSFileSensor needs exactly one of path and prefix")
        self.repository = _one_of(repository, "repository", repo, "repo")
        self.ref = _one_of(ref, "ref", branch, "branch")
        self.uncommitted = branch is not None if uncommitted is None else uncommitted
        self.path = path
        self.prefix = prefix

    def probe_arguments(self) -> dict[str, Any]:
        """The repository, the ref, the path or prefix, and whether uncommitted objects count."""
        return {
            "repository": _required(self.repository, "repository"),
            "ref": _required(self.ref, "ref"),
            "path": None if self.path is None else _required(self.path, "path"),
            "prefix": self.prefix,
            "uncommitted": self.uncommitted,
        }

    def probe(self) -> tuple[bool, Any]:
        """One look at the ref; ``(found, commit id or None)``."""
        commit = probe_object(self.client, **self.probe_arguments())
        return commit is not None, commit
