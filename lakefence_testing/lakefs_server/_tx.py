"""Transactions: the SQLite schema and the queries inside one transaction (:class:`Tx`): refs and
ref expressions, trees, staging and sealed changes, entries, commits, merge base, three-way merge.

A tree ("meta-range") is stored once per distinct content, keyed by a hash of its sorted
entries, so the cost of commit, merge and diff depends on tree size and on the distance to the
merge base, never on how long the history is.
"""

from __future__ import annotations

import fnmatch
import hashlib
import heapq
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lakefence_testing.lakefs_server import _errors as errors
from lakefence_testing.lakefs_server._ident import commit_id as compute_commit_id
from lakefence_testing.lakefs_server._ident import entry_identity
from lakefence_testing.lakefs_server._model import (
    COMMIT_VERSION,
    FULL_HASH_RE,
    HASH_RE,
    MODIFIERS_RE,
    Commit,
    Entry,
    Repository,
    Resolved,
    Val,
    diff_sorted,
    merge_sorted,
    same,
    to_json,
    tree_id,
    upper_bound,
    validate_ref,
)

if TYPE_CHECKING:
    from lakefence_testing.lakefs_server._base import StoreBase

BATCH = 1000

SCHEMA = """
CREATE TABLE IF NOT EXISTS repositories (
    id TEXT PRIMARY KEY,
    storage_namespace TEXT NOT NULL,
    storage_id TEXT NOT NULL,
    default_branch TEXT NOT NULL,
    creation_date INTEGER NOT NULL,
    read_only INTEGER NOT NULL,
    metadata TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS used_namespaces (namespace TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS branches (
    repo TEXT NOT NULL,
    name TEXT NOT NULL,
    commit_id TEXT NOT NULL,
    hidden INTEGER NOT NULL,
    PRIMARY KEY (repo, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tags (
    repo TEXT NOT NULL,
    name TEXT NOT NULL,
    commit_id TEXT NOT NULL,
    PRIMARY KEY (repo, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS commits (
    repo TEXT NOT NULL,
    id TEXT NOT NULL,
    parents TEXT NOT NULL,
    committer TEXT NOT NULL,
    message TEXT NOT NULL,
    creation_ns INTEGER NOT NULL,
    meta_range_id TEXT NOT NULL,
    metadata TEXT NOT NULL,
    generation INTEGER NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (repo, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entries (
    id TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    address TEXT NOT NULL,
    blob TEXT NOT NULL,
    checksum TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    metadata TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta_ranges (id TEXT PRIMARY KEY, count INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tree_entries (
    meta_range_id TEXT NOT NULL,
    path TEXT NOT NULL,
    identity TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    PRIMARY KEY (meta_range_id, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS staging (
    repo TEXT NOT NULL,
    branch TEXT NOT NULL,
    path TEXT NOT NULL,
    identity TEXT,
    entry_id TEXT,
    PRIMARY KEY (repo, branch, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sealed (
    repo TEXT NOT NULL,
    branch TEXT NOT NULL,
    path TEXT NOT NULL,
    identity TEXT,
    entry_id TEXT,
    PRIMARY KEY (repo, branch, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS settings (
    repo TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (repo, key)
) WITHOUT ROWID;
"""
# Settings key of the branch protection rules (lakeFS's ProtectionSettingKey).
PROTECTION_KEY = "protected_branches"

class Tx:
    """Queries inside one SQLite transaction."""

    def __init__(self, conn: sqlite3.Connection, store: StoreBase) -> None:
        self.conn = conn
        self.store = store

    def one(self, sql: str, args: Iterable[Any] = ()) -> Any:
        return self.conn.execute(sql, tuple(args)).fetchone()

    # --- repositories -------------------------------------------------------------------

    def repository(self, repository: str) -> Repository:
        row = self.one("SELECT * FROM repositories WHERE id = ?", (repository,))
        if row is None:
            raise errors.not_found("repository not found")
        return Repository(
            id=row[0],
            storage_namespace=row[1],
            storage_id=row[2],
            default_branch=row[3],
            creation_date=row[4],
            read_only=bool(row[5]),
            metadata=json.loads(row[6]),
        )

    def writable_repository(self, repository: str, force: bool = False) -> Repository:
        repo = self.repository(repository)
        if repo.read_only and not force:
            raise errors.forbidden("read-only repository")
        return repo

    def writable_branch(self, repo: str, branch: str, force: bool = False) -> Repository:
        """Return the repository of a branch an object is staged on, checked in lakeFS's order.

        :raises ApiError: 403 read-only repository (unless ``force``) or protected branch, 404 no such branch.
        """
        repository = self.writable_repository(repo, force)
        if self.branch_commit(repo, branch) is None:
            raise errors.not_found(f"branch '{branch}' not found")
        self.check_not_protected(repo, branch)
        return repository

    # --- branch protection --------------------------------------------------------------

    def protection_patterns(self, repo: str) -> list[str] | None:
        """Return the repository's protection patterns, or None if never set."""
        row = self.one("SELECT value FROM settings WHERE repo = ? AND key = ?", (repo, PROTECTION_KEY))
        return None if row is None else list(json.loads(row[0]))

    def check_not_protected(self, repo: str, branch: str, message: str = "cannot write to protected branch") -> None:
        """Refuse (403) a change to a branch matching a protection pattern.

        lakeFS blocks staging writes and commits (and hard resets) on a protected branch; it
        matches names with glob patterns (``*``, ``?``, ``[...]``).
        """
        for pattern in self.protection_patterns(repo) or ():
            if fnmatch.fnmatchcase(branch, pattern):
                raise errors.forbidden(message)

    # --- refs ---------------------------------------------------------------------------

    def branch_commit(self, repo: str, branch: str) -> str | None:
        row = self.one("SELECT commit_id FROM branches WHERE repo = ? AND name = ?", (repo, branch))
        return None if row is None else str(row[0])

    def require_branch(self, repo: str, branch: str) -> str:
        head = self.branch_commit(repo, branch)
        if head is None:
            raise errors.not_found("branch not found")
        return head

    def tag_commit(self, repo: str, tag: str) -> str | None:
        row = self.one("SELECT commit_id FROM tags WHERE repo = ? AND name = ?", (repo, tag))
        return None if row is None else str(row[0])

    def commit(self, repo: str, commit_id: str) -> Commit:
        self.store.count_stat("commit_reads")
        row = self.one("SELECT * FROM commits WHERE repo = ? AND id = ?", (repo, commit_id))
        if row is None:
            raise errors.not_found("commit not found")
        return Commit(
            id=row[1],
            parents=json.loads(row[2]),
            committer=row[3],
            message=row[4],
            creation_ns=row[5],
            meta_range_id=row[6],
            metadata=json.loads(row[7]),
            generation=row[8],
            version=row[9],
        )

    def commit_by_prefix(self, repo: str, prefix: str) -> str | None:
        prefix = prefix.lower()
        rows = self.conn.execute(
            "SELECT id FROM commits WHERE repo = ? AND id >= ? AND id < ? LIMIT 2",
            (repo, prefix, upper_bound(prefix)),
        ).fetchall()
        return str(rows[0][0]) if len(rows) == 1 else None

    def resolve(self, repo: str, ref: str) -> Resolved:
        """Dereference a lakeFS ref expression (``pkg/graveler/ref``)."""
        validate_ref(ref)
        parts = [m.group(0) for m in MODIFIERS_RE.finditer(ref)]
        if not parts or not parts[0]:
            raise errors.bad_request("ref: invalid value: validation error")
        base = parts[0]
        modifiers: list[tuple[str, int]] = []
        for mod in parts[1:]:
            typ, arg = mod[0], mod[1:]
            if typ in "@$" and arg:
                raise errors.bad_request("ref: invalid value: validation error")
            try:
                modifiers.append((typ, int(arg) if arg else 1))
            except ValueError as exc:
                raise errors.bad_request(
                    f"could not parse modifier {mod}: ref: invalid value: validation error"
                ) from exc
        kind, branch, commit_id = self._resolve_base(repo, base)
        if not modifiers:
            return Resolved(commit_id, branch if kind == "branch" else None)
        for typ, amount in modifiers:
            if typ in "@$":
                if kind != "branch" or len(modifiers) != 1:
                    raise errors.bad_request("ref: invalid value: validation error")
                if typ == "@":
                    return Resolved(commit_id)
                return Resolved(commit_id, branch, staging_only=True)
            if typ == "~":
                for _ in range(amount):
                    parents = self.commit(repo, commit_id).parents
                    if not parents:
                        raise errors.not_found("not found")
                    commit_id = parents[0]
            elif amount:
                parents = self.commit(repo, commit_id).parents
                if amount > len(parents):
                    raise errors.bad_request("ref: invalid value: validation error")
                commit_id = parents[amount - 1]
        return Resolved(commit_id)

    def _resolve_base(self, repo: str, rev: str) -> tuple[str, str | None, str]:
        if FULL_HASH_RE.match(rev):
            row = self.one("SELECT id FROM commits WHERE repo = ? AND id = ?", (repo, rev.lower()))
            if row is not None:
                return ("commit", None, str(row[0]))
        head = self.branch_commit(repo, rev)
        if head is not None:
            return ("branch", rev, head)
        tagged = self.tag_commit(repo, rev)
        if tagged is not None:
            return ("tag", None, tagged)
        if HASH_RE.match(rev):
            found = self.commit_by_prefix(repo, rev)
            if found is not None:
                return ("commit", None, found)
        raise errors.not_found("not found")

    def dereference_commit_id(self, repo: str, ref: str) -> str:
        """Resolve to a commit id with the messages of lakeFS's ``catalog.dereferenceCommitID``."""
        resolved = self.resolve(repo, ref)
        if resolved.staging_only:
            raise errors.bad_request("ref: invalid value: validation error: should point to a commit")
        return resolved.commit_id

    def resolve_commit(self, repo: str, ref: str) -> Commit:
        resolved = self.resolve(repo, ref)
        if resolved.staging_only:
            raise errors.bad_request(f"reference '{ref}': reference to staging area with $ is not a commit")
        return self.commit(repo, resolved.commit_id)

    # --- trees --------------------------------------------------------------------------

    def tree_iter(self, meta_range_id: str, start: str = "") -> Iterator[tuple[str, Val]]:
        if not meta_range_id:
            return
        rows = self.conn.execute(
            "SELECT path, identity, entry_id FROM tree_entries WHERE meta_range_id = ? AND path >= ?"
            " ORDER BY path LIMIT ?",
            (meta_range_id, start, BATCH),
        ).fetchall()
        while rows:
            self.store.count_stat("tree_rows_read", len(rows))
            for path, identity, entry_id in rows:
                yield path, (identity, entry_id)
            if len(rows) < BATCH:
                return
            rows = self.conn.execute(
                "SELECT path, identity, entry_id FROM tree_entries WHERE meta_range_id = ? AND path > ?"
                " ORDER BY path LIMIT ?",
                (meta_range_id, rows[-1][0], BATCH),
            ).fetchall()

    def tree_get(self, meta_range_id: str, path: str) -> Val | None:
        if not meta_range_id:
            return None
        row = self.one(
            "SELECT identity, entry_id FROM tree_entries WHERE meta_range_id = ? AND path = ?",
            (meta_range_id, path),
        )
        return None if row is None else (str(row[0]), str(row[1]))

    def write_tree(self, entries: list[tuple[str, Val]]) -> str:
        new_id = tree_id(entries)
        if self.one("SELECT 1 FROM meta_ranges WHERE id = ?", (new_id,)) is None:
            self.conn.execute("INSERT INTO meta_ranges (id, count) VALUES (?, ?)", (new_id, len(entries)))
            self.conn.executemany(
                "INSERT INTO tree_entries (meta_range_id, path, identity, entry_id) VALUES (?, ?, ?, ?)",
                ((new_id, path, identity, entry_id) for path, (identity, entry_id) in entries),
            )
        return new_id

    def apply_changes(
        self, base: str, changes: Iterable[tuple[str, Val | None]], keep_same: bool = True
    ) -> str:
        """Return the id of ``base`` with sorted ``(path, entry or None)`` changes applied.

        With ``keep_same`` (a commit) a change identical by identity keeps the base's record;
        without (a merge) the change's record replaces it.
        """
        return self.write_tree(list(merge_sorted(self.tree_iter(base), iter(changes), keep_same=keep_same)))

    # --- staging ------------------------------------------------------------------------

    def staging_iter(self, repo: str, branch: str, start: str = "") -> Iterator[tuple[str, Val | None]]:
        rows = self.conn.execute(
            "SELECT path, identity, entry_id FROM staging WHERE repo = ? AND branch = ? AND path >= ?"
            " ORDER BY path LIMIT ?",
            (repo, branch, start, BATCH),
        ).fetchall()
        while rows:
            for path, identity, entry_id in rows:
                yield path, None if entry_id is None else (identity, entry_id)
            if len(rows) < BATCH:
                return
            rows = self.conn.execute(
                "SELECT path, identity, entry_id FROM staging WHERE repo = ? AND branch = ? AND path > ?"
                " ORDER BY path LIMIT ?",
                (repo, branch, rows[-1][0], BATCH),
            ).fetchall()

    def staged(self, repo: str, branch: str, path: str) -> tuple[bool, Val | None]:
        row = self.one(
            "SELECT identity, entry_id FROM staging WHERE repo = ? AND branch = ? AND path = ?",
            (repo, branch, path),
        )
        if row is None:
            return (False, None)
        return (True, None if row[1] is None else (str(row[0]), str(row[1])))

    def stage(self, repo: str, branch: str, path: str, entry: Entry | None) -> None:
        """Record an uncommitted entry, or a tombstone for ``None``."""
        self.conn.execute(
            "INSERT OR REPLACE INTO staging VALUES (?, ?, ?, ?, ?)",
            (repo, branch, path, None if entry is None else entry.identity, None if entry is None else entry.id),
        )

    def uncommitted_iter(
        self, repo: str, branch: str, meta_range_id: str, start: str = ""
    ) -> Iterator[tuple[str, Val | None, Val | None]]:
        """Yield ``(path, committed, staged)`` for staged rows that change the branch."""
        for path, staged in self.staging_iter(repo, branch, start):
            committed = self.tree_get(meta_range_id, path)
            if not same(committed, staged):
                yield (path, committed, staged)

    # lakeFS seals a branch's staging token (keeps it aside, still visible) when it resets a
    # prefix and while it commits; hard reset refuses a branch whose sealed tokens hold changes.
    # ``sealed`` keeps a snapshot of the staging rows at sealing; staging stays the branch's view.

    def seal(self, repo: str, branch: str) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO sealed SELECT * FROM staging WHERE repo = ? AND branch = ?", (repo, branch)
        )

    def drop_sealed(self, repo: str, branch: str) -> None:
        self.conn.execute("DELETE FROM sealed WHERE repo = ? AND branch = ?", (repo, branch))

    def sealed_dirty(self, repo: str, branch: str, meta_range_id: str) -> bool:
        rows = self.conn.execute(
            "SELECT path, identity, entry_id FROM sealed WHERE repo = ? AND branch = ?", (repo, branch)
        ).fetchall()
        for path, identity, entry_id in rows:
            sealed = None if entry_id is None else (str(identity), str(entry_id))
            if not same(self.tree_get(meta_range_id, path), sealed):
                return True
        return False

    def set_branch(self, repo: str, branch: str, commit_id: str) -> None:
        """Point a branch at a new commit (commit, merge, revert, cherry-pick).

        Like lakeFS, which seals the staging area when the operation starts and drops it when
        it lands, this drops the branch's staged rows: after a commit they are in the commit;
        the others require a clean branch, so what is left are removals of paths the tree did
        not have (they would otherwise take effect once a later commit adds those paths).
        """
        self.conn.execute(
            "UPDATE branches SET commit_id = ? WHERE repo = ? AND name = ?", (commit_id, repo, branch)
        )
        self.conn.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo, branch))
        self.drop_sealed(repo, branch)

    def is_dirty(self, repo: str, branch: str, meta_range_id: str) -> bool:
        return next(self.uncommitted_iter(repo, branch, meta_range_id), None) is not None

    def view_iter(self, repo: str, resolved: Resolved, start: str = "") -> Iterator[tuple[str, Val]]:
        """List ``(path, entry)`` as seen through a resolved ref, uncommitted changes included."""
        meta_range_id = self.commit(repo, resolved.commit_id).meta_range_id
        tree = self.tree_iter(meta_range_id, start)
        if resolved.branch is None:
            return tree
        return merge_sorted(tree, self.staging_iter(repo, resolved.branch, start))

    def view_get(self, repo: str, resolved: Resolved, path: str) -> Val | None:
        if resolved.branch is not None:
            found, staged = self.staged(repo, resolved.branch, path)
            if found:
                return staged
        return self.tree_get(self.commit(repo, resolved.commit_id).meta_range_id, path)

    # --- entries ------------------------------------------------------------------------

    def entry(self, entry_id: str) -> Entry:
        row = self.one("SELECT * FROM entries WHERE id = ?", (entry_id,))
        if row is None:
            raise errors.ApiError(500, f"entry {entry_id} missing")
        return Entry(
            id=row[0],
            identity=row[1],
            address=row[2],
            blob=row[3],
            checksum=row[4],
            size=row[5],
            mtime=row[6],
            content_type=row[7],
            metadata=json.loads(row[8]),
        )

    def add_entry(
        self,
        *,
        address: str,
        blob: str,
        checksum: str,
        size: int,
        mtime: int,
        content_type: str,
        metadata: Mapping[str, str],
    ) -> Entry:
        fields = {
            "address": address,
            "blob": blob,
            "checksum": checksum,
            "size": size,
            "mtime": mtime,
            "content_type": content_type,
            "metadata": dict(metadata),
        }
        entry_id = hashlib.sha256(to_json(fields).encode("utf-8")).hexdigest()
        identity = entry_identity(size=size, checksum=checksum, metadata=metadata, content_type=content_type)
        self.conn.execute(
            "INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entry_id, identity, address, blob, checksum, size, mtime, content_type, to_json(dict(metadata))),
        )
        return Entry(entry_id, identity, address, blob, checksum, size, mtime, content_type, dict(metadata))

    # --- commits ------------------------------------------------------------------------

    def add_commit(
        self,
        repo: str,
        *,
        parents: list[str],
        committer: str,
        message: str,
        meta_range_id: str,
        metadata: Mapping[str, str],
        generation: int,
        creation_ns: int | None = None,
    ) -> Commit:
        if creation_ns is None:
            creation_ns = time.time_ns()
        cid = compute_commit_id(
            committer=committer,
            message=message,
            meta_range_id=meta_range_id,
            creation_date=creation_ns // 1_000_000_000,
            metadata=metadata,
            parents=parents,
        )
        self.conn.execute(
            "INSERT OR IGNORE INTO commits VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                repo,
                cid,
                json.dumps(parents),
                committer,
                message,
                creation_ns,
                meta_range_id,
                to_json(dict(metadata)),
                generation,
                COMMIT_VERSION,
            ),
        )
        return self.commit(repo, cid)

    def merge_base(self, repo: str, left: str, right: str) -> Commit:
        """Find the best common ancestor, walking by generation as lakeFS does."""
        from_left, from_right = 1, 2
        reached: dict[str, int] = {left: from_left}
        reached[right] = reached.get(right, 0) | from_right
        queue: list[tuple[int, int, int, Commit]] = []
        order = 0

        def enqueue(cid: str) -> Commit:
            nonlocal order
            c = self.commit(repo, cid)
            heapq.heappush(queue, (-c.generation, -c.creation_ns, order, c))
            order += 1
            return c

        left_commit = enqueue(left)
        if left == right:
            return left_commit
        enqueue(right)
        while queue:
            current = heapq.heappop(queue)[3]
            flags = reached[current.id]
            for parent in current.parents:
                if parent not in reached:
                    enqueue(parent)
                reached[parent] = reached.get(parent, 0) | flags
                if reached[parent] == from_left | from_right:
                    return self.commit(repo, parent)
        raise errors.ApiError(500, "no merge base")

    def merge_trees(
        self, dest: str, source: str, base: str, strategy: str, allow_empty: bool
    ) -> str:
        """Three-way merge of trees (``committed.Manager.Merge``)."""
        if source == base and not allow_empty:
            raise errors.bad_request("no changes")
        if dest == base:
            return source
        changes: list[tuple[str, Val | None]] = []
        for path, base_entry, source_entry in diff_sorted(self.tree_iter(base), self.tree_iter(source)):
            dest_entry = self.tree_get(dest, path)
            if same(dest_entry, source_entry):
                # The same change on both sides: lakeFS keeps the source's record (its address).
                if dest_entry != source_entry:
                    changes.append((path, source_entry))
                continue
            if same(dest_entry, base_entry) or strategy == "source-wins":
                changes.append((path, source_entry))
            elif strategy != "dest-wins":
                raise errors.conflict("conflict found")
        return self.apply_changes(dest, changes, keep_same=False)
