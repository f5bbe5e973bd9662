"""``LakeFSCommitSensor`` and ``LakeFSFileSensor``: wait for a new commit, or for an object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_lakefence.exceptions import InvalidInputError
from airflow_lakefence.links import LakeFSSensorCommitLink
from airflow_lakefence.sensors.base import LakeFSBaseSensor
from airflow_lakefence.triggers.lakefs import LakeFSCommitTrigger, LakeFSFileTrigger
from airflow_lakefence.triggers.probes import probe_new_commit, probe_object


def _required(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string, got {value!r}")
    return value


class LakeFSCommitSensor(LakeFSBaseSensor):
    """Wait until a branch's HEAD moves away from ``since_ref``, optionally changing ``prefix``.

    Returns the HEAD commit id it saw (XCom ``return_value``): read at that id, not at the branch
    name, to read exactly what the sensor saw. A poke costs one ``get_commit`` while nothing moved,
    and one more call (a one-entry diff under ``prefix``, or resolving ``since_ref``) when HEAD differs.

    :param repository: the lakeFS repository (templated).
    :param branch: the branch to watch (templated).
    :param since_ref: the commit to compare with, e.g. the commit an earlier task read (templated).
        A branch name works too but is resolved on every poke.
    :param prefix: only a change under this path prefix counts (templated); a commit touching
        nothing under it is ignored.
    :param kwargs: :class:`~airflow_lakefence.sensors.base.LakeFSBaseSensor` arguments.
    """

    template_fields: Sequence[str] = ("repository", "branch", "since_ref", "prefix")
    ui_color = "#c8e6c9"
    operator_extra_links = (LakeFSSensorCommitLink(),)

    def __init__(self, *, repository: str, branch: str, since_ref: str, prefix: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.repository = repository
        self.branch = branch
        self.since_ref = since_ref
        self.prefix = prefix

    def probe(self) -> tuple[bool, Any]:
        """One look at the branch; ``(moved, HEAD or None)``."""
        head = probe_new_commit(
            self.client,
            repository=_required(self.repository, "repository"),
            branch=_required(self.branch, "branch"),
            since_ref=_required(self.since_ref, "since_ref"),
            prefix=self.prefix or None,
        )
        return head is not None, head

    def trigger(self, deadline: float) -> LakeFSCommitTrigger:
        """The trigger repeating :meth:`probe` in the triggerer.

        :param deadline: epoch seconds after which it gives up.
        """
        return LakeFSCommitTrigger(
            repository=self.repository,
            branch=self.branch,
            since_ref=self.since_ref,
            prefix=self.prefix or None,
            lakefs_conn_id=self.lakefs_conn_id,
            poke_interval=float(self.poke_interval),
            deadline=deadline,
        )


class LakeFSFileSensor(LakeFSBaseSensor):
    """Wait until an object (``path``) or anything under a prefix (``prefix``) exists at ``ref``.

    Returns the commit id ``ref`` pointed at when the object was found (XCom ``return_value``): the
    ref is resolved first and the object looked up in that very commit. Two lakeFS calls a poke.

    :param repository: the lakeFS repository (templated).
    :param ref: a branch, tag or commit id (templated).
    :param path: the object path (templated); or
    :param prefix: a path prefix (templated).
    :param kwargs: :class:`~airflow_lakefence.sensors.base.LakeFSBaseSensor` arguments.
    :raises InvalidInputError: unless exactly one of ``path`` and ``prefix`` is given.
    """

    template_fields: Sequence[str] = ("repository", "ref", "path", "prefix")
    ui_color = "#c8e6c9"
    operator_extra_links = (LakeFSSensorCommitLink(),)

    def __init__(
        self, *, repository: str, ref: str, path: str | None = None, prefix: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if (path is None) == (prefix is None):
            raise InvalidInputError("LakeFSFileSensor needs exactly one of path and prefix")
        self.repository = repository
        self.ref = ref
        self.path = path
        self.prefix = prefix

    def probe(self) -> tuple[bool, Any]:
        """One look at the ref; ``(found, commit id or None)``."""
        if self.path is not None:
            _required(self.path, "path")
        commit = probe_object(
            self.client,
            repository=_required(self.repository, "repository"),
            ref=_required(self.ref, "ref"),
            path=self.path,
            prefix=self.prefix,
        )
        return commit is not None, commit

    def trigger(self, deadline: float) -> LakeFSFileTrigger:
        """The trigger repeating :meth:`probe` in the triggerer.

        :param deadline: epoch seconds after which it gives up.
        """
        return LakeFSFileTrigger(
            repository=self.repository,
            ref=self.ref,
            path=self.path,
            prefix=self.prefix,
            lakefs_conn_id=self.lakefs_conn_id,
            poke_interval=float(self.poke_interval),
            deadline=deadline,
        )
