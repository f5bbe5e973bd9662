"""Durable lakeFS data model: repositories, refs, commits, trees, staging and object bytes.

Metadata lives in one SQLite database (WAL mode). Every mutation runs in a ``BEGIN IMMEDIATE``
transaction, so branch updates serialize and each one is evaluated against the branch HEAD
current inside the transaction: the equivalent of lakeFS's ``SetIf`` retry loop. Object bytes
are content addressed on disk and made durable before the metadata that points at them.

A tree ("meta-range") is stored once per distinct content, keyed by a hash of its sorted
entries, so the cost of commit, merge and diff depends on tree size and on the distance to the
merge base, never on how long the history is.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import re
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from airflow_lakefence.testing.lakefs_server import _errors as errors
from airflow_lakefence.testing.lakefs_server._ident import (
    commit_id as compute_commit_id,
)
from airflow_lakefence.testing.lakefs_server._ident import entry_identity

REPOSITORY_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
BRANCH_ID_RE = re.compile(r"^\w[-\w]*$")
REF_RE = re.compile(r"^[^\s]+$")
HASH_RE = re.compile(r"^[a-fA-F0-9]{1,64}$")
FULL_HASH_RE = re.compile(r"^[a-fA-F0-9]{64}$")
MODIFIERS_RE = re.compile(r"(^|[~^@$])[^^~@$]*")
NAMESPACE_RE = re.compile(r"^local://")

FIRST_COMMIT_MESSAGE = "Repository created"
MERGE_STRATEGY_KEY = ".lakefs.merge.strategy"
MERGE_STRATEGIES = {"": "default", "dest-wins": "dest-wins", "source-wins": "source-wins"}
COMMIT_VERSION = 1
MAX_PATH_LENGTH = 1024
DELETE_OBJECTS_MAX = 1000
DEFAULT_CONTENT_TYPE = "application/octet-stream"

_BATCH = 1000

_SCHEMA = """
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
"""


# An entry as trees and staging hold it: (identity, entry id). lakeFS compares entries by
# identity only; the entry id also covers the physical address and mtime.
Val = tuple[str, str]


def same(a: Val | None, b: Val | None) -> bool:
    """Return whether two entries (or absences) are equal by lakeFS identity.

    :param a: an entry or None.
    :param b: an entry or None.
    """
    if a is None or b is None:
        return a is b
    return a[0] == b[0]


def upper_bound(prefix: str) -> str:
    """Return the smallest string greater than every string starting with ``prefix``.

    :param prefix: a non-empty prefix.
    """
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@dataclass(frozen=True)
class Blob:
    """Object bytes stored on disk, addressed by their sha256."""

    sha256: str
    md5: str
    size: int


@dataclass(frozen=True)
class Entry:
    """One object version: what a tree or a staging row points at."""

    id: str
    identity: str
    address: str
    blob: str
    checksum: str
    size: int
    mtime: int
    content_type: str
    metadata: dict[str, str]

    def stats(self, path: str, user_metadata: bool = True) -> dict[str, Any]:
        """Return the ``ObjectStats`` JSON of this entry at ``path``.

        :param path: the object's path.
        :param user_metadata: whether to include the user metadata.
        """
        return {
            "path": path,
            "path_type": "object",
            "physical_address": self.address,
            "checksum": self.checksum,
            "size_bytes": self.size,
            "mtime": self.mtime,
            "metadata": dict(self.metadata) if user_metadata else {},
            "content_type": self.content_type,
        }


@dataclass(frozen=True)
class Commit:
    """A commit as lakeFS stores it."""

    id: str
    parents: list[str]
    committer: str
    message: str
    creation_ns: int
    meta_range_id: str
    metadata: dict[str, str]
    generation: int
    version: int

    def to_api(self) -> dict[str, Any]:
        """Return the swagger ``Commit`` JSON."""
        return {
            "id": self.id,
            "parents": list(self.parents),
            "committer": self.committer,
            "message": self.message,
            "creation_date": self.creation_ns // 1_000_000_000,
            "meta_range_id": self.meta_range_id,
            "metadata": dict(self.metadata),
            "generation": self.generation,
            "version": self.version,
        }


@dataclass(frozen=True)
class Repository:
    """A repository record."""

    id: str
    storage_namespace: str
    storage_id: str
    default_branch: str
    creation_date: int
    read_only: bool
    metadata: dict[str, str]

    def to_api(self) -> dict[str, Any]:
        """Return the swagger ``Repository`` JSON."""
        return {
            "id": self.id,
            "creation_date": self.creation_date,
            "default_branch": self.default_branch,
            "storage_id": self.storage_id,
            "storage_namespace": self.storage_namespace,
            "read_only": self.read_only,
        }


@dataclass(frozen=True)
class Resolved:
    """A dereferenced ref expression.

    ``branch`` is set when reads through this ref must see the branch's uncommitted changes
    (a bare branch name, or ``branch$``).
    """

    commit_id: str
    branch: str | None = None
    staging_only: bool = False


@dataclass
class Page:
    """One page of a listing: items plus whether more exist."""

    items: list[tuple[str, Any]] = field(default_factory=list)
    has_more: bool = False


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _validate_repository_id(repository: str) -> None:
    if not REPOSITORY_ID_RE.match(repository):
        raise errors.bad_request("repository id: invalid value: validation error")


def _validate_branch_id(branch: str) -> None:
    if not branch:
        raise errors.bad_request("required value: validation error")
    if not BRANCH_ID_RE.match(branch):
        raise errors.bad_request("branch id: invalid value: validation error")


def _validate_ref(ref: str) -> None:
    if not ref:
        raise errors.bad_request("required value: validation error")
    if not REF_RE.match(ref):
        raise errors.bad_request("ref: invalid value: validation error")


def _validate_tag_id(tag: str) -> None:
    invalid = (
        not tag
        or tag == "@"
        or tag.endswith((".", ".lock"))
        or ".." in tag
        or "/" in tag
        or "@{" in tag
        or any(c in tag for c in "^:?*[\\")
        or any(ord(c) <= 0x20 for c in tag)
    )
    if invalid:
        raise errors.bad_request("tag id: invalid value: validation error")


def _validate_path(path: str) -> None:
    if not path:
        raise errors.bad_request("missing path: required value: validation error")
    if len(path.encode("utf-8")) > MAX_PATH_LENGTH:
        raise errors.bad_request(
            f"invalid value: {len(path)} is above maximum length ({MAX_PATH_LENGTH})"
        )


def _tree_id(entries: list[tuple[str, Val]]) -> str:
    # The empty tree keeps the id lakeFS gives a new repository's first commit.
    if not entries:
        return ""
    h = hashlib.sha256()
    for path, (_, entry_id) in entries:
        h.update(path.encode("utf-8"))
        h.update(b"\x00")
        h.update(entry_id.encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


def _merge_sorted(
    tree: Iterator[tuple[str, Val]], staged: Iterator[tuple[str, Val | None]], keep_same: bool = False
) -> Iterator[tuple[str, Val]]:
    """Overlay staged rows (entry or tombstone) on a sorted tree listing.

    With ``keep_same`` a staged entry identical (by identity) to the tree's keeps the tree's
    record, as lakeFS's committer does.
    """
    t = next(tree, None)
    s = next(staged, None)
    while t is not None or s is not None:
        if s is None or (t is not None and t[0] < s[0]):
            assert t is not None
            yield t
            t = next(tree, None)
            continue
        current = None
        if t is not None and t[0] == s[0]:
            current = t
            t = next(tree, None)
        if keep_same and current is not None and same(current[1], s[1]):
            yield current
        elif s[1] is not None:
            yield (s[0], s[1])
        s = next(staged, None)


def _diff_sorted(
    left: Iterator[tuple[str, Val]], right: Iterator[tuple[str, Val]]
) -> Iterator[tuple[str, Val | None, Val | None]]:
    """Yield ``(path, left_entry, right_entry)`` for every path whose entry differs by identity."""
    lv = next(left, None)
    rv = next(right, None)
    while lv is not None or rv is not None:
        if rv is None or (lv is not None and lv[0] < rv[0]):
            assert lv is not None
            yield (lv[0], lv[1], None)
            lv = next(left, None)
        elif lv is None or rv[0] < lv[0]:
            yield (rv[0], None, rv[1])
            rv = next(right, None)
        else:
            if lv[1][0] != rv[1][0]:
                yield (lv[0], lv[1], rv[1])
            lv = next(left, None)
            rv = next(right, None)


def _paginate(
    make_iter: Callable[[str], Iterator[tuple[str, Any]]],
    *,
    prefix: str,
    after: str,
    delimiter: str,
    limit: int,
    start: str,
) -> Page:
    """Collect one page of a sorted listing, grouping common prefixes like lakeFS does.

    ``make_iter(start)`` must yield ``(path, payload)`` sorted by path from ``start`` on;
    common prefixes come back with a ``None`` payload.
    """
    page = Page()
    it = make_iter(start)
    while True:
        item = next(it, None)
        if item is None:
            break
        path, payload = item
        if path < prefix:
            continue
        if not path.startswith(prefix):
            break
        if delimiter:
            rest = path[len(prefix):]
            cut = rest.find(delimiter)
            if cut >= 0:
                common = prefix + rest[: cut + len(delimiter)]
                if common != after:
                    page.items.append((common, None))
                    if len(page.items) > limit:
                        break
                it = make_iter(upper_bound(common))
                continue
        if path == after:
            continue
        page.items.append((path, payload))
        if len(page.items) > limit:
            break
    if len(page.items) > limit:
        page.items = page.items[:limit]
        page.has_more = True
    return page


class _Tx:
    """Queries inside one SQLite transaction."""

    def __init__(self, conn: sqlite3.Connection, store: Store) -> None:
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
        _validate_ref(ref)
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
                raise errors.bad_request(f"could not parse modifier {mod}: ref: invalid value") from exc
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
        raise errors.not_found(f"{rev}: not found")

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
            (meta_range_id, start, _BATCH),
        ).fetchall()
        while rows:
            self.store.count_stat("tree_rows_read", len(rows))
            for path, identity, entry_id in rows:
                yield path, (identity, entry_id)
            if len(rows) < _BATCH:
                return
            rows = self.conn.execute(
                "SELECT path, identity, entry_id FROM tree_entries WHERE meta_range_id = ? AND path > ?"
                " ORDER BY path LIMIT ?",
                (meta_range_id, rows[-1][0], _BATCH),
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
        tree_id = _tree_id(entries)
        if not tree_id:
            return tree_id
        if self.one("SELECT 1 FROM meta_ranges WHERE id = ?", (tree_id,)) is None:
            self.conn.execute(
                "INSERT INTO meta_ranges (id, count) VALUES (?, ?)", (tree_id, len(entries))
            )
            self.conn.executemany(
                "INSERT INTO tree_entries (meta_range_id, path, identity, entry_id) VALUES (?, ?, ?, ?)",
                ((tree_id, path, identity, entry_id) for path, (identity, entry_id) in entries),
            )
        return tree_id

    def apply_changes(self, base: str, changes: Iterable[tuple[str, Val | None]]) -> str:
        """Return the id of ``base`` with sorted ``(path, entry or None)`` changes applied."""
        return self.write_tree(list(_merge_sorted(self.tree_iter(base), iter(changes), keep_same=True)))

    # --- staging ------------------------------------------------------------------------

    def staging_iter(self, repo: str, branch: str, start: str = "") -> Iterator[tuple[str, Val | None]]:
        rows = self.conn.execute(
            "SELECT path, identity, entry_id FROM staging WHERE repo = ? AND branch = ? AND path >= ?"
            " ORDER BY path LIMIT ?",
            (repo, branch, start, _BATCH),
        ).fetchall()
        while rows:
            for path, identity, entry_id in rows:
                yield path, None if entry_id is None else (identity, entry_id)
            if len(rows) < _BATCH:
                return
            rows = self.conn.execute(
                "SELECT path, identity, entry_id FROM staging WHERE repo = ? AND branch = ? AND path > ?"
                " ORDER BY path LIMIT ?",
                (repo, branch, rows[-1][0], _BATCH),
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

    def is_dirty(self, repo: str, branch: str, meta_range_id: str) -> bool:
        return next(self.uncommitted_iter(repo, branch, meta_range_id), None) is not None

    def view_iter(self, repo: str, resolved: Resolved, start: str = "") -> Iterator[tuple[str, Val]]:
        """List ``(path, entry)`` as seen through a resolved ref, uncommitted changes included."""
        meta_range_id = self.commit(repo, resolved.commit_id).meta_range_id
        tree = self.tree_iter(meta_range_id, start)
        if resolved.branch is None:
            return tree
        return _merge_sorted(tree, self.staging_iter(repo, resolved.branch, start))

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
        entry_id = hashlib.sha256(_json(fields).encode("utf-8")).hexdigest()
        identity = entry_identity(size=size, checksum=checksum, metadata=metadata, content_type=content_type)
        self.conn.execute(
            "INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entry_id, identity, address, blob, checksum, size, mtime, content_type, _json(dict(metadata))),
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
                _json(dict(metadata)),
                generation,
                COMMIT_VERSION,
            ),
        )
        return self.commit(repo, cid)

    def set_branch(self, repo: str, branch: str, commit_id: str) -> None:
        self.conn.execute(
            "UPDATE branches SET commit_id = ? WHERE repo = ? AND name = ?", (commit_id, repo, branch)
        )

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
            raise errors.no_changes("merge")
        if dest == base:
            return source
        changes: list[tuple[str, Val | None]] = []
        for path, base_entry, source_entry in _diff_sorted(self.tree_iter(base), self.tree_iter(source)):
            dest_entry = self.tree_get(dest, path)
            if same(dest_entry, source_entry):
                continue
            if same(dest_entry, base_entry) or strategy == "source-wins":
                changes.append((path, source_entry))
            elif strategy != "dest-wins":
                raise errors.merge_conflict()
        return self.apply_changes(dest, changes)


class Store:
    """The server's state on disk.

    :param data_dir: directory holding ``lakefs.sqlite3`` and the ``blobs/`` tree.
    :param committer: the name recorded as committer (lakeFS records the user name).
    """

    def __init__(self, data_dir: str | os.PathLike[str], committer: str = "admin") -> None:
        self.data_dir = Path(data_dir)
        self.committer = committer
        self._blobs = self.data_dir / "blobs"
        self._tmp = self.data_dir / "tmp"
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._db_path = self.data_dir / "lakefs.sqlite3"
        self._pool: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        with self._connection() as conn:
            conn.executescript(_SCHEMA)

    # --- plumbing -----------------------------------------------------------------------

    def count_stat(self, name: str, amount: int = 1) -> None:
        """Add to an internal counter (commit rows read, tree rows read).

        :param name: counter name.
        :param amount: how much to add.
        """
        with self._stats_lock:
            self._stats[name] += amount

    def stats(self) -> dict[str, int]:
        """Return the internal counters."""
        with self._stats_lock:
            return dict(self._stats)

    def reset_stats(self) -> None:
        """Zero the internal counters."""
        with self._stats_lock:
            self._stats.clear()

    def close(self) -> None:
        """Close every pooled connection."""
        with self._pool_lock:
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()

    def _new_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._db_path, isolation_level=None, check_same_thread=False, timeout=60.0
        )
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: an acknowledged write survives even a machine crash, not only SIGKILL.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=60000")
        return conn

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._pool_lock:
            conn = self._pool.pop() if self._pool else None
        if conn is None:
            conn = self._new_connection()
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.rollback()
            with self._pool_lock:
                self._pool.append(conn)

    @contextmanager
    def read(self) -> Iterator[_Tx]:
        """Run queries against one consistent snapshot."""
        with self._connection() as conn:
            conn.execute("BEGIN")
            try:
                yield _Tx(conn, self)
            finally:
                conn.rollback()

    @contextmanager
    def write(self) -> Iterator[_Tx]:
        """Run a mutation: serialized with every other mutation, committed atomically."""
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield _Tx(conn, self)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    # --- blobs --------------------------------------------------------------------------

    def blob_path(self, sha256: str) -> Path:
        """Return where the bytes with this sha256 live.

        :param sha256: hex digest.
        """
        return self._blobs / sha256[:2] / sha256

    def put_blob(self, stream: IO[bytes]) -> Blob:
        """Store bytes durably (written, fsynced, renamed) and return their address.

        :param stream: the bytes to store, read to the end.
        """
        sha = hashlib.sha256()
        md5 = hashlib.md5()
        size = 0
        tmp = self._tmp / uuid.uuid4().hex
        try:
            with open(tmp, "wb") as out:
                while True:
                    chunk = stream.read(1 << 20)
                    if not chunk:
                        break
                    sha.update(chunk)
                    md5.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            target = self.blob_path(sha.hexdigest())
            target.parent.mkdir(exist_ok=True)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return Blob(sha.hexdigest(), md5.hexdigest(), size)

    # --- repositories -------------------------------------------------------------------

    def create_repository(
        self,
        name: str,
        storage_namespace: str,
        default_branch: str = "main",
        storage_id: str = "",
        read_only: bool = False,
    ) -> Repository:
        """Create a repository with its first commit and default branch.

        :param name: repository id.
        :param storage_namespace: ``local://...`` namespace, never reused.
        :param default_branch: name of the default branch.
        :param storage_id: blockstore id; only the single default ("") exists.
        :param read_only: create a read-only repository.
        :raises ApiError: 400 on invalid arguments or a used namespace, 409 if it exists.
        """
        _validate_repository_id(name)
        default_branch = default_branch or "main"
        _validate_branch_id(default_branch)
        if not storage_namespace:
            raise errors.bad_request("storage_namespace: required value: validation error")
        with self.write() as tx:
            if tx.one("SELECT 1 FROM repositories WHERE id = ?", (name,)) is not None:
                raise errors.conflict("error creating repository: not unique")
            if storage_id:
                raise errors.bad_request("storage id: invalid value: validation error")
            if not NAMESPACE_RE.match(storage_namespace):
                raise errors.bad_request(
                    f"failed to match required regex {NAMESPACE_RE.pattern}: invalid namespace"
                )
            if tx.one("SELECT 1 FROM used_namespaces WHERE namespace = ?", (storage_namespace,)):
                raise errors.bad_request(
                    "failed to create repository: found lakeFS objects in the storage namespace:"
                    " storage namespace already in use"
                )
            now = time.time_ns()
            tx.conn.execute("INSERT INTO used_namespaces VALUES (?)", (storage_namespace,))
            tx.conn.execute(
                "INSERT INTO repositories VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, storage_namespace, "", default_branch, now // 1_000_000_000, int(read_only), "{}"),
            )
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
            return tx.repository(name)

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

    def delete_repository(self, name: str) -> None:
        """Delete a repository and all its refs, commits and staging.

        :param name: repository id.
        :raises ApiError: 404 if it does not exist.
        """
        with self.write() as tx:
            tx.repository(name)
            for table in ("branches", "tags", "commits", "staging"):
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
            tx.conn.execute("UPDATE repositories SET metadata = ? WHERE id = ?", (_json(metadata), name))

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
        _validate_branch_id(name)
        with self.write() as tx:
            tx.writable_repository(repo, force)
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
        _validate_branch_id(name)
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
        _validate_branch_id(name)
        with self.write() as tx:
            repository = tx.writable_repository(repo, force)
            if repository.default_branch == name:
                raise errors.forbidden("cannot delete repository default branch")
            tx.require_branch(repo, name)
            tx.conn.execute("DELETE FROM branches WHERE repo = ? AND name = ?", (repo, name))
            tx.conn.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo, name))

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
        _validate_branch_id(branch)
        if kind == "object":
            _validate_path(path)
        with self.write() as tx:
            tx.writable_repository(repo, force)
            tx.require_branch(repo, branch)
            if kind == "reset":
                tx.conn.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo, branch))
            elif kind == "object":
                tx.conn.execute(
                    "DELETE FROM staging WHERE repo = ? AND branch = ? AND path = ?", (repo, branch, path)
                )
            elif path:
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
        _validate_branch_id(branch)
        with self.write() as tx:
            tx.writable_repository(repo, force)
            tx.require_branch(repo, branch)
            target = tx.resolve_commit(repo, ref)
            tx.set_branch(repo, branch, target.id)

    # --- tags ---------------------------------------------------------------------------

    def create_tag(self, repo: str, tag: str, ref: str, force: bool = False) -> str:
        """Create a tag at the commit ``ref`` resolves to and return that commit id.

        :param repo: repository id.
        :param tag: tag id.
        :param ref: ref expression.
        :param force: allow on a read-only repository.
        :raises ApiError: 400 invalid id, 404 unknown ref, 409 existing tag.
        """
        _validate_tag_id(tag)
        with self.write() as tx:
            tx.writable_repository(repo, force)
            target = tx.resolve_commit(repo, ref)
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
    ) -> Commit:
        """Commit a branch's staged changes on top of its current HEAD.

        :param repo: repository id.
        :param branch: branch name.
        :param message: commit message.
        :param metadata: commit metadata.
        :param date: creation date override (Unix seconds).
        :param allow_empty: commit even if nothing changed.
        :param force: allow on a read-only repository.
        :raises ApiError: 400 nothing to commit, 404 missing branch.
        """
        _validate_branch_id(branch)
        with self.write() as tx:
            tx.writable_repository(repo, force)
            head = tx.commit(repo, tx.require_branch(repo, branch))
            tree = tx.apply_changes(head.meta_range_id, tx.staging_iter(repo, branch))
            if tree == head.meta_range_id and not allow_empty:
                raise errors.no_changes("commit")
            created = tx.add_commit(
                repo,
                parents=[head.id],
                committer=self.committer,
                message=message,
                meta_range_id=tree,
                metadata=metadata or {},
                generation=head.generation + 1,
                creation_ns=None if date is None else date * 1_000_000_000,
            )
            tx.set_branch(repo, branch, created.id)
            tx.conn.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo, branch))
            return created

    def get_commit(self, repo: str, ref: str) -> Commit:
        """Return the commit a ref expression names.

        :param repo: repository id.
        :param ref: ref expression.
        :raises ApiError: 404 if unknown.
        """
        with self.read() as tx:
            tx.repository(repo)
            return tx.resolve_commit(repo, ref)

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
        since: int | None = None,
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
        :param since: skip commits older than this (Unix seconds).
        :param stop_at: stop at this ref (inclusive).
        :raises ApiError: 404 unknown ref.
        """
        paths = [(p, False) for p in objects or []] + [(p, True) for p in prefixes or []]
        with self.read() as tx:
            tx.repository(repo)
            start = tx.resolve_commit(repo, ref)
            stop_id = tx.resolve_commit(repo, stop_at).id if stop_at else ""
            after_id = tx.resolve_commit(repo, after).id if after else ""
            since_ns = None if since is None else since * 1_000_000_000
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
        tx: _Tx, repo: str, start: Commit, first_parent: bool, since_ns: int | None
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
    def _touches(tx: _Tx, repo: str, c: Commit, paths: list[tuple[str, bool]]) -> bool:
        parent_tree = tx.commit(repo, c.parents[0]).meta_range_id
        for path, is_prefix in paths:
            if is_prefix:
                changed = _diff_sorted(tx.tree_iter(parent_tree, path), tx.tree_iter(c.meta_range_id, path))
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
        :raises ApiError: 404 unknown refs.
        """
        with self.read() as tx:
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
                    for path, lval, rval in _diff_sorted(tx.tree_iter(left_commit.meta_range_id, start), right_view):
                        yield path, self._diff_item(tx, lval, rval)

            else:
                source = tx.resolve_commit(repo, right)
                dest = tx.resolve_commit(repo, left)
                base = tx.merge_base(repo, source.id, dest.id)

                def make_iter(start: str) -> Iterator[tuple[str, Any]]:
                    yield from self._compare(tx, dest.meta_range_id, source.meta_range_id, base.meta_range_id, start)

            start = self._diff_start(prefix, after, delimiter)
            page = _paginate(make_iter, prefix=prefix, after=after, delimiter=delimiter, limit=limit, start=start)
        return page

    @staticmethod
    def _diff_start(prefix: str, after: str, delimiter: str) -> str:
        if not after or after < prefix:
            return prefix
        if not delimiter:
            return after
        return upper_bound(after)

    @staticmethod
    def _diff_item(tx: _Tx, left: Val | None, right: Val | None) -> tuple[str, Entry]:
        if left is None:
            assert right is not None
            return ("added", tx.entry(right[1]))
        if right is None:
            return ("removed", tx.entry(left[1]))
        return ("changed", tx.entry(right[1]))

    def _compare(
        self, tx: _Tx, dest: str, source: str, base: str, start: str
    ) -> Iterator[tuple[str, Any]]:
        # The per-key rules of lakeFS's compareIterator (pkg/graveler/committed).
        for path, dval, sval in _diff_sorted(tx.tree_iter(dest, start), tx.tree_iter(source, start)):
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
        _validate_branch_id(branch)
        with self.read() as tx:
            tx.repository(repo)
            head = tx.commit(repo, tx.require_branch(repo, branch))

            def make_iter(start: str) -> Iterator[tuple[str, Any]]:
                for path, committed, staged in tx.uncommitted_iter(repo, branch, head.meta_range_id, start):
                    yield path, self._diff_item(tx, committed, staged)

            start = self._diff_start(prefix, after, delimiter)
            return _paginate(make_iter, prefix=prefix, after=after, delimiter=delimiter, limit=limit, start=start)

    def find_merge_base(self, repo: str, source: str, dest: str) -> tuple[str, str, str]:
        """Return ``(source_commit, destination_commit, base_commit)`` ids.

        :param repo: repository id.
        :param source: source ref.
        :param dest: destination ref.
        :raises ApiError: 404 unknown refs.
        """
        with self.read() as tx:
            tx.repository(repo)
            from_commit = tx.resolve_commit(repo, source)
            to_commit = tx.resolve_commit(repo, dest)
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
        _validate_branch_id(dest)
        _validate_ref(source)
        if strategy not in MERGE_STRATEGIES:
            raise errors.bad_request("invalid value: validation error")
        message = message or f"Merge '{source}' into '{dest}'"
        with self.write() as tx:
            tx.writable_repository(repo, force)
            to_commit = tx.commit(repo, tx.require_branch(repo, dest))
            if tx.is_dirty(repo, dest, to_commit.meta_range_id):
                raise errors.dirty_branch(dest)
            from_commit = tx.resolve_commit(repo, source)
            base = tx.merge_base(repo, from_commit.id, to_commit.id)
            tree = tx.merge_trees(
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
            tx.set_branch(repo, dest, created.id)
            return created

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
        _validate_branch_id(branch)
        with self.write() as tx:
            tx.writable_repository(repo, force)
            target = tx.resolve_commit(repo, ref)
            if len(target.parents) > 1 and parent_number <= 0:
                raise errors.conflict("must specify 1-based parent number for reverting merge commit")
            if parent_number > len(target.parents):
                raise errors.bad_request(
                    f"given commit does not have the given parent number: parent {parent_number}"
                )
            head = tx.commit(repo, tx.require_branch(repo, branch))
            if tx.is_dirty(repo, branch, head.meta_range_id):
                raise errors.dirty_branch(branch)
            parent_tree = ""
            if target.parents:
                parent_tree = tx.commit(repo, target.parents[max(parent_number - 1, 0)]).meta_range_id
            tree = tx.merge_trees(head.meta_range_id, parent_tree, target.meta_range_id, "", allow_empty)
            if tree == head.meta_range_id and not allow_empty:
                raise errors.no_changes("revert")
            created = tx.add_commit(
                repo,
                parents=[head.id],
                committer=self.committer,
                message=message or f"Revert {target.id}",
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
        _validate_branch_id(branch)
        with self.write() as tx:
            tx.writable_repository(repo, force)
            target = tx.resolve_commit(repo, ref)
            if parent_number is None and len(target.parents) > 1:
                raise errors.bad_request("must specify 1-based parent number for cherry-picking merge commit")
            number = 1 if parent_number is None else parent_number
            if number > len(target.parents):
                raise errors.bad_request(f"parent {number}: given commit does not have the given parent number")
            head = tx.commit(repo, tx.require_branch(repo, branch))
            if tx.is_dirty(repo, branch, head.meta_range_id):
                raise errors.dirty_branch(branch)
            parent_tree = tx.commit(repo, target.parents[number - 1]).meta_range_id if target.parents else ""
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

    # --- objects ------------------------------------------------------------------------

    def check_upload(self, repo: str, branch: str, path: str, if_none_match: bool) -> Repository:
        """Validate an upload before its body is read (lakeFS checks these first too).

        :param repo: repository id.
        :param branch: branch name.
        :param path: object path.
        :param if_none_match: fail with 412 if the path already exists.
        :raises ApiError: 400/404/412.
        """
        _validate_path(path)
        with self.read() as tx:
            repository = tx.repository(repo)
            if tx.branch_commit(repo, branch) is None:
                raise errors.not_found(f"branch '{branch}' not found")
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
        _validate_path(path)
        with self.write() as tx:
            repository = tx.writable_repository(repo, force)
            if tx.branch_commit(repo, branch) is None:
                raise errors.not_found(f"branch '{branch}' not found")
            if if_none_match and tx.view_get(repo, tx.resolve(repo, branch), path) is not None:
                raise errors.ApiError(412, "path already exists")
            entry = tx.add_entry(
                address=f"{repository.storage_namespace.rstrip('/')}/data/{uuid.uuid4().hex}",
                blob=blob.sha256,
                checksum=blob.md5,
                size=blob.size,
                mtime=int(time.time()),
                content_type=content_type or DEFAULT_CONTENT_TYPE,
                metadata=metadata,
            )
            tx.stage(repo, branch, path, entry)
            return entry

    def stat_object(self, repo: str, ref: str, path: str) -> Entry:
        """Return the entry at ``path`` as seen through ``ref``.

        :param repo: repository id.
        :param ref: ref expression.
        :param path: object path.
        :raises ApiError: 404 if missing.
        """
        _validate_path(path)
        with self.read() as tx:
            tx.repository(repo)
            found = tx.view_get(repo, tx.resolve(repo, ref), path)
            if found is None:
                raise errors.not_found("not found")
            return tx.entry(found[1])

    def list_objects(
        self, repo: str, ref: str, *, prefix: str, after: str, delimiter: str, limit: int
    ) -> Page:
        """List objects and common prefixes; object items carry their :class:`Entry`.

        :param repo: repository id.
        :param ref: ref expression.
        :param prefix: only paths under this prefix.
        :param after: pagination token.
        :param delimiter: group common prefixes.
        :param limit: page size.
        :raises ApiError: 404 unknown ref.
        """
        with self.read() as tx:
            tx.repository(repo)
            resolved = tx.resolve(repo, ref)
            page = _paginate(
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
            _validate_path(path)
        with self.write() as tx:
            tx.writable_repository(repo, force)
            head = tx.commit(repo, tx.require_branch(repo, branch))
            for path in paths:
                if tx.tree_get(head.meta_range_id, path) is not None:
                    tx.stage(repo, branch, path, None)
                else:
                    tx.conn.execute(
                        "DELETE FROM staging WHERE repo = ? AND branch = ? AND path = ?", (repo, branch, path)
                    )

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
        _validate_path(dest_path)
        _validate_path(src_path)
        with self.write() as tx:
            repository = tx.writable_repository(repo, force)
            if tx.branch_commit(repo, branch) is None:
                raise errors.not_found(f"branch '{branch}' not found")
            found = tx.view_get(repo, tx.resolve(repo, src_ref or branch), src_path)
            if found is None:
                raise errors.not_found("not found")
            source = tx.entry(found[1])
            entry = tx.add_entry(
                address=f"{repository.storage_namespace.rstrip('/')}/data/{uuid.uuid4().hex}",
                blob=source.blob,
                checksum=source.checksum,
                size=source.size,
                mtime=int(time.time()),
                content_type=source.content_type,
                metadata=source.metadata,
            )
            tx.stage(repo, branch, dest_path, entry)
            return entry

    def update_object_metadata(self, repo: str, branch: str, path: str, metadata: Mapping[str, str]) -> None:
        """Replace the user metadata of an object on a branch (uncommitted).

        :param repo: repository id.
        :param branch: branch name.
        :param path: object path.
        :param metadata: new user metadata.
        :raises ApiError: 404 missing branch or object.
        """
        _validate_path(path)
        with self.write() as tx:
            tx.writable_repository(repo)
            tx.require_branch(repo, branch)
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
