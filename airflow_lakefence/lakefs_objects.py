"""The object calls of the lakeFS client adapter: uploads, reads, listings and deletions.

:class:`ObjectsMixin` is part of :class:`airflow_lakefence.lakefs_client.LakeFSClient` (kept apart
so each module stays readable); its calls go through the client's one error-translating
``_call``, like every other lakeFS call.
"""

from __future__ import annotations

import functools
import http
import io
import json
import os
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import urllib3
from lakefs.exceptions import handle_http_error
from lakefs_sdk.models.path_list import PathList

from airflow_lakefence.core.ports import UploadProgress
from airflow_lakefence.exceptions import LakeFSError, LakeFSPreconditionFailedError

T = TypeVar("T")


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


class ObjectsMixin:
    """The object calls of :class:`~airflow_lakefence.lakefs_client.LakeFSClient` (which provides the
    transport below them)."""

    upload_concurrency: int
    _timeout: tuple[float, float]

    @property
    def _api(self) -> Any:
        raise NotImplementedError

    @property
    def _host(self) -> str:
        raise NotImplementedError

    def _call(self, operation: str, what: str, fn: Callable[[], T], *, idempotent: bool) -> T:
        raise NotImplementedError

    def _paginate(
        self, operation: str, what: str, fn: Callable[..., Any], *args: Any, start: str = "", **kwargs: Any
    ) -> Iterator[Any]:
        raise NotImplementedError

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
        return {path: metadata for path, (metadata, _mtime) in self.list_records_dated(repository, ref, prefix).items()}

    def list_records_dated(self, repository: str, ref: str, prefix: str) -> dict[str, tuple[dict[str, str], float]]:
        """The objects under ``prefix`` at ``ref`` with their user metadata and their modification time
        (epoch seconds: when each was written), one call per 1,000.

        :param repository: the repository name.
        :param ref: the ref.
        :param prefix: the path prefix.
        :return: ``{path: ({lower-case metadata key: value}, mtime)}``.
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
        return {
            item.path: ({str(k).lower(): str(v) for k, v in (item.metadata or {}).items()}, float(item.mtime or 0))
            for item in pages
        }
