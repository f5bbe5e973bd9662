"""Objects on a branch or ref: upload, stat, list, delete, copy, metadata."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

from lakefence_testing.lakefs_server import _errors as errors
from lakefence_testing.lakefs_server._base import StoreBase
from lakefence_testing.lakefs_server._model import (
    DEFAULT_CONTENT_TYPE,
    Blob,
    Entry,
    Page,
    Repository,
    paginate,
    validate_path,
)
from lakefence_testing.lakefs_server._tx import Tx


def _stage_new_version(
    tx: Tx, repository: Repository, branch: str, path: str, blob: Blob, content_type: str, metadata: Mapping[str, str]
) -> Entry:
    """Stage ``path`` on ``branch`` as a new object version: written now, at a fresh physical address."""
    entry = tx.add_entry(
        address=f"{repository.storage_namespace.rstrip('/')}/data/{uuid.uuid4().hex}",
        blob=blob.sha256,
        checksum=blob.md5,
        size=blob.size,
        mtime=int(time.time()),
        content_type=content_type or DEFAULT_CONTENT_TYPE,
        metadata=metadata,
    )
    tx.stage(repository.id, branch, path, entry)
    return entry


class ObjectsMixin(StoreBase):
    """Objects on a branch or ref: upload, stat, list, delete, copy, metadata."""

    # --- objects ------------------------------------------------------------------------

    def check_upload(self, repo: str, branch: str, path: str, if_none_match: bool) -> Repository:
        """Validate an upload before its body is read (lakeFS checks these first too).

        :param repo: repository id.
        :param branch: branch name.
        :param path: object path.
        :param if_none_match: fail with 412 if the path already exists.
        :raises ApiError: 400/404/412.
        """
        validate_path(path)
        with self.read() as tx:
            repository = tx.repository(repo)
            if tx.branch_commit(repo, branch) is None:
                raise errors.not_found(f"branch '{branch}' not found")
            tx.check_not_protected(repo, branch)
            if if_none_match and tx.view_get(repo, tx.resolve(repo, branch), path) is not None:
                raise errors.ApiError(412, "path already exists")
        return repository

    def stage_object(
        self,
        repo: str,
        branch: str,
        path: str,
        blob: Blob,
        *,
        content_type: str,
        metadata: Mapping[str, str],
        if_none_match: bool = False,
        force: bool = False,
    ) -> Entry:
        """Point ``path`` on ``branch`` at stored bytes (uncommitted).

        :param repo: repository id.
        :param branch: branch name.
        :param path: object path.
        :param blob: bytes already stored by :meth:`put_blob`.
        :param content_type: media type.
        :param metadata: user metadata.
        :param if_none_match: fail with 412 if the path exists, atomically.
        :param force: allow on a read-only repository.
        :raises ApiError: 403/404/412.
        """
        validate_path(path)
        with self.write() as tx:
            repository = tx.writable_branch(repo, branch, force)
            if if_none_match and tx.view_get(repo, tx.resolve(repo, branch), path) is not None:
                raise errors.ApiError(412, "path already exists")
            return _stage_new_version(tx, repository, branch, path, blob, content_type, metadata)

    def stat_object(self, repo: str, ref: str, path: str, tx: Tx | None = None) -> Entry:
        """Return the entry at ``path`` as seen through ``ref``.

        :param repo: repository id.
        :param ref: ref expression.
        :param path: object path.
        :param tx: read inside this transaction instead of a new snapshot.
        :raises ApiError: 404 if missing.
        """
        validate_path(path)
        with self.reading(tx) as tx:
            tx.repository(repo)
            found = tx.view_get(repo, tx.resolve(repo, ref), path)
            if found is None:
                raise errors.not_found("not found")
            return tx.entry(found[1])

    def list_objects(
        self, repo: str, ref: str, *, prefix: str, after: str, delimiter: str, limit: int, tx: Tx | None = None
    ) -> Page:
        """List objects and common prefixes; object items carry their :class:`Entry`.

        :param repo: repository id.
        :param ref: ref expression.
        :param prefix: only paths under this prefix.
        :param after: pagination token.
        :param delimiter: group common prefixes.
        :param limit: page size.
        :param tx: read inside this transaction instead of a new snapshot.
        :raises ApiError: 404 unknown ref.
        """
        with self.reading(tx) as tx:
            tx.repository(repo)
            resolved = tx.resolve(repo, ref)
            page = paginate(
                lambda start: tx.view_iter(repo, resolved, start),
                prefix=prefix,
                after=after,
                delimiter=delimiter,
                limit=limit,
                start=max(prefix, after),
            )
            page.items = [(p, None if e is None else tx.entry(e[1])) for p, e in page.items]
        return page

    def delete_objects(self, repo: str, branch: str, paths: list[str], force: bool = False) -> None:
        """Delete paths on a branch (uncommitted); missing paths are not an error.

        :param repo: repository id.
        :param branch: branch name.
        :param paths: object paths.
        :param force: allow on a read-only repository.
        :raises ApiError: 400 bad path, 403 read-only, 404 missing branch.
        """
        for path in paths:
            validate_path(path)
        with self.write() as tx:
            tx.repository(repo)
            tx.check_not_protected(repo, branch)
            tx.writable_repository(repo, force)
            head = tx.commit(repo, tx.require_branch(repo, branch))
            for path in paths:
                # As lakeFS's deleteUnsafe: a tombstone when the path is staged or committed (a
                # tombstone of an uncommitted path still hides it after a hard reset to a commit
                # that has it); nothing when it is already a tombstone or nowhere.
                found, staged = tx.staged(repo, branch, path)
                if (found and staged is not None) or (not found and tx.tree_get(head.meta_range_id, path) is not None):
                    tx.stage(repo, branch, path, None)

    def copy_object(
        self, repo: str, branch: str, dest_path: str, src_ref: str, src_path: str, force: bool = False
    ) -> Entry:
        """Copy an object (new physical address, same bytes) onto a branch.

        :param repo: repository id.
        :param branch: destination branch.
        :param dest_path: destination path.
        :param src_ref: source ref (default: the destination branch).
        :param src_path: source path.
        :param force: allow on a read-only repository.
        :raises ApiError: 404 missing source or branch.
        """
        validate_path(dest_path)
        validate_path(src_path)
        with self.write() as tx:
            repository = tx.writable_branch(repo, branch, force)
            found = tx.view_get(repo, tx.resolve(repo, src_ref or branch), src_path)
            if found is None:
                raise errors.not_found("not found")
            source = tx.entry(found[1])
            blob = Blob(source.blob, source.checksum, source.size)
            return _stage_new_version(tx, repository, branch, dest_path, blob, source.content_type, source.metadata)

    def update_object_metadata(self, repo: str, branch: str, path: str, metadata: Mapping[str, str]) -> None:
        """Replace the user metadata of an object on a branch (uncommitted).

        :param repo: repository id.
        :param branch: branch name.
        :param path: object path.
        :param metadata: new user metadata.
        :raises ApiError: 404 missing branch or object.
        """
        validate_path(path)
        with self.write() as tx:
            tx.writable_repository(repo)
            tx.require_branch(repo, branch)
            tx.check_not_protected(repo, branch)
            found = tx.view_get(repo, tx.resolve(repo, branch), path)
            if found is None:
                raise errors.not_found("not found")
            current = tx.entry(found[1])
            entry = tx.add_entry(
                address=current.address,
                blob=current.blob,
                checksum=current.checksum,
                size=current.size,
                mtime=current.mtime,
                content_type=current.content_type,
                metadata=metadata,
            )
            tx.stage(repo, branch, path, entry)
