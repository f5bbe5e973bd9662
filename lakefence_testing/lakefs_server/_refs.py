"""Repositories, branches and tags."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping

from lakefence_testing.lakefs_server import _errors as errors
from lakefence_testing.lakefs_server._base import StoreBase
from lakefence_testing.lakefs_server._model import (
    FIRST_COMMIT_MESSAGE,
    NAMESPACE_RE,
    REF_RE,
    Repository,
    to_json,
    upper_bound,
    validate_branch_id,
    validate_path,
    validate_ref,
    validate_repository_id,
    validate_tag_id,
)
from lakefence_testing.lakefs_server._tx import PROTECTION_KEY


def _protection_etag(patterns: list[str] | None) -> str:
    # lakeFS's ETag is a sha256 of the stored rules, "" for none (an empty rule set included).
    if not patterns:
        return ""
    return hashlib.sha256(to_json(sorted(set(patterns))).encode("utf-8")).hexdigest()


class RefsMixin(StoreBase):
    """Repositories, branches and tags."""

    # --- repositories -------------------------------------------------------------------

    def create_repository(
        self,
        name: str,
        storage_namespace: str,
        default_branch: str = "main",
        storage_id: str = "",
        read_only: bool = False,
        bare: bool = False,
        sample_data: bool = False,
    ) -> Repository:
        """Create a repository with its first commit and default branch (neither when ``bare``).

        As lakeFS: the default branch's name is not validated; a bare or read-only repository
        neither checks nor claims its storage namespace (lakeFS writes no ``_lakefs/dummy`` there).

        :param name: repository id.
        :param storage_namespace: ``local://...`` namespace, never reused by a writable repository.
        :param default_branch: name of the default branch.
        :param storage_id: blockstore id; only the single default ("") exists.
        :param read_only: create a read-only repository.
        :param bare: create no commit and no branch (for restoring refs), as lakeFS's ``bare``.
        :param sample_data: lakeFS's sample data: not available here (see the 501 below).
        :raises ApiError: 400 on invalid arguments or a used namespace, 409 if it exists; 501 for
            sample data in a writable repository (lakeFS's sample files are not shipped), checked
            before anything is created; 403 for sample data in a read-only repository (created
            first, as lakeFS does).
        """
        validate_repository_id(name)
        default_branch = default_branch or "main"
        if not storage_namespace:
            raise errors.bad_request("storage_namespace: required value: validation error")
        claims_namespace = not bare and not read_only
        with self.write() as tx:
            if tx.one("SELECT 1 FROM repositories WHERE id = ?", (name,)) is not None:
                raise errors.conflict("error creating repository: not unique")
            if storage_id:
                raise errors.bad_request("storage id: invalid value: validation error")
            if not NAMESPACE_RE.match(storage_namespace):
                raise errors.bad_request(
                    f"failed to match required regex {NAMESPACE_RE.pattern}: invalid namespace"
                )
            if claims_namespace and tx.one(
                "SELECT 1 FROM used_namespaces WHERE namespace = ?", (storage_namespace,)
            ):
                raise errors.bad_request(
                    f"failed to create repository: found lakeFS objects in the storage ({storage_id}:"
                    f"{storage_namespace}) key(_lakefs/dummy): storage namespace already in use"
                )
            if sample_data and claims_namespace:
                raise errors.ApiError(
                    501, "sample data is not supported by the local lakeFS test server: no repository created"
                )
            now = time.time_ns()
            if claims_namespace:
                tx.conn.execute("INSERT INTO used_namespaces VALUES (?)", (storage_namespace,))
            tx.conn.execute(
                "INSERT INTO repositories VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, storage_namespace, "", default_branch, now // 1_000_000_000, int(read_only), "{}"),
            )
            if bare:
                return tx.repository(name)
            first = tx.add_commit(
                name,
                parents=[],
                committer="",
                message=FIRST_COMMIT_MESSAGE,
                meta_range_id="",
                metadata={},
                generation=1,
                creation_ns=now,
            )
            tx.conn.execute("INSERT INTO branches VALUES (?, ?, ?, 0)", (name, default_branch, first.id))
            repository = tx.repository(name)
        if sample_data:
            # lakeFS creates the repository, then fails to write the samples into it.
            raise errors.forbidden("error populating sample repository: read-only repository")
        return repository

    def get_repository(self, name: str) -> Repository:
        """Return a repository.

        :param name: repository id.
        :raises ApiError: 404 if it does not exist.
        """
        with self.read() as tx:
            return tx.repository(name)

    def list_repositories(self, prefix: str, after: str, limit: int) -> tuple[list[Repository], bool]:
        """List repositories sorted by id.

        :param prefix: only ids with this prefix.
        :param after: only ids greater than this.
        :param limit: page size.
        """
        with self.read() as tx:
            rows = tx.conn.execute(
                "SELECT id FROM repositories WHERE id > ? AND id >= ? ORDER BY id", (after, prefix)
            ).fetchall()
            repos = [tx.repository(r[0]) for r in rows if r[0].startswith(prefix)][: limit + 1]
        return repos[:limit], len(repos) > limit

    def delete_repository(self, name: str, force: bool = False) -> None:
        """Delete a repository and all its refs, commits and staging.

        :param name: repository id.
        :param force: delete even a read-only repository.
        :raises ApiError: 403 read-only, 404 if it does not exist.
        """
        with self.write() as tx:
            tx.writable_repository(name, force)
            for table in ("branches", "tags", "commits", "staging", "sealed", "settings"):
                tx.conn.execute(f"DELETE FROM {table} WHERE repo = ?", (name,))
            tx.conn.execute("DELETE FROM repositories WHERE id = ?", (name,))

    def get_repository_metadata(self, name: str) -> dict[str, str]:
        """Return a repository's metadata.

        :param name: repository id.
        :raises ApiError: 404 if it does not exist.
        """
        return self.get_repository(name).metadata

    def update_repository_metadata(
        self, name: str, set_keys: Mapping[str, str], delete_keys: Iterable[str]
    ) -> None:
        """Set and delete repository metadata keys atomically.

        :param name: repository id.
        :param set_keys: keys to set.
        :param delete_keys: keys to remove.
        :raises ApiError: 404 if the repository does not exist.
        """
        with self.write() as tx:
            metadata = tx.repository(name).metadata
            metadata.update(set_keys)
            for key in delete_keys:
                metadata.pop(key, None)
            tx.conn.execute("UPDATE repositories SET metadata = ? WHERE id = ?", (to_json(metadata), name))

    # --- branches -----------------------------------------------------------------------

    def create_branch(
        self, repo: str, name: str, source: str, hidden: bool = False, force: bool = False
    ) -> str:
        """Create a branch at the commit ``source`` resolves to and return that commit id.

        :param repo: repository id.
        :param name: new branch name.
        :param source: any ref expression naming a commit.
        :param hidden: leave the branch out of default listings.
        :param force: allow on a read-only repository.
        :raises ApiError: 400 invalid name, 404 unknown source, 409 existing branch.
        """
        if not name:
            # lakeFS answers an empty name with a 500 (its validator error is not mapped).
            raise errors.ApiError(500, "argument branch: required value: validation error")
        try:
            validate_branch_id(name)
        except errors.ApiError as exc:
            raise errors.bad_request(
                f"{exc.message}: branch id must consist of letters, digits, underscores and dashes,"
                " and cannot start with a dash"
            ) from exc
        validate_ref(source)
        with self.write() as tx:
            tx.repository(repo)
            # lakeFS refuses a branch named like an existing commit id or tag (catalog.CreateBranch).
            if tx.one("SELECT 1 FROM commits WHERE repo = ? AND id = ?", (repo, name)) is not None:
                raise errors.conflict(f"commit ID {name}: conflict found")
            if tx.tag_commit(repo, name) is not None:
                raise errors.conflict(f"tag ID {name}: conflict found")
            tx.writable_repository(repo, force)
            with errors.context(f"source reference '{source}'"):
                resolved = tx.resolve(repo, source)
            if resolved.staging_only:
                raise errors.ApiError(500, f"source reference '{source}': can't create a branch without commit")
            if tx.branch_commit(repo, name) is not None:
                raise errors.conflict("branch already exists: not unique")
            tx.conn.execute(
                "INSERT INTO branches VALUES (?, ?, ?, ?)", (repo, name, resolved.commit_id, int(hidden))
            )
            return resolved.commit_id

    def get_branch(self, repo: str, name: str) -> str:
        """Return the commit id a branch points at.

        :param repo: repository id.
        :param name: branch name.
        :raises ApiError: 400 invalid name, 404 if the repository or branch does not exist.
        """
        validate_branch_id(name)
        with self.read() as tx:
            tx.repository(repo)
            return tx.require_branch(repo, name)

    def list_refs(
        self, repo: str, table: str, prefix: str, after: str, limit: int, show_hidden: bool = True
    ) -> tuple[list[tuple[str, str]], bool]:
        """List branches or tags as ``(name, commit_id)`` sorted by name.

        :param repo: repository id.
        :param table: ``"branches"`` or ``"tags"``.
        :param prefix: only names with this prefix.
        :param after: only names greater than this.
        :param limit: page size.
        :param show_hidden: include hidden branches.
        :raises ApiError: 404 if the repository does not exist.
        """
        hidden_clause = "" if show_hidden or table != "branches" else " AND hidden = 0"
        end = upper_bound(prefix) if prefix else "\U0010ffff"
        with self.read() as tx:
            tx.repository(repo)
            rows = tx.conn.execute(
                f"SELECT name, commit_id FROM {table} WHERE repo = ? AND name > ? AND name >= ?"
                f" AND name < ?{hidden_clause} ORDER BY name LIMIT ?",
                (repo, after, prefix, end, limit + 1),
            ).fetchall()
        refs = [(str(r[0]), str(r[1])) for r in rows]
        return refs[:limit], len(refs) > limit

    def delete_branch(self, repo: str, name: str, force: bool = False) -> None:
        """Delete a branch and its uncommitted changes.

        :param repo: repository id.
        :param name: branch name.
        :param force: allow on a read-only repository.
        :raises ApiError: 403 for the default branch, 404 if missing.
        """
        validate_branch_id(name)
        with self.write() as tx:
            repository = tx.writable_repository(repo, force)
            if repository.default_branch == name:
                raise errors.forbidden("cannot delete repository default branch")
            tx.require_branch(repo, name)
            tx.conn.execute("DELETE FROM branches WHERE repo = ? AND name = ?", (repo, name))
            tx.conn.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo, name))
            tx.drop_sealed(repo, name)

    def reset_branch(self, repo: str, branch: str, kind: str, path: str, force: bool = False) -> None:
        """Discard uncommitted changes: all, one object, or a common prefix.

        :param repo: repository id.
        :param branch: branch name.
        :param kind: ``reset``, ``object`` or ``common_prefix``.
        :param path: object path or prefix.
        :param force: allow on a read-only repository.
        :raises ApiError: 400 unknown kind, 404 missing branch.
        """
        if kind not in ("reset", "object", "common_prefix"):
            raise errors.bad_request("unknown reset type")
        validate_branch_id(branch)
        if kind == "object":
            validate_path(path)
        with self.write() as tx:
            tx.writable_repository(repo, force)
            tx.check_not_protected(repo, branch)
            with errors.context("getting branch" if kind == "object" else ""):
                tx.require_branch(repo, branch)
            if kind == "reset":
                tx.conn.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo, branch))
                tx.drop_sealed(repo, branch)
            elif kind == "object":
                tx.conn.execute(
                    "DELETE FROM staging WHERE repo = ? AND branch = ? AND path = ?", (repo, branch, path)
                )
            else:
                # lakeFS's ResetPrefix seals the staging token and writes the resets to a new one,
                # except that a path the commit lacks gets its tombstone in the sealed token.
                tx.seal(repo, branch)
                tree = tx.commit(repo, tx.require_branch(repo, branch)).meta_range_id
                end = upper_bound(path) if path else "\U0010ffff"
                for (sealed_path,) in tx.conn.execute(
                    "SELECT path FROM sealed WHERE repo = ? AND branch = ? AND path >= ? AND path < ?",
                    (repo, branch, path, end),
                ).fetchall():
                    if tx.tree_get(tree, sealed_path) is None:
                        tx.conn.execute(
                            "DELETE FROM sealed WHERE repo = ? AND branch = ? AND path = ?", (repo, branch, sealed_path)
                        )
                if path:
                    tx.conn.execute(
                        "DELETE FROM staging WHERE repo = ? AND branch = ? AND path >= ? AND path < ?",
                        (repo, branch, path, upper_bound(path)),
                    )
                else:
                    tx.conn.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo, branch))

    def hard_reset(self, repo: str, branch: str, ref: str, force: bool = False) -> None:
        """Point a branch at ``ref`` (dereferenced inside the update). Staged changes stay.

        :param repo: repository id.
        :param branch: branch name.
        :param ref: target ref expression.
        :param force: allow on a read-only repository.
        :raises ApiError: 404 missing branch or ref.
        """
        validate_branch_id(branch)
        validate_ref(ref)
        with self.write() as tx:
            tx.repository(repo)
            tx.check_not_protected(repo, branch, "protected branch")
            tx.writable_repository(repo, force)
            head = tx.commit(repo, tx.require_branch(repo, branch))
            # Only sealed changes count (lakeFS checks its sealed tokens): plain uncommitted
            # changes stay on the branch across a hard reset.
            if tx.sealed_dirty(repo, branch, head.meta_range_id):
                raise errors.dirty_branch(branch)
            with errors.context(f"hard-reset {branch} to {ref}"):
                target = tx.resolve_commit(repo, ref)
            tx.conn.execute(
                "UPDATE branches SET commit_id = ? WHERE repo = ? AND name = ?", (target.id, repo, branch)
            )

    # --- branch protection --------------------------------------------------------------

    def get_branch_protection(self, repo: str) -> tuple[list[str], str]:
        """Return the protection patterns (sorted) and their ETag ("" when none were ever set).

        :param repo: repository id.
        :raises ApiError: 404 if the repository does not exist.
        """
        with self.read() as tx:
            tx.repository(repo)
            patterns = tx.protection_patterns(repo)
        return sorted(patterns or []), _protection_etag(patterns)

    def set_branch_protection(self, repo: str, patterns: list[str], if_match: str | None) -> None:
        """Replace the protection patterns, optionally only if they still have ETag ``if_match``.

        :param repo: repository id.
        :param patterns: glob patterns of protected branch names.
        :param if_match: the ETag the caller last read; None sets unconditionally.
        :raises ApiError: 404 missing repository, 412 if ``if_match`` is stale.
        """
        with self.write() as tx:
            tx.repository(repo)
            current = tx.protection_patterns(repo)
            # As lakeFS's settings manager: a conditional update of never-set rules fails.
            if if_match is not None and (current is None or _protection_etag(current) != if_match):
                raise errors.ApiError(412, "Precondition failed")
            tx.conn.execute(
                "INSERT OR REPLACE INTO settings VALUES (?, ?, ?)",
                (repo, PROTECTION_KEY, to_json(sorted(set(patterns)))),
            )

    # --- tags ---------------------------------------------------------------------------

    def create_tag(self, repo: str, tag: str, ref: str, force: bool = False) -> str:
        """Create a tag at the commit ``ref`` resolves to and return that commit id.

        :param repo: repository id.
        :param tag: tag id.
        :param ref: ref expression.
        :param force: allow on a read-only repository.
        :raises ApiError: 400 invalid id, 404 unknown ref, 409 existing tag.
        """
        validate_tag_id(tag)
        with self.write() as tx:
            tx.repository(repo)
            # lakeFS refuses a tag named like an existing branch or commit id (catalog.CreateTag).
            if tx.branch_commit(repo, tag) is not None:
                raise errors.conflict(f"branch name {tag}: conflict found")
            if tx.one("SELECT 1 FROM commits WHERE repo = ? AND id = ?", (repo, tag)) is not None:
                raise errors.conflict(f"commit ID {tag}: conflict found")
            if not REF_RE.match(ref):
                # createTag does not validate the ref: one with spaces is simply not found.
                raise errors.not_found("not found")
            resolved = tx.resolve(repo, ref)
            if resolved.staging_only:
                raise errors.bad_request("ref: invalid value: validation error: should point to a commit")
            target = tx.commit(repo, resolved.commit_id)
            tx.writable_repository(repo, force)
            if tx.tag_commit(repo, tag) is not None:
                raise errors.conflict("tag already exists: not unique")
            tx.conn.execute("INSERT INTO tags VALUES (?, ?, ?)", (repo, tag, target.id))
            return target.id

    def get_tag(self, repo: str, tag: str) -> str:
        """Return the commit id of a tag.

        :param repo: repository id.
        :param tag: tag id.
        :raises ApiError: 404 if missing.
        """
        with self.read() as tx:
            tx.repository(repo)
            found = tx.tag_commit(repo, tag)
        if found is None:
            raise errors.not_found("tag not found")
        return found

    def delete_tag(self, repo: str, tag: str, force: bool = False) -> None:
        """Delete a tag.

        :param repo: repository id.
        :param tag: tag id.
        :param force: allow on a read-only repository.
        :raises ApiError: 404 if missing.
        """
        with self.write() as tx:
            tx.writable_repository(repo, force)
            if tx.tag_commit(repo, tag) is None:
                raise errors.not_found("tag not found")
            tx.conn.execute("DELETE FROM tags WHERE repo = ? AND name = ?", (repo, tag))
