"""The lakeFS adapter: the only module that talks to the ``lakefs`` SDK.

Every call goes through :meth:`LakeFSClient._call`, which

* translates SDK and transport errors into the package's exception tree (one place, like the SDK's
  own ``api_exception_handler``), so nothing above this module ever sees an SDK exception;
* retries idempotent reads on 5xx / 429 / connection errors with exponential backoff, and never
  repeats a write: a write whose outcome is unknown raises :class:`LakeFSUnavailableError` and the
  caller re-reads state to decide (the protocol's "retried call" row).

Credentials live only in the SDK client configuration; no message built here contains them.
"""

from __future__ import annotations

import functools
import http
import io
import itertools
import json
import os
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import lakefs
import tenacity
import urllib3
from lakefs.exceptions import api_exception_handler, handle_http_error
from lakefs_sdk.models.branch_creation import BranchCreation
from lakefs_sdk.models.commit import Commit as SdkCommit
from lakefs_sdk.models.commit_creation import CommitCreation
from lakefs_sdk.models.commit_overrides import CommitOverrides
from lakefs_sdk.models.merge import Merge
from lakefs_sdk.models.path_list import PathList
from lakefs_sdk.models.revert_creation import RevertCreation

from airflow_lakefence.core.ports import CommitInfo, UploadProgress
from airflow_lakefence.exceptions import (
    LakeFSError,
    LakeFSNoChangesError,
    LakeFSNotFoundError,
    LakeFSPreconditionFailedError,
    LakeFSUnavailableError,
)
from airflow_lakefence.lakefs_adapter.errors import CAUGHT, translate_error

__all__ = ["ChangedPath", "LakeFSClient", "ObjectInfo", "commit_from_sdk", "translate_error"]

T = TypeVar("T")

_TRANSPORT_RETRIES = urllib3.Retry(total=None, connect=2, read=0, redirect=3, status=0, other=0, raise_on_status=False)


def commit_from_sdk(commit: SdkCommit) -> CommitInfo:
    """Build a :class:`CommitInfo` from a ``lakefs_sdk`` commit model.

    :param commit: the SDK model.
    """
    return CommitInfo(
        id=commit.id,
        parents=tuple(commit.parents),
        metadata=dict(commit.metadata or {}),
        version=1 if commit.version is None else int(commit.version),
        message=commit.message,
        meta_range_id=commit.meta_range_id,
        creation_date=None if commit.creation_date is None else int(commit.creation_date),
    )


@dataclass(frozen=True)
class ChangedPath:
    """One entry of a diff.

    :param path: the path, or the common prefix for ``path_type == "common_prefix"``.
    :param type: added, removed, changed, conflict or prefix_changed.
    :param path_type: ``object`` or ``common_prefix``.
    """

    path: str
    type: str
    path_type: str


@dataclass(frozen=True)
class ObjectInfo:
    """One object's stats.

    :param path: the object path.
    :param size_bytes: its size, ``None`` when lakeFS leaves it out.
    :param checksum: its checksum (an ETag).
    :param mtime: its modification time (Unix epoch seconds).
    """

    path: str
    size_bytes: int | None
    checksum: str
    mtime: int




class LakeFSClient:
    """A thin, error-translating adapter over one ``lakefs.Client``.

    The SDK client is built lazily on first use, so constructing an adapter does no I/O.

    :param endpoint: the lakeFS URL, without ``/api/v1``.
    :param access_key_id: the access key id.
    :param secret_access_key: the secret access key.
    :param verify_ssl: whether to verify TLS certificates.
    :param read_attempts: how many times an idempotent read is tried on a transient failure.
    :param backoff: the initial backoff between read attempts, in seconds.
    :param timeout: (connect, read) timeout of each request, in seconds.
    :param upload_concurrency: the number of parallel object uploads.
    """

    def __init__(
        self,
        endpoint: str,
        access_key_id: str,
        secret_access_key: str,
        *,
        verify_ssl: bool = True,
        read_attempts: int = 4,
        backoff: float = 0.2,
        timeout: tuple[float, float] = (10.0, 120.0),
        upload_concurrency: int = 8,
    ) -> None:
        self.endpoint = endpoint.rstrip("/").removesuffix("/api/v1")
        self._access_key_id = access_key_id
        self._secret_access_key = secret_access_key
        self._verify_ssl = verify_ssl
        self._read_attempts = max(1, read_attempts)
        self._backoff = backoff
        self._timeout = timeout
        self.upload_concurrency = max(1, upload_concurrency)

    def __repr__(self) -> str:
        return f"LakeFSClient(endpoint={self.endpoint!r})"

    @cached_property
    def sdk(self) -> lakefs.Client:
        """The underlying high-level SDK client."""
        client = lakefs.Client(  # type: ignore[no-untyped-call]
            host=self.endpoint,
            username=self._access_key_id,
            password=self._secret_access_key,
            verify_ssl=self._verify_ssl,
        )
        # urllib3's default policy re-sends PUT and DELETE (hard_reset, delete_branch) after a lost
        # answer, and GETs three times per attempt: below this adapter only a connection attempt,
        # which sends nothing, may be retried; _call decides about everything else.
        pool_manager = client.sdk_client.objects_api.api_client.rest_client.pool_manager
        pool_manager.connection_pool_kw["retries"] = _TRANSPORT_RETRIES
        pool_manager.clear()
        return client

    @property
    def _api(self) -> Any:
        return self.sdk.sdk_client

    @property
    def _host(self) -> str:
        return str(self.sdk.config.host)

    def _call(self, operation: str, what: str, fn: Callable[[], T], *, idempotent: bool) -> T:
        """Make one SDK call; its errors leave as the package's exceptions, and reads are retried.

        :param operation: the lakeFS operation, for messages and translation.
        :param what: what it acts on, for messages.
        :param fn: the SDK call.
        :param idempotent: whether a transient failure may be retried (reads only).
        """
        if not idempotent:
            return self._call_once(operation, what, fn)
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(LakeFSUnavailableError),
            stop=tenacity.stop_after_attempt(self._read_attempts),
            wait=tenacity.wait_exponential(multiplier=self._backoff, max=5.0),
            reraise=True,
        )
        result: T = retrying(self._call_once, operation, what, fn)
        return result

    @staticmethod
    def _call_once(operation: str, what: str, fn: Callable[[], T]) -> T:
        try:
            with api_exception_handler():
                return fn()
        except CAUGHT as exc:
            raise translate_error(exc, operation, what) from exc

    def _paginate(
        self, operation: str, what: str, fn: Callable[..., Any], *args: Any, start: str = "", **kwargs: Any
    ) -> Iterator[Any]:
        """Yield the results of a paginated listing after ``start``, one idempotent call per page."""
        after = start
        while True:
            page = self._call(
                operation,
                what,
                functools.partial(fn, *args, after=after, _request_timeout=self._timeout, **kwargs),
                idempotent=True,
            )
            yield from page.results
            if not page.pagination.has_more:
                return
            after = page.pagination.next_offset

    # -- repositories ------------------------------------------------------------------------

    def get_repository(self, repository: str) -> dict[str, Any]:
        """Return a repository's description.

        :param repository: the repository name.
        :raises LakeFSNotFoundError: if it does not exist.
        :raises LakeFSError: for any other failure.
        """
        repo = self._call(
            "get_repository",
            f"repository {repository!r}",
            lambda: self._api.repositories_api.get_repository(repository, _request_timeout=self._timeout),
            idempotent=True,
        )
        return dict(repo.to_dict())

    # -- commits and refs --------------------------------------------------------------------

    def get_commit(self, repository: str, ref: str) -> CommitInfo:
        """Resolve ``ref`` (commit id, branch, tag or ref expression) to its commit.

        :param repository: the repository name.
        :param ref: the ref.
        :raises LakeFSNotFoundError: if the repository or ref does not exist.
        :raises LakeFSError: for any other failure.
        """
        return commit_from_sdk(self._sdk_commit(repository, ref))

    def commit_details(self, repository: str, ref: str) -> dict[str, Any]:
        """Resolve ``ref`` to its commit, as lakeFS describes it (``id``, ``parents``, ``committer``,
        ``message``, ``creation_date``, ``meta_range_id``, ``metadata``, ``generation``, ``version``).

        :param repository: the repository name.
        :param ref: the ref.
        :raises LakeFSNotFoundError: if the repository or ref does not exist.
        :raises LakeFSError: for any other failure.
        """
        return dict(self._sdk_commit(repository, ref).to_dict())  # type: ignore[no-untyped-call]

    def _sdk_commit(self, repository: str, ref: str) -> SdkCommit:
        result: SdkCommit = self._call(
            "get_commit",
            f"ref {ref!r} in {repository!r}",
            lambda: self._api.commits_api.get_commit(repository, ref, _request_timeout=self._timeout),
            idempotent=True,
        )
        return result

    def commit(
        self, repository: str, branch: str, message: str, metadata: Mapping[str, str], *, allow_empty: bool = False
    ) -> CommitInfo | None:
        """Commit a branch's uncommitted changes.

        :param repository: the repository name.
        :param branch: the branch.
        :param message: the commit message.
        :param metadata: the commit metadata.
        :param allow_empty: create a commit even when nothing changed.
        :return: the new commit, or ``None`` when there was nothing to commit.
        :raises LakeFSError: on failure; :class:`LakeFSUnavailableError` when the outcome is unknown.
        """
        creation = CommitCreation(message=message, metadata=dict(metadata), allow_empty=allow_empty)  # type: ignore[call-arg]
        try:
            commit = self._call(
                "commit",
                f"branch {branch!r} in {repository!r}",
                lambda: self._api.commits_api.commit(repository, branch, creation, _request_timeout=self._timeout),
                idempotent=False,
            )
        except LakeFSNoChangesError:
            return None
        return commit_from_sdk(commit)

    # -- branches ----------------------------------------------------------------------------

    def create_branch(self, repository: str, name: str, source: str, *, hidden: bool = False) -> str:
        """Create a branch and return the commit id it points at.

        :param repository: the repository name.
        :param name: the new branch name.
        :param source: the ref to create it from (resolved once, by lakeFS).
        :param hidden: hide it from default listings.
        :raises LakeFSConflictError: if the branch exists.
        :raises LakeFSNotFoundError: if the repository or source does not exist.
        :raises LakeFSError: for any other failure.
        """
        creation = BranchCreation(name=name, source=source, hidden=hidden)
        commit_id = self._call(
            "create_branch",
            f"branch {name!r} from {source!r} in {repository!r}",
            lambda: self._api.branches_api.create_branch(repository, creation, _request_timeout=self._timeout),
            idempotent=False,
        )
        return str(commit_id).strip()

    def delete_branch(self, repository: str, name: str, *, missing_ok: bool = True) -> bool:
        """Delete a branch.

        :param repository: the repository name.
        :param name: the branch.
        :param missing_ok: treat an already-deleted branch as success.
        :return: whether this call deleted it.
        :raises LakeFSError: on failure.
        """
        try:
            self._call(
                "delete_branch",
                f"branch {name!r} in {repository!r}",
                lambda: self._api.branches_api.delete_branch(repository, name, _request_timeout=self._timeout),
                idempotent=False,
            )
        except LakeFSNotFoundError:
            if not missing_ok:
                raise
            return False
        return True

    def list_branches(self, repository: str, prefix: str = "", *, show_hidden: bool = True) -> list[tuple[str, str]]:
        """List branches whose name starts with ``prefix``, following pagination.

        :param repository: the repository name.
        :param prefix: the name prefix.
        :param show_hidden: include hidden branches.
        :return: ``(name, commit_id)`` pairs in name order.
        :raises LakeFSError: on failure.
        """
        pages = self._paginate(
            "list_branches",
            f"branches {prefix!r}* in {repository!r}",
            self._api.branches_api.list_branches,
            repository,
            prefix=prefix,
            amount=1000,
            show_hidden=show_hidden,
        )
        return [(ref.id, ref.commit_id) for ref in pages]

    def merge(
        self,
        repository: str,
        source_ref: str,
        destination: str,
        message: str,
        metadata: Mapping[str, str],
        *,
        squash: bool = False,
        allow_empty: bool = False,
    ) -> str:
        """Merge ``source_ref`` into branch ``destination``; return the merge commit id.

        :param repository: the repository name.
        :param source_ref: the ref to merge (the staged commit id).
        :param destination: the destination branch.
        :param message: the merge commit message.
        :param metadata: the merge commit metadata.
        :param squash: record only the destination as the commit's parent (lakeFS's ``squash_merge``):
            one commit holding the source's changes.
        :param allow_empty: merge even when the source brings no change (lakeFS's ``allow_empty``): a
            replacement whose staged tree equals the publication it replaces still records itself.
        :raises LakeFSError: on failure; :class:`LakeFSUnavailableError` when the outcome is unknown.
        """
        merge = Merge(message=message, metadata=dict(metadata))  # type: ignore[call-arg]
        if squash:
            merge.squash_merge = True
        if allow_empty:
            merge.allow_empty = True
        result = self._call(
            "merge",
            f"{source_ref!r} into {destination!r} in {repository!r}",
            functools.partial(
                self._api.refs_api.merge_into_branch,
                repository,
                source_ref,
                destination,
                merge=merge,
                _request_timeout=self._timeout,
            ),
            idempotent=False,
        )
        return str(result.reference)

    def hard_reset(self, repository: str, branch: str, ref: str) -> None:
        """Point ``branch`` at ``ref`` (lakeFS's experimental hard reset; runs no hooks).

        :param repository: the repository name.
        :param branch: the branch to move.
        :param ref: the commit to point it at.
        :raises LakeFSError: on failure; :class:`LakeFSUnavailableError` when the outcome is unknown.
        """
        self._call(
            "hard_reset",
            f"branch {branch!r} to {ref!r} in {repository!r}",
            lambda: self._api.experimental_api.hard_reset_branch(
                repository, branch, ref, _request_timeout=self._timeout
            ),
            idempotent=False,
        )

    def merge_base(self, repository: str, source_ref: str, destination_branch: str) -> str:
        """The best common ancestor of ``source_ref`` and the branch's HEAD (one call).

        It is ``source_ref``'s own commit exactly when that commit is an ancestor of the HEAD.

        :param repository: the repository name.
        :param source_ref: the ref (e.g. an input commit).
        :param destination_branch: the branch.
        :raises LakeFSNotFoundError: if the repository, ref or branch does not exist.
        :raises LakeFSError: for any other failure.
        """
        result = self._call(
            "find_merge_base",
            f"{source_ref!r} and {destination_branch!r} in {repository!r}",
            lambda: self._api.refs_api.find_merge_base(
                repository, source_ref, destination_branch, _request_timeout=self._timeout
            ),
            idempotent=True,
        )
        return str(result.base_commit_id)

    # -- merge-only replacement --------------------------------------------------------------

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
        """Add a commit to ``branch`` undoing ``ref`` relative to its parent ``parent_number``.

        Protected branches allow it; lakeFS runs no hook for it.

        :param repository: the repository name.
        :param branch: the branch to add the revert commit to.
        :param ref: the commit to revert.
        :param parent_number: for a merge commit, the parent (from 1) it is reverted against.
        :param message: the revert commit's message (lakeFS's default when ``None``).
        :param metadata: the revert commit's metadata.
        :raises LakeFSError: on failure; :class:`LakeFSUnavailableError` when the outcome is unknown.
        """
        overrides = CommitOverrides(message=message, metadata=dict(metadata or {}))
        creation = RevertCreation(ref=ref, parent_number=parent_number, commit_overrides=overrides)  # type: ignore[call-arg]
        self._call(
            "revert",
            f"{ref!r} on branch {branch!r} in {repository!r}",
            lambda: self._api.branches_api.revert_branch(
                repository, branch, creation, _request_timeout=self._timeout
            ),
            idempotent=False,
        )

    # -- symlinks (Hive-style manifests of a branch's objects) -----------------------------------

    def create_symlink_file(self, repository: str, branch: str, location: str | None = None) -> str:
        """Write symlink files for ``branch`` (lakeFS's ``createSymlinkFile``); return their location.

        Repeating it rewrites the same files, so it is retried like a read.

        :param repository: the repository name.
        :param branch: the branch.
        :param location: where to write them (lakeFS's default when ``None``).
        :raises LakeFSError: on failure.
        """
        result = self._call(
            "create_symlink_file",
            f"symlinks of branch {branch!r} in {repository!r}",
            lambda: self._api.internal_api.create_symlink_file(
                repository, branch, location=location, _request_timeout=self._timeout
            ),
            idempotent=True,
        )
        return str(result.location)

    # -- diffs -------------------------------------------------------------------------------

    def diff_uncommitted(
        self, repository: str, branch: str, *, prefix: str = "", delimiter: str = "", amount: int = 1000
    ) -> Iterator[ChangedPath]:
        """Iterate over a branch's uncommitted changes.

        :param repository: the repository name.
        :param branch: the branch.
        :param prefix: only paths under this prefix.
        :param delimiter: group paths into common prefixes at this delimiter.
        :param amount: page size.
        :raises LakeFSError: on failure.
        """
        for item in self._paginate(
            "diff_branch",
            f"branch {branch!r} in {repository!r}",
            self._api.branches_api.diff_branch,
            repository,
            branch,
            amount=amount,
            prefix=prefix,
            delimiter=delimiter,
        ):
            yield ChangedPath(item.path, item.type, item.path_type)

    def paths_outside(self, repository: str, branch: str, prefixes: Iterable[str], *, limit: int = 10) -> list[str]:
        """Find uncommitted changes outside ``prefixes``, descending one path level at a time.

        The number of calls depends on how deep the prefixes are, not on how many objects changed:
        a level is listed with ``delimiter="/"`` and only the common prefixes leading to a declared
        prefix are descended into.

        :param repository: the repository name.
        :param branch: the branch.
        :param prefixes: the allowed prefixes (e.g. ``["tables/agg/"]``).
        :param limit: stop after this many offending paths.
        :return: up to ``limit`` offending paths (or common prefixes).
        :raises LakeFSError: on failure.
        """
        allowed = tuple(prefixes)
        offending: list[str] = []
        pending = [""]
        while pending and len(offending) < limit:
            level = pending.pop()
            for change in self.diff_uncommitted(repository, branch, prefix=level, delimiter="/"):
                path = change.path
                if any(path.startswith(p) for p in allowed):
                    continue
                if change.path_type == "common_prefix" and any(p.startswith(path) for p in allowed):
                    pending.append(path)
                    continue
                offending.append(path)
                if len(offending) >= limit:
                    break
        return offending

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
    ) -> list[ChangedPath]:
        """Return up to ``limit`` differences between two refs, following pagination.

        ``two_dot`` compares the two trees; ``three_dot`` lists what ``right`` changed since the merge
        base. With ``limit=1`` this is the cheapest "did anything under this prefix change" question
        (one call).

        :param repository: the repository name.
        :param left: the left ref (e.g. an older commit).
        :param right: the right ref.
        :param prefix: only paths under this prefix.
        :param after: only paths after this one (lexicographically).
        :param diff_type: ``two_dot`` or ``three_dot``.
        :param limit: stop after this many entries.
        :raises ValueError: for an unknown ``diff_type`` or a ``limit`` below 1.
        :raises LakeFSError: on failure.
        """
        if diff_type not in ("two_dot", "three_dot"):
            raise ValueError(f"diff_type must be two_dot or three_dot, got {diff_type!r}")
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        pages = self._paginate(
            "diff_refs",
            f"{left!r}..{right!r} in {repository!r}",
            self._api.refs_api.diff_refs,
            repository,
            left,
            right,
            amount=min(1000, limit),
            prefix=prefix,
            type=diff_type,
            start=after,
        )
        # islice stops pulling at the limit, so no page past it is requested.
        return [ChangedPath(i.path, i.type, i.path_type) for i in itertools.islice(pages, limit)]

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
        """The newest commits reachable from ``ref`` that changed one of ``objects`` or a path under ``prefixes``.

        One call with ``limit=True``: lakeFS stops at ``amount`` commits instead of scanning the whole
        history for a full page. With a filter, lakeFS lists no merge commits (a publication shows as
        its staged commit).

        :param repository: the repository name.
        :param ref: where the history starts (e.g. the target's HEAD commit).
        :param objects: object paths.
        :param prefixes: path prefixes.
        :param amount: the most commits to return (1 to 1000).
        :param limit: stop at ``amount`` (one call); ``False`` is not supported here.
        :param first_parent: follow only first parents (a branch's own line: its merges, not what they merged).
        :param stop_at: stop at this commit (inclusive), ``None`` for no bound.
        :raises ValueError: for an ``amount`` outside 1..1000, or ``limit=False``.
        :raises LakeFSError: on failure.
        """
        if not 1 <= amount <= 1000:
            raise ValueError(f"amount must be between 1 and 1000, got {amount}")
        if not limit:
            raise ValueError("log_commits reads one page: limit must be True")
        page = self._call(
            "log_commits",
            f"log of {ref!r} in {repository!r}",
            lambda: self._api.refs_api.log_commits(
                repository,
                ref,
                amount=amount,
                objects=list(objects) or None,
                prefixes=list(prefixes) or None,
                limit=True,
                first_parent=first_parent or None,
                stop_at=stop_at or None,
                _request_timeout=self._timeout,
            ),
            idempotent=True,
        )
        return [commit_from_sdk(c) for c in page.results]

    def delete_objects(self, repository: str, branch: str, paths: Sequence[str]) -> int:
        """Delete objects from a branch (uncommitted until the next commit), 1000 per call.

        Deleting a path that does not exist is not an error, so a call whose answer was lost may be
        repeated.

        :param repository: the repository name.
        :param branch: the branch.
        :param paths: object paths.
        :return: how many paths were sent.
        :raises LakeFSError: on failure, or when lakeFS reports a path it could not delete.
        """
        for start in range(0, len(paths), 1000):
            chunk = list(paths[start : start + 1000])
            answer = self._call(
                "delete_objects",
                f"{len(chunk)} objects on branch {branch!r} in {repository!r}",
                lambda chunk=chunk: self._api.objects_api.delete_objects(  # type: ignore[misc]
                    repository, branch, PathList(paths=chunk), _request_timeout=self._timeout
                ),
                idempotent=True,
            )
            errors = getattr(answer, "errors", None) or []
            if errors:
                raise LakeFSError(
                    f"lakeFS delete_objects on branch {branch!r} in {repository!r}: {len(errors)} paths not deleted",
                    operation="delete_objects",
                )
        return len(paths)

    # -- objects -----------------------------------------------------------------------------

    def upload_file(self, repository: str, branch: str, path: str, local_path: str | os.PathLike[str]) -> None:
        """Stream one local file into ``branch`` at ``path`` (bounded memory, chunked body).

        The SDK's own ``upload`` copies the data into a spooled buffer first; here the open file is
        the request body, with the same raw endpoint and auth the SDK's writer uses.

        :param repository: the repository name.
        :param branch: the branch.
        :param path: the object path.
        :param local_path: the local file.
        :raises LakeFSError: on failure.
        """
        self._upload(repository, branch, path, lambda: open(local_path, "rb"))

    def upload_bytes(self, repository: str, branch: str, path: str, data: bytes) -> None:
        """Upload a small object held in memory into ``branch`` at ``path``.

        :param repository: the repository name.
        :param branch: the branch.
        :param path: the object path.
        :param data: the object's bytes.
        :raises LakeFSError: on failure.
        """
        self._upload(repository, branch, path, lambda: io.BytesIO(data))

    def _upload(self, repository: str, branch: str, path: str, opener: Callable[[], BinaryIO]) -> None:
        api_client = self._api.objects_api.api_client
        resource = urllib.parse.quote(f"/repositories/{repository}/branches/{branch}/objects", encoding="utf-8")
        url = f"{self._host}{resource}?{urllib.parse.urlencode({'path': path})}"
        # The SDK default: lakeFS counts content type in an entry's identity, so a varying guess
        # would turn a byte-identical re-upload into a change.
        content_type = "application/octet-stream"

        def send() -> None:
            headers = {"Accept": "application/json", "Content-Type": content_type}
            with opener() as body:
                api_client.update_params_for_auth(headers, None, ["basic_auth"], resource, "POST", body)
                resp = api_client.rest_client.pool_manager.request(
                    method="POST",
                    url=url,
                    headers=headers,
                    body=body,
                    timeout=urllib3.Timeout(connect=self._timeout[0], read=self._timeout[1]),
                )
            if resp.status >= http.HTTPStatus.MULTIPLE_CHOICES:
                handle_http_error(resp)
            json.loads(resp.data)  # a malformed answer means the upload is not acknowledged

        # Uploads overwrite the same path with the same bytes: safe to repeat.
        self._call("upload_object", f"object {path!r} on {branch!r} in {repository!r}", send, idempotent=True)

    def upload_tree(
        self,
        repository: str,
        branch: str,
        files: Iterable[tuple[str, Path]],
        *,
        progress: UploadProgress | None = None,
    ) -> int:
        """Upload many files in parallel; return how many were uploaded.

        :param repository: the repository name.
        :param branch: the branch.
        :param files: ``(object path, local file)`` pairs.
        :param progress: called with ``(done, total)`` after each upload, in this thread.
        :raises LakeFSError: the first failure; remaining uploads are cancelled.
        """
        count = 0
        with ThreadPoolExecutor(max_workers=self.upload_concurrency, thread_name_prefix="lakefence-upload") as pool:
            futures = [pool.submit(self.upload_file, repository, branch, path, local) for path, local in files]
            try:
                for future in futures:
                    future.result()
                    count += 1
                    if progress is not None:
                        progress(count, len(futures))
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        return count

    def read_object(self, repository: str, ref: str, path: str) -> bytes:
        """Read one object whole (for small objects, tests and examples).

        :param repository: the repository name.
        :param ref: the ref.
        :param path: the object path.
        :raises LakeFSNotFoundError: if it does not exist.
        """
        data = self._call(
            "get_object",
            f"object {path!r} at {ref!r} in {repository!r}",
            lambda: self._api.objects_api.get_object(repository, ref, path, _request_timeout=self._timeout),
            idempotent=True,
        )
        return bytes(data)

    def list_objects(self, repository: str, ref: str, prefix: str = "") -> list[str]:
        """List object paths under ``prefix`` at ``ref``, following pagination.

        :param repository: the repository name.
        :param ref: the ref.
        :param prefix: the path prefix.
        :raises LakeFSError: on failure.
        """
        pages = self._paginate(
            "list_objects",
            f"objects {prefix!r}* at {ref!r} in {repository!r}",
            self._api.objects_api.list_objects,
            repository,
            ref,
            prefix=prefix,
            amount=1000,
        )
        return [item.path for item in pages]

    def stat_object(self, repository: str, ref: str, path: str) -> ObjectInfo:
        """Return one object's stats (one call, no data read).

        :param repository: the repository name.
        :param ref: the ref (a commit id reads a fixed snapshot).
        :param path: the object path.
        :raises LakeFSNotFoundError: if the repository, ref or object does not exist.
        :raises LakeFSError: for any other failure.
        """
        stats = self._call(
            "stat_object",
            f"object {path!r} at {ref!r} in {repository!r}",
            lambda: self._api.objects_api.stat_object(repository, ref, path, _request_timeout=self._timeout),
            idempotent=True,
        )
        return ObjectInfo(stats.path, stats.size_bytes, stats.checksum, int(stats.mtime))

    def list_objects_page(self, repository: str, ref: str, prefix: str = "", *, amount: int = 1) -> list[str]:
        """List at most ``amount`` object paths under ``prefix`` at ``ref`` with one call.

        Unlike :meth:`list_objects` this does not follow pagination: "is there anything under
        this prefix" costs one round-trip whatever the prefix holds.

        :param repository: the repository name.
        :param ref: the ref.
        :param prefix: the path prefix.
        :param amount: the page size, 1 to 1000.
        :raises LakeFSError: on failure.
        """
        page = self._call(
            "list_objects",
            f"objects {prefix!r}* at {ref!r} in {repository!r}",
            functools.partial(
                self._api.objects_api.list_objects,
                repository,
                ref,
                prefix=prefix,
                amount=max(1, min(amount, 1000)),
                _request_timeout=self._timeout,
            ),
            idempotent=True,
        )
        return [item.path for item in page.results]

    # -- write-once records (the run state) --------------------------------------------------

    def create_record(self, repository: str, branch: str, path: str, metadata: dict[str, str]) -> bool:
        """Create an empty object carrying ``metadata`` (user metadata) unless ``path`` exists (one call).

        ``If-None-Match: *`` makes the create atomic on lakeFS (since v1.71): of two racing
        writers exactly one gets it. A call whose answer was lost may be repeated: the repeat is
        refused, and the caller reads back whose record it is.

        :param repository: the repository name.
        :param branch: the branch.
        :param path: the object path.
        :param metadata: user metadata (ASCII values).
        :return: ``True`` when this call created it, ``False`` when the path existed.
        :raises LakeFSNotFoundError: if the repository or branch does not exist.
        :raises LakeFSError: for any other failure.
        """
        api_client = self._api.objects_api.api_client
        resource = urllib.parse.quote(f"/repositories/{repository}/branches/{branch}/objects", encoding="utf-8")
        url = f"{self._host}{resource}?{urllib.parse.urlencode({'path': path})}"

        def send() -> None:
            headers = {
                "Accept": "application/json",
                "Content-Type": "application/octet-stream",
                "If-None-Match": "*",
                **{f"X-Lakefs-Meta-{key}": value for key, value in metadata.items()},
            }
            api_client.update_params_for_auth(headers, None, ["basic_auth"], resource, "POST", b"")
            resp = api_client.rest_client.pool_manager.request(
                method="POST",
                url=url,
                headers=headers,
                body=b"",
                timeout=urllib3.Timeout(connect=self._timeout[0], read=self._timeout[1]),
            )
            if resp.status >= http.HTTPStatus.MULTIPLE_CHOICES:
                handle_http_error(resp)
            json.loads(resp.data)

        try:
            self._call("upload_object", f"record {path!r} on {branch!r} in {repository!r}", send, idempotent=True)
        except LakeFSPreconditionFailedError:
            return False
        return True

    def list_records(self, repository: str, ref: str, prefix: str) -> dict[str, dict[str, str]]:
        """The objects under ``prefix`` at ``ref`` with their user metadata (one call per 1,000).

        :param repository: the repository name.
        :param ref: the ref.
        :param prefix: the path prefix.
        :return: ``{path: {lower-case metadata key: value}}``.
        :raises LakeFSNotFoundError: if the repository or ref does not exist.
        :raises LakeFSError: for any other failure.
        """
        pages = self._paginate(
            "list_objects",
            f"records {prefix!r}* at {ref!r} in {repository!r}",
            self._api.objects_api.list_objects,
            repository,
            ref,
            prefix=prefix,
            amount=1000,
            user_metadata=True,
        )
        return {item.path: {str(k).lower(): str(v) for k, v in (item.metadata or {}).items()} for item in pages}
