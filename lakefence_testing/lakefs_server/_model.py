"""The store's data model: names and their validation, records, and sorted-tree algorithms.

An entry as trees and staging hold it is a ``Val``, ``(identity, entry id)``: lakeFS compares
entries by identity only; the entry id also covers the physical address and mtime.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lakefence_testing.lakefs_server import _errors as errors

REPOSITORY_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
BRANCH_ID_RE = re.compile(r"^\w[-\w]*$", re.ASCII)
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


def to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def validate_repository_id(repository: str) -> None:
    if not REPOSITORY_ID_RE.match(repository):
        raise errors.bad_request("repository id: invalid value: validation error")


def _validate_argument(value: str, arg: str, pattern: re.Pattern[str], kind: str) -> None:
    """Validate a required argument as lakeFS's ``validator.Validate`` does, naming it in the message.

    :param value: the value.
    :param arg: the argument name lakeFS puts in the message.
    :param pattern: what a valid value matches.
    :param kind: what lakeFS calls the value (``branch id``, ``ref``).
    """
    if not value:
        raise errors.bad_request(f"argument {arg}: required value: validation error")
    if not pattern.match(value):
        raise errors.bad_request(f"argument {arg}: {kind}: invalid value: validation error")


def validate_branch_id(branch: str, arg: str = "branch") -> None:
    """Validate a branch name (see :func:`_validate_argument`)."""
    _validate_argument(branch, arg, BRANCH_ID_RE, "branch id")


def validate_ref(ref: str, arg: str = "ref") -> None:
    """Validate a ref expression (see :func:`_validate_argument`)."""
    _validate_argument(ref, arg, REF_RE, "ref")


def validate_tag_id(tag: str) -> None:
    """Validate a tag id (git's ref-name rules, as lakeFS's ``ValidateTagID``).

    :param tag: the tag id.
    """
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
        raise errors.bad_request("argument tagID: tag id: invalid value: validation error")


def validate_path(path: str) -> None:
    if not path:
        raise errors.bad_request("missing path: required value: validation error")
    if len(path.encode("utf-8")) > MAX_PATH_LENGTH:
        raise errors.bad_request(
            f"invalid value: {len(path)} is above maximum length ({MAX_PATH_LENGTH})"
        )


def tree_id(entries: list[tuple[str, Val]]) -> str:
    # An emptied tree has an id like any other (as in lakeFS); only a new repository's first
    # commit has the empty id "".
    h = hashlib.sha256()
    for path, (_, entry_id) in entries:
        h.update(path.encode("utf-8"))
        h.update(b"\x00")
        h.update(entry_id.encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


def merge_sorted(
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


def diff_sorted(
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


def paginate(
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

