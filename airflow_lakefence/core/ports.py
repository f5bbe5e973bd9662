"""The two small interfaces the publish engine runs over, and the commit value they exchange.

* :class:`LakeFSPort`: the lakeFS calls the protocol makes.
  :class:`airflow_lakefence.lakefs_adapter.client.LakeFSClient` implements it over the ``lakefs``
  SDK; tests implement it in memory. Implementations raise the package's
  :class:`~airflow_lakefence.exceptions.LakeFSError` subclasses, and
  :class:`~airflow_lakefence.exceptions.LakeFSUnavailableError` when a write's outcome is unknown.
* :class:`AttemptFencePort`: "is this process still the current try?". The Airflow adapter is
  :class:`airflow_lakefence.airflow_adapter.attempt_fence.AttemptFence`.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Protocol

from airflow_lakefence.core.names.keys import AttemptId


@dataclass(frozen=True)
class CommitInfo:
    """A lakeFS commit as the protocol needs it.

    :param id: the commit id.
    :param parents: the parents as lakeFS stores them.
    :param metadata: the commit metadata.
    :param version: the commit version (parent order), 1 when lakeFS omits it.
    :param message: the commit message.
    :param meta_range_id: the content hash of the commit's tree.
    :param creation_date: when the commit was created (Unix epoch seconds), ``None`` when unknown.
    """

    id: str
    parents: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    version: int = 1
    message: str = ""
    meta_range_id: str = ""
    creation_date: int | None = None


#: ``(done, total)`` files uploaded so far.
UploadProgress = Callable[[int, int], None]


class ChangedPathLike(Protocol):
    """One entry of a diff."""

    @property
    def path(self) -> str:
        """The changed path."""
        ...

    @property
    def type(self) -> str:
        """``added``, ``removed`` or ``changed`` (the Delta check needs it)."""
        ...


class LakeFSPort(Protocol):
    """The lakeFS operations of the publish protocol.

    See :class:`~airflow_lakefence.lakefs_adapter.client.LakeFSClient`.
    """

    def get_commit(self, repository: str, ref: str) -> CommitInfo:
        """Resolve a ref to its commit (``LakeFSNotFoundError`` when missing)."""
        ...

    def create_branch(self, repository: str, name: str, source: str, *, hidden: bool = False) -> str:
        """Create a branch from ``source``; return the commit id it points at."""
        ...

    def delete_branch(self, repository: str, name: str, *, missing_ok: bool = True) -> bool:
        """Delete a branch; return whether this call deleted it."""
        ...

    def list_branches(self, repository: str, prefix: str = "", *, show_hidden: bool = True) -> list[tuple[str, str]]:
        """``(name, commit id)`` of the branches whose name starts with ``prefix``."""
        ...

    def commit(
        self, repository: str, branch: str, message: str, metadata: Mapping[str, str], *, allow_empty: bool = False
    ) -> CommitInfo | None:
        """Commit a branch's uncommitted changes; ``None`` when there was nothing to commit."""
        ...

    def merge(
        self,
        repository: str,
        source_ref: str,
        destination: str,
        message: str,
        metadata: Mapping[str, str],
        *,
        allow_empty: bool = False,
    ) -> str:
        """Merge ``source_ref`` into ``destination``; return the merge commit id (``allow_empty``: even
        when the trees are equal)."""
        ...

    def hard_reset(self, repository: str, branch: str, ref: str) -> None:
        """Point ``branch`` at ``ref``."""
        ...

    def merge_base(self, repository: str, source_ref: str, destination_branch: str) -> str:
        """The best common ancestor of ``source_ref`` and the branch's HEAD (``source_ref`` when it is an ancestor)."""
        ...

    def paths_outside(self, repository: str, branch: str, prefixes: Iterable[str], *, limit: int = 10) -> list[str]:
        """Up to ``limit`` uncommitted changes of ``branch`` outside ``prefixes``."""
        ...

    def list_objects(self, repository: str, ref: str, prefix: str = "") -> list[str]:
        """Every object path under ``prefix`` at ``ref``."""
        ...

    def diff_uncommitted(self, repository: str, branch: str, *, prefix: str = "") -> Iterable[ChangedPathLike]:
        """The uncommitted changes of ``branch`` under ``prefix``."""
        ...

    def diff_refs(
        self,
        repository: str,
        left: str,
        right: str,
        *,
        prefix: str = "",
        after: str = "",
        diff_type: str = "two_dot",
        limit: int = 1000,
    ) -> Sequence[ChangedPathLike]:
        """Up to ``limit`` differences between two refs under ``prefix``, paths after ``after``.

        ``two_dot`` compares the two trees; ``three_dot`` lists what ``right`` changed since the merge base.
        """
        ...

    def log_commits(
        self,
        repository: str,
        ref: str,
        *,
        objects: Sequence[str] = (),
        prefixes: Sequence[str] = (),
        amount: int,
        limit: bool = True,
        first_parent: bool = False,
        stop_at: str | None = None,
    ) -> list[CommitInfo]:
        """The newest commits reachable from ``ref`` that changed one of ``objects`` or a path under
        ``prefixes`` (lakeFS's ``logCommits``; merge commits are not listed when filtering), newest
        first, at most ``amount`` (one call with ``limit``); with ``first_parent`` only the commits
        of ``ref``'s own line (a branch's merges, not what they merged), down to ``stop_at`` (inclusive)."""
        ...

    def delete_objects(self, repository: str, branch: str, paths: Sequence[str]) -> int:
        """Delete objects from a branch (uncommitted); missing paths are not an error."""
        ...

    def upload_tree(
        self,
        repository: str,
        branch: str,
        files: Iterable[tuple[str, Path]],
        *,
        progress: UploadProgress | None = None,
    ) -> int:
        """Upload ``(object path, local file)`` pairs into ``branch``; return how many were uploaded."""
        ...

    # -- the hard fence and merge-only replacement (docs/hard-fence.md) --------------------------

    def read_object(self, repository: str, ref: str, path: str) -> bytes:
        """Read one small object whole (``LakeFSNotFoundError`` when missing): the fence's action file."""
        ...

    def revert(
        self,
        repository: str,
        branch: str,
        ref: str,
        *,
        parent_number: int = 1,
        message: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Add a commit to ``branch`` undoing ``ref`` relative to its parent ``parent_number``."""
        ...


class AttemptFencePort(Protocol):
    """The attempt fence (protocol: "Attempt fence") as the engine uses it."""

    @property
    def attempt(self) -> AttemptId:
        """This attempt's identity."""
        ...

    def arm(self) -> None:
        """Remember who we are (``StaleAttemptError`` if that cannot be recorded)."""
        ...

    def stale_reason(self) -> str | None:
        """Why this attempt is stale, or ``None`` while it is the current one (errors count as stale)."""
        ...

    def was_killed(self) -> bool:
        """Whether the task was told to stop (Airflow's ``on_kill``)."""
        ...

    def fail(self, where: str, reason: str) -> NoReturn:
        """Raise :class:`~airflow_lakefence.exceptions.StaleAttemptError`, after the grace period."""
        ...
