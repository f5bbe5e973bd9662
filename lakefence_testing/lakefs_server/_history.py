"""Commits, log, diff and merge: everything that walks or combines trees."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator, Mapping
from typing import Any

from lakefence_testing.lakefs_server import _errors as errors
from lakefence_testing.lakefs_server._actions import run_pre_merge_hooks
from lakefence_testing.lakefs_server._base import StoreBase
from lakefence_testing.lakefs_server._model import (
    MERGE_STRATEGIES,
    MERGE_STRATEGY_KEY,
    REF_RE,
    Commit,
    Entry,
    Page,
    Val,
    diff_sorted,
    paginate,
    same,
    upper_bound,
    validate_branch_id,
    validate_ref,
)
from lakefence_testing.lakefs_server._tx import Tx

_INT64_MAX = 2**63 - 1


def _clamp_ns(seconds: int) -> int:
    # lakeFS accepts any int64 date (Go's time.Unix); nanoseconds since 1970 of dates past
    # about year 2262 do not fit SQLite's 64-bit integers: those are kept at the limit.
    return max(-_INT64_MAX - 1, min(_INT64_MAX, seconds * 1_000_000_000))


class HistoryMixin(StoreBase):
    """Commits, log, diff and merge: everything that walks or combines trees."""

    # --- commits ------------------------------------------------------------------------

    def commit(
        self,
        repo: str,
        branch: str,
        message: str,
        metadata: Mapping[str, str] | None = None,
        date: int | None = None,
        allow_empty: bool = False,
        force: bool = False,
        source_metarange: str | None = None,
    ) -> Commit:
        """Commit a branch's staged changes on top of its current HEAD.

        :param repo: repository id.
        :param branch: branch name.
        :param message: commit message.
        :param metadata: commit metadata.
        :param date: creation date override (Unix seconds).
        :param allow_empty: commit even if nothing changed.
        :param force: allow on a read-only repository.
        :param source_metarange: commit this tree id instead of the staged changes (the branch
            must be clean); like lakeFS, the id is not checked.
        :raises ApiError: 400 nothing to commit, 404 missing branch.
        """
        validate_branch_id(branch)
        with self.write() as tx:
            tx.repository(repo)
            tx.check_not_protected(repo, branch, "cannot commit to protected branch")
            tx.writable_repository(repo, force)
            if tx.branch_commit(repo, branch) is None and not self._resolves(tx, repo, branch):
                # lakeFS runs the prepare-commit hooks first, listing the actions of the ref
                # named like the branch; that fails unless it names a tag or commit.
                raise errors.not_found(
                    f"prepare-commit hook aborted, run id '{errors.run_id()}': list actions from commit:"
                    " listing actions: not found"
                )
            head = tx.commit(repo, tx.require_branch(repo, branch))
            # lakeFS decides "no changes" by the staged changes, not by tree ids: committing
            # nothing onto a repository's first commit (tree id "") is still no change.
            if source_metarange is not None:
                if tx.is_dirty(repo, branch, head.meta_range_id):
                    raise errors.bad_request("cannot use source MetaRange on a branch with uncommitted changes")
                tree = source_metarange
            else:
                if not allow_empty and not tx.is_dirty(repo, branch, head.meta_range_id):
                    raise errors.no_changes("commit")
                tree = tx.apply_changes(head.meta_range_id, tx.staging_iter(repo, branch))
            created = tx.add_commit(
                repo,
                parents=[head.id],
                committer=self.committer,
                message=message,
                meta_range_id=tree,
                metadata=metadata or {},
                generation=head.generation + 1,
                creation_ns=None if date is None else _clamp_ns(date),
            )
            tx.set_branch(repo, branch, created.id)
            tx.conn.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo, branch))
            return created

    @staticmethod
    def _resolves(tx: Tx, repo: str, ref: str) -> bool:
        try:
            tx.resolve(repo, ref)
        except errors.ApiError:
            return False
        return True

    def get_commit(self, repo: str, ref: str) -> Commit:
        """Return the commit a ref expression names.

        :param repo: repository id.
        :param ref: ref expression.
        :raises ApiError: 404 if unknown.
        """
        with self.read() as tx:
            tx.repository(repo)
            # getCommit maps only "not found" (404 "commit not found"); a ref it cannot parse
            # or that names the staging area is a 500 there.
            try:
                resolved = tx.resolve(repo, ref)
            except errors.ApiError as exc:
                if exc.status == 404 or not REF_RE.match(ref):
                    raise errors.not_found("commit not found") from exc
                raise errors.ApiError(500, exc.message) from exc
            if resolved.staging_only:
                raise errors.ApiError(500, "ref: invalid value: validation error: should point to a commit")
            return tx.commit(repo, resolved.commit_id)

    def log(
        self,
        repo: str,
        ref: str,
        *,
        after: str = "",
        limit: int = 100,
        objects: list[str] | None = None,
        prefixes: list[str] | None = None,
        stop_on_limit: bool = False,
        first_parent: bool = False,
        since_ns: int | None = None,
        stop_at: str = "",
    ) -> tuple[list[Commit], bool]:
        """List commits reachable from ``ref``, newest first (``catalog.ListCommits``).

        :param repo: repository id.
        :param ref: start ref expression.
        :param after: resume after this commit (pagination token).
        :param limit: page size.
        :param objects: keep only non-merge commits that changed one of these paths.
        :param prefixes: keep only non-merge commits that changed a path under these prefixes.
        :param stop_on_limit: lakeFS ``limit``: stop after ``limit`` results.
        :param first_parent: follow only first parents.
        :param since_ns: skip commits older than this (Unix nanoseconds, as lakeFS compares).
        :param stop_at: stop at this ref (inclusive).
        :raises ApiError: 404 unknown ref.
        """
        paths = [(p, False) for p in objects or []] + [(p, True) for p in prefixes or []]
        validate_ref(ref)
        with self.read() as tx:
            tx.repository(repo)
            with errors.context("ref"):
                start = tx.commit(repo, tx.dereference_commit_id(repo, ref))
            with errors.context("stop_at"):
                stop_id = tx.dereference_commit_id(repo, stop_at) if stop_at else ""
            with errors.context("from ref"):
                after_id = tx.dereference_commit_id(repo, after) if after else ""
            it = self._walk(tx, repo, start, first_parent, since_ns)
            if after_id:
                for c in it:
                    if c.id == after_id:
                        break
            found: list[Commit] = []
            for c in it:
                if paths and not (len(c.parents) == 1 and self._touches(tx, repo, c, paths)):
                    continue
                found.append(c)
                if (
                    (stop_on_limit and len(found) >= limit)
                    or len(found) >= limit + 1
                    or found[-1].id == stop_id
                ):
                    break
        return found[:limit], len(found) > limit

    @staticmethod
    def _walk(
        tx: Tx, repo: str, start: Commit, first_parent: bool, since_ns: int | None
    ) -> Iterator[Commit]:
        # Priority by creation date then id, as lakeFS's CommitIterator.
        queue: list[tuple[int, str, Commit]] = []
        visited: set[str] = set()

        def push(c: Commit) -> None:
            if since_ns is None or c.creation_ns >= since_ns:
                heapq.heappush(queue, (-c.creation_ns, "".join(chr(0xFFFF - ord(ch)) for ch in c.id), c))

        push(start)
        visited.add(start.id)
        while queue:
            current = heapq.heappop(queue)[2]
            parents = current.parents[:1] if first_parent else current.parents
            for parent in parents:
                if parent not in visited:
                    visited.add(parent)
                    push(tx.commit(repo, parent))
            yield current

    @staticmethod
    def _touches(tx: Tx, repo: str, c: Commit, paths: list[tuple[str, bool]]) -> bool:
        parent_tree = tx.commit(repo, c.parents[0]).meta_range_id
        for path, is_prefix in paths:
            if is_prefix:
                changed = diff_sorted(tx.tree_iter(parent_tree, path), tx.tree_iter(c.meta_range_id, path))
                first = next(changed, None)
                if first is not None and first[0].startswith(path):
                    return True
            elif not same(tx.tree_get(parent_tree, path), tx.tree_get(c.meta_range_id, path)):
                return True
        return False

    # --- diff and merge -----------------------------------------------------------------

    def diff_refs(
        self,
        repo: str,
        left: str,
        right: str,
        *,
        diff_type: str,
        prefix: str,
        after: str,
        delimiter: str,
        limit: int,
        tx: Tx | None = None,
    ) -> Page:
        """Diff two refs (``two_dot``: trees; ``three_dot``: what merging right into left brings).

        Items are ``(path, (type, entry))`` (the right entry, or the left one when removed), or
        ``(path, None)`` for a common prefix.

        :param repo: repository id.
        :param left: left ref expression.
        :param right: right ref expression.
        :param diff_type: ``two_dot`` or ``three_dot``.
        :param prefix: only paths under this prefix.
        :param after: pagination token.
        :param delimiter: group common prefixes.
        :param limit: page size.
        :param tx: read inside this transaction instead of a new snapshot.
        :raises ApiError: 404 unknown refs.
        """
        validate_ref(left, "left")
        validate_ref(right, "right")
        with self.reading(tx) as tx:
            tx.repository(repo)
            if diff_type == "two_dot":
                left_commit = tx.resolve_commit(repo, left)
                right_resolved = tx.resolve(repo, right)

                def make_iter(start: str) -> Iterator[tuple[str, Any]]:
                    right_view = (
                        tx.view_iter(repo, right_resolved, start)
                        if right_resolved.staging_only
                        else tx.tree_iter(tx.commit(repo, right_resolved.commit_id).meta_range_id, start)
                    )
                    for path, lval, rval in diff_sorted(tx.tree_iter(left_commit.meta_range_id, start), right_view):
                        yield path, self._diff_item(tx, lval, rval)

            else:
                with errors.context(f"get commit by ref {right}"):
                    source = tx.resolve_commit(repo, right)
                with errors.context(f"get commit by branch {left}"):
                    dest = tx.resolve_commit(repo, left)
                base = tx.merge_base(repo, source.id, dest.id)

                def make_iter(start: str) -> Iterator[tuple[str, Any]]:
                    yield from self._compare(tx, dest.meta_range_id, source.meta_range_id, base.meta_range_id, start)

            start = self._diff_start(prefix, after, delimiter)
            page = paginate(make_iter, prefix=prefix, after=after, delimiter=delimiter, limit=limit, start=start)
        return page

    @staticmethod
    def _diff_start(prefix: str, after: str, delimiter: str) -> str:
        if not after or after < prefix:
            return prefix
        if not delimiter:
            return after
        return upper_bound(after)

    @staticmethod
    def _diff_item(tx: Tx, left: Val | None, right: Val | None) -> tuple[str, Entry]:
        if left is None:
            assert right is not None
            return ("added", tx.entry(right[1]))
        if right is None:
            return ("removed", tx.entry(left[1]))
        return ("changed", tx.entry(right[1]))

    def _compare(
        self, tx: Tx, dest: str, source: str, base: str, start: str
    ) -> Iterator[tuple[str, Any]]:
        # The per-key rules of lakeFS's compareIterator (pkg/graveler/committed).
        for path, dval, sval in diff_sorted(tx.tree_iter(dest, start), tx.tree_iter(source, start)):
            bval = tx.tree_get(base, path)
            shown = sval if sval is not None else dval
            assert shown is not None
            entry = tx.entry(shown[1])
            if dval is None:
                if bval is None:
                    yield path, ("added", entry)
                elif not same(bval, sval):
                    yield path, ("conflict", entry)
            elif sval is None:
                if bval is not None:
                    yield path, ("removed" if same(bval, dval) else "conflict", entry)
            elif bval is None:
                yield path, ("conflict", entry)
            elif not same(bval, sval):
                yield path, ("changed" if same(bval, dval) else "conflict", entry)

    def diff_branch(
        self, repo: str, branch: str, *, prefix: str, after: str, delimiter: str, limit: int
    ) -> Page:
        """List a branch's uncommitted changes; items as in :meth:`diff_refs`.

        :param repo: repository id.
        :param branch: branch name.
        :param prefix: only paths under this prefix.
        :param after: pagination token.
        :param delimiter: group common prefixes.
        :param limit: page size.
        :raises ApiError: 404 unknown branch.
        """
        validate_branch_id(branch)
        with self.read() as tx:
            tx.repository(repo)
            head = tx.commit(repo, tx.require_branch(repo, branch))

            def make_iter(start: str) -> Iterator[tuple[str, Any]]:
                for path, committed, staged in tx.uncommitted_iter(repo, branch, head.meta_range_id, start):
                    kind, entry = self._diff_item(tx, committed, staged)
                    # An uncommitted removal reports size 0 (lakeFS has only a tombstone).
                    yield path, (kind, dataclasses.replace(entry, size=0) if kind == "removed" else entry)

            start = self._diff_start(prefix, after, delimiter)
            return paginate(make_iter, prefix=prefix, after=after, delimiter=delimiter, limit=limit, start=start)

    def find_merge_base(self, repo: str, source: str, dest: str) -> tuple[str, str, str]:
        """Return ``(source_commit, destination_commit, base_commit)`` ids.

        :param repo: repository id.
        :param source: source ref.
        :param dest: destination ref.
        :raises ApiError: 404 unknown refs.
        """
        with self.read() as tx:
            tx.repository(repo)
            # lakeFS's catalog passes (destination, source) to Graveler.FindMergeBase(from, to)
            # and answers its (from, to) as (source, destination): the ids come back swapped.
            validate_ref(dest, "destination")
            validate_ref(source, "source")
            with errors.context(f"get commit by ref {dest}"):
                from_commit = tx.resolve_commit(repo, dest)
            with errors.context(f"get commit by branch {source}"):
                to_commit = tx.resolve_commit(repo, source)
            base = tx.merge_base(repo, from_commit.id, to_commit.id)
        return from_commit.id, to_commit.id, base.id

    def merge(
        self,
        repo: str,
        source: str,
        dest: str,
        *,
        message: str = "",
        metadata: Mapping[str, str] | None = None,
        strategy: str = "",
        force: bool = False,
        allow_empty: bool = False,
        squash: bool = False,
    ) -> Commit:
        """Merge ``source`` into branch ``dest`` with a new commit (never a fast-forward).

        :param repo: repository id.
        :param source: source ref expression.
        :param dest: destination branch.
        :param message: commit message (default ``Merge '<source>' into '<dest>'``).
        :param metadata: commit metadata; ``.lakefs.merge.strategy`` is added.
        :param strategy: ``""``, ``dest-wins`` or ``source-wins``.
        :param force: merge even without changes / into a read-only repository.
        :param allow_empty: merge even without changes.
        :param squash: record only the destination as parent.
        :raises ApiError: 400 no changes / dirty / bad strategy, 404 unknown refs, 409 conflict.
        """
        validate_branch_id(dest, "destination")
        validate_ref(source, "source")
        if strategy not in MERGE_STRATEGIES:
            raise errors.bad_request("argument strategy: invalid value: validation error")
        message = message or f"Merge '{source}' into '{dest}'"
        with self.write() as tx:
            tx.writable_repository(repo, force)
            to_commit = tx.commit(repo, tx.require_branch(repo, dest))
            if tx.is_dirty(repo, dest, to_commit.meta_range_id):
                raise errors.bad_request("uncommitted changes (dirty branch)")
            # The order of checks of Graveler.Merge: refs, then strategy, then the trees.
            with errors.context(f"update branch {dest}"):
                with errors.context(f"get commit by ref {source}"):
                    from_commit = tx.resolve_commit(repo, source)
                base = tx.merge_base(repo, from_commit.id, to_commit.id)
                tree = self._merge_trees_or_conflict(
                    tx,
                    to_commit.meta_range_id,
                    from_commit.meta_range_id,
                    base.meta_range_id,
                    strategy,
                    allow_empty or force,
                )
            merged_metadata = dict(metadata or {})
            merged_metadata[MERGE_STRATEGY_KEY] = MERGE_STRATEGIES[strategy]
            created = tx.add_commit(
                repo,
                parents=[to_commit.id] if squash else [to_commit.id, from_commit.id],
                committer=self.committer,
                message=message,
                meta_range_id=tree,
                metadata=merged_metadata,
                generation=max(to_commit.generation, from_commit.generation) + 1,
            )
            # As lakeFS: pre-merge hooks of the source's tree see the computed commit before the branch moves.
            run_pre_merge_hooks(tx, repo=repo, branch=dest, source_ref=source, source=from_commit, merge=created)
            tx.set_branch(repo, dest, created.id)
            return created

    @staticmethod
    def _merge_trees_or_conflict(tx: Tx, dest: str, source: str, base: str, strategy: str, allow_empty: bool) -> str:
        # A merge conflict is the one error mergeIntoBranch answers with a MergeResult body.
        try:
            return tx.merge_trees(dest, source, base, strategy, allow_empty)
        except errors.ApiError as exc:
            if exc.status == 409:
                raise errors.merge_conflict() from exc
            raise

    def revert(
        self,
        repo: str,
        branch: str,
        ref: str,
        parent_number: int,
        *,
        message: str | None = None,
        metadata: Mapping[str, str] | None = None,
        allow_empty: bool = False,
        force: bool = False,
    ) -> Commit:
        """Add a commit undoing ``ref`` (relative to its ``parent_number``) on ``branch``.

        :param repo: repository id.
        :param branch: branch name.
        :param ref: commit to revert.
        :param parent_number: 1-based parent for merge commits, 0 otherwise.
        :param message: override of the default commit message.
        :param metadata: override of the commit metadata.
        :param allow_empty: allow a revert that changes nothing.
        :param force: allow on a read-only repository.
        :raises ApiError: 400 dirty/no changes/bad parent, 404 unknown refs, 409 conflict
            or merge commit without parent number.
        """
        validate_branch_id(branch)
        validate_ref(ref)
        if parent_number < 0:
            raise errors.bad_request("argument parentNumber: invalid value: validation error")
        with self.write() as tx:
            tx.writable_repository(repo, force)
            with errors.context(f"get commit from ref {ref}"):
                target = tx.resolve_commit(repo, ref)
            if len(target.parents) > 1 and parent_number <= 0:
                raise errors.conflict("must specify 1-based parent number for reverting merge commit")
            if parent_number > len(target.parents):
                raise errors.bad_request(
                    f"given commit does not have the given parent number: parent {parent_number}"
                )
            head = tx.commit(repo, tx.require_branch(repo, branch))
            if tx.is_dirty(repo, branch, head.meta_range_id):
                raise errors.bad_request("uncommitted changes (dirty branch)")
            parent_tree = ""
            if target.parents:
                parent_tree = tx.commit(repo, target.parents[max(parent_number - 1, 0)]).meta_range_id
            with errors.context("update branch"):
                tree = tx.merge_trees(head.meta_range_id, parent_tree, target.meta_range_id, "", allow_empty)
            if tree == head.meta_range_id and not allow_empty:
                raise errors.bad_request("update branch: no changes")
            created = tx.add_commit(
                repo,
                parents=[head.id],
                committer=self.committer,
                message=message or f"Revert {ref}",
                meta_range_id=tree,
                metadata=metadata if metadata is not None else {},
                generation=head.generation + 1,
            )
            tx.set_branch(repo, branch, created.id)
            return created

    def cherry_pick(
        self,
        repo: str,
        branch: str,
        ref: str,
        parent_number: int | None,
        *,
        message: str | None = None,
        metadata: Mapping[str, str] | None = None,
        force: bool = False,
    ) -> Commit:
        """Apply the changes ``ref`` made (relative to a parent) as a new commit on ``branch``.

        :param repo: repository id.
        :param branch: branch name.
        :param ref: commit to cherry-pick.
        :param parent_number: 1-based parent; required for merge commits.
        :param message: override of the commit message.
        :param metadata: override of the commit metadata.
        :param force: allow on a read-only repository.
        :raises ApiError: 400 dirty/no changes/bad parent, 404 unknown refs, 409 conflict.
        """
        validate_branch_id(branch)
        validate_ref(ref)
        if parent_number is not None and parent_number <= 0:
            raise errors.bad_request("argument parentNumber: invalid value: validation error")
        with self.write() as tx:
            tx.writable_repository(repo, force)
            with errors.context(f"get commit from ref {ref}"):
                target = tx.resolve_commit(repo, ref)
            if parent_number is None and len(target.parents) > 1:
                raise errors.bad_request("must specify 1-based parent number for cherry-picking merge commit")
            number = 1 if parent_number is None else parent_number
            if number > len(target.parents):
                raise errors.bad_request(f"parent {number}: given commit does not have the given parent number")
            head = tx.commit(repo, tx.require_branch(repo, branch))
            if tx.is_dirty(repo, branch, head.meta_range_id):
                raise errors.bad_request("uncommitted changes (dirty branch)")
            parent_tree = tx.commit(repo, target.parents[number - 1]).meta_range_id if target.parents else ""
            with errors.context("update branch"):
                tree = tx.merge_trees(head.meta_range_id, target.meta_range_id, parent_tree, "", False)
            new_metadata = dict(metadata if metadata is not None else target.metadata)
            new_metadata["cherry-pick-origin"] = target.id
            new_metadata["cherry-pick-committer"] = target.committer
            created = tx.add_commit(
                repo,
                parents=[head.id],
                committer=self.committer,
                message=message or target.message,
                meta_range_id=tree,
                metadata=new_metadata,
                generation=head.generation + 1,
            )
            tx.set_branch(repo, branch, created.id)
            return created
