"""An in-memory lakeFS implementing the engine's :class:`~airflow_lakefence.core.ports.LakeFSPort`.

Small, but honest about what the protocol relies on:

* commits are immutable, content-addressed enough (a new id per commit), with parents and metadata;
* a merge commit's parents are ``[destination HEAD, source]`` (commit version 1), its tree a
  three-way merge from the merge base; a path changed on both sides differently is a conflict (409);
  merging into a branch with uncommitted changes is refused as "dirty" (400);
* a commit without uncommitted changes answers "no changes" (``None``) unless ``allow_empty``;
* a hard reset moves the branch and drops its uncommitted changes;
* hidden branches are listed only with ``show_hidden``;
* errors are the package's ``LakeFSError`` subclasses, as the real adapter raises them.

:class:`LossyPort` wraps any port (this one, or the real adapter over HTTP): it loses the answer
of chosen writes, and runs a callback before an operation (another writer slipping in).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_lakefence.core.ports import CommitInfo, UploadProgress
from airflow_lakefence.exceptions import (
    LakeFSBadRequestError,
    LakeFSConflictError,
    LakeFSNotFoundError,
    LakeFSUnavailableError,
)

Tree = dict[str, bytes]


@dataclass(frozen=True)
class _Changed:
    path: str
    type: str = "changed"


@dataclass
class _Branch:
    head: str
    hidden: bool = False
    staged: dict[str, bytes | None] = field(default_factory=dict)  # None: deleted


class MemoryLakeFS:
    """One repository in memory.

    :param repository: its name.
    """

    def __init__(self, repository: str = "repo") -> None:
        self.repository = repository
        self._ids = itertools.count(1)
        self.commits: dict[str, CommitInfo] = {}
        self.trees: dict[str, Tree] = {}
        self._order: dict[str, int] = {}
        root = self._new_commit((), {}, {}, "repository created")
        self.branches: dict[str, _Branch] = {"main": _Branch(root)}
        self.calls: dict[str, int] = {}

    # -- helpers for tests -------------------------------------------------------------------

    def _new_commit(self, parents: tuple[str, ...], tree: Tree, metadata: Mapping[str, str], message: str) -> str:
        order = next(self._ids)
        commit_id = hashlib.sha256(f"{order}".encode()).hexdigest()
        self._order[commit_id] = order
        self.commits[commit_id] = CommitInfo(commit_id, parents, dict(metadata), 1, message)
        self.trees[commit_id] = dict(tree)
        return commit_id

    def write(self, branch: str, files: Mapping[str, str], message: str = "write") -> str:
        """Another writer: upload ``files`` to ``branch`` and commit; return the commit id."""
        for path, text in files.items():
            self.branches[branch].staged[path] = text.encode()
        info = self._commit(branch, message, {}, allow_empty=False)
        assert info is not None
        return info.id

    def tree(self, ref: str) -> dict[str, str]:
        """The objects at ``ref`` as text."""
        return {path: data.decode() for path, data in self.trees[self._resolve(ref)].items()}

    def staging(self, prefix: str = "lakefence") -> list[str]:
        """Names of the branches starting with ``prefix``, hidden ones included."""
        return sorted(name for name in self.branches if name.startswith(prefix))

    def _count(self, operation: str) -> None:
        self.calls[operation] = self.calls.get(operation, 0) + 1

    def _check_repo(self, repository: str) -> None:
        if repository != self.repository:
            raise LakeFSNotFoundError(f"repository {repository!r} not found", status=404)

    def _resolve(self, ref: str) -> str:
        if ref in self.branches:
            return self.branches[ref].head
        if ref in self.commits:
            return ref
        raise LakeFSNotFoundError(f"ref {ref!r} not found", status=404)

    def _branch(self, name: str) -> _Branch:
        if name not in self.branches:
            raise LakeFSNotFoundError(f"branch {name!r} not found", status=404)
        return self.branches[name]

    def _ancestors(self, commit_id: str) -> set[str]:
        seen, todo = set(), [commit_id]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(self.commits[current].parents)
        return seen

    def _commit(self, branch: str, message: str, metadata: Mapping[str, str], allow_empty: bool) -> CommitInfo | None:
        ref = self._branch(branch)
        tree = dict(self.trees[ref.head])
        for path, data in ref.staged.items():
            if data is None:
                tree.pop(path, None)
            else:
                tree[path] = data
        # Like lakeFS, "no changes" is decided by content: re-uploading identical bytes changes nothing.
        if tree == self.trees[ref.head] and not allow_empty:
            ref.staged = {}
            return None
        ref.head = self._new_commit((ref.head,), tree, metadata, message)
        ref.staged = {}
        return self.commits[ref.head]

    # -- LakeFSPort -------------------------------------------------------------------------------

    def get_commit(self, repository: str, ref: str) -> CommitInfo:
        self._count("get_commit")
        self._check_repo(repository)
        return self.commits[self._resolve(ref)]

    def create_branch(self, repository: str, name: str, source: str, *, hidden: bool = False) -> str:
        self._count("create_branch")
        self._check_repo(repository)
        if name in self.branches:
            raise LakeFSConflictError(f"branch {name!r} already exists", status=409)
        self.branches[name] = _Branch(self._resolve(source), hidden)
        return self.branches[name].head

    def delete_branch(self, repository: str, name: str, *, missing_ok: bool = True) -> bool:
        self._count("delete_branch")
        self._check_repo(repository)
        if name not in self.branches:
            if not missing_ok:
                raise LakeFSNotFoundError(f"branch {name!r} not found", status=404)
            return False
        del self.branches[name]
        return True

    def list_branches(self, repository: str, prefix: str = "", *, show_hidden: bool = True) -> list[tuple[str, str]]:
        self._count("list_branches")
        self._check_repo(repository)
        return sorted(
            (name, b.head)
            for name, b in self.branches.items()
            if name.startswith(prefix) and (show_hidden or not b.hidden)
        )

    def commit(
        self, repository: str, branch: str, message: str, metadata: Mapping[str, str], *, allow_empty: bool = False
    ) -> CommitInfo | None:
        self._count("commit")
        self._check_repo(repository)
        return self._commit(branch, message, metadata, allow_empty)

    def merge(
        self, repository: str, source_ref: str, destination: str, message: str, metadata: Mapping[str, str]
    ) -> str:
        self._count("merge")
        self._check_repo(repository)
        dest = self._branch(destination)
        if dest.staged:
            raise LakeFSBadRequestError("cannot merge into a dirty branch", status=400)
        source = self._resolve(source_ref)
        dest_ancestors = self._ancestors(dest.head)
        if source in dest_ancestors:
            raise LakeFSBadRequestError("no changes", status=400)
        common = self._ancestors(source) & dest_ancestors
        base = max(common, key=lambda c: len(self._ancestors(c)))  # the nearest common ancestor
        base_tree, source_tree, dest_tree = self.trees[base], self.trees[source], self.trees[dest.head]
        merged = dict(dest_tree)
        for path in set(base_tree) | set(source_tree):
            if source_tree.get(path) == base_tree.get(path):
                continue
            if dest_tree.get(path) not in (base_tree.get(path), source_tree.get(path)):
                raise LakeFSConflictError(f"conflict at {path!r}", status=409)
            if path in source_tree:
                merged[path] = source_tree[path]
            else:
                merged.pop(path, None)
        dest.head = self._new_commit((dest.head, source), merged, metadata, message)
        return dest.head

    def hard_reset(self, repository: str, branch: str, ref: str) -> None:
        self._count("hard_reset")
        self._check_repo(repository)
        target = self._branch(branch)
        target.head = self._resolve(ref)
        target.staged = {}

    def merge_base(self, repository: str, source_ref: str, destination_branch: str) -> str:
        self._count("merge_base")
        self._check_repo(repository)
        source, head = self._resolve(source_ref), self._branch(destination_branch).head
        common = self._ancestors(source) & self._ancestors(head)
        if source in common:
            return source
        # The nearest common ancestor of HEAD (breadth first): enough for "is the source an ancestor?".
        todo = [head]
        while todo:
            current = todo.pop(0)
            if current in common:
                return current
            todo.extend(self.commits[current].parents)
        raise LakeFSNotFoundError(f"no merge base of {source_ref!r} and {destination_branch!r}", status=404)

    def paths_outside(self, repository: str, branch: str, prefixes: Iterable[str], *, limit: int = 10) -> list[str]:
        self._count("paths_outside")
        self._check_repo(repository)
        allowed = tuple(prefixes)
        found: set[str] = set()
        # As lakeFS's diff with delimiter "/" shows them: the first level leading to no allowed prefix.
        for path in self._branch(branch).staged:
            if path.startswith(allowed):
                continue
            parts = path.split("/")
            for depth in range(1, len(parts) + 1):
                level = "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
                if not any(p.startswith(level) for p in allowed):
                    found.add(level)
                    break
        return sorted(found)[:limit]

    def upload_tree(
        self,
        repository: str,
        branch: str,
        files: Iterable[tuple[str, Path]],
        *,
        progress: UploadProgress | None = None,
    ) -> int:
        self._count("upload_tree")
        self._check_repo(repository)
        items = list(files)
        ref = self._branch(branch)
        for done, (path, local) in enumerate(items, 1):
            ref.staged[path] = local.read_bytes()
            if progress is not None:
                progress(done, len(items))
        return len(items)

    def list_objects(self, repository: str, ref: str, prefix: str = "") -> list[str]:
        self._count("list_objects")
        self._check_repo(repository)
        return sorted(path for path in self.trees[self._resolve(ref)] if path.startswith(prefix))

    def diff_uncommitted(self, repository: str, branch: str, *, prefix: str = "") -> list[_Changed]:
        self._count("diff_uncommitted")
        self._check_repo(repository)
        staged, tree = self._branch(branch).staged, self.trees[self._branch(branch).head]
        return [
            _Changed(path, "removed" if staged[path] is None else "changed" if path in tree else "added")
            for path in sorted(staged)
            if path.startswith(prefix)
        ]

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
    ) -> list[_Changed]:
        self._count("diff_refs")
        self._check_repo(repository)
        left_id, right_id = self._resolve(left), self._resolve(right)
        if diff_type == "three_dot":  # what the right side changed since the merge base
            left_id = self._nearest_common(left_id, right_id)
        a, b = self.trees[left_id], self.trees[right_id]
        changed = sorted(
            p for p in set(a) | set(b) if p.startswith(prefix) and p > after and a.get(p) != b.get(p)
        )
        return [_Changed(p, "added" if p not in a else "removed" if p not in b else "changed") for p in changed[:limit]]

    def _nearest_common(self, one: str, other: str) -> str:
        common = self._ancestors(one) & self._ancestors(other)
        return max(common, key=lambda c: len(self._ancestors(c)))

    def log_commits(
        self,
        repository: str,
        ref: str,
        *,
        objects: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        amount: int,
        limit: bool = True,
        first_parent: bool = False,
        stop_at: str | None = None,
    ) -> list[CommitInfo]:
        self._count("log_commits")
        self._check_repo(repository)
        paths, under = tuple(objects), tuple(prefixes)
        if first_parent:
            line, current = [], self._resolve(ref)
            while current:
                line.append(current)
                parents = self.commits[current].parents
                current = parents[0] if parents and current != stop_at else ""
            newest_first = line
        else:
            newest_first = sorted(self._ancestors(self._resolve(ref)), key=lambda c: self._order[c], reverse=True)
        found = []
        for commit_id in newest_first:
            commit = self.commits[commit_id]
            if paths or under:
                if len(commit.parents) != 1:  # lakeFS lists no merge commit when filtering by path
                    continue
                mine, before = self.trees[commit_id], self.trees[commit.parents[0]]
                touched = [p for p in set(mine) | set(before) if mine.get(p) != before.get(p)]
                if not any(p in paths or p.startswith(under) for p in touched):
                    continue
            found.append(commit)
            if len(found) >= amount:
                break
        return found

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
        self._count("revert")
        self._check_repo(repository)
        target = self._branch(branch)
        if target.staged:
            raise LakeFSBadRequestError("cannot revert on a dirty branch", status=400)
        commit = self.commits[self._resolve(ref)]
        undone, parent = self.trees[commit.id], self.trees[commit.parents[parent_number - 1]]
        tree = dict(self.trees[target.head])
        for path in set(undone) | set(parent):
            if undone.get(path) == parent.get(path):
                continue
            if tree.get(path) != undone.get(path):
                raise LakeFSConflictError(f"revert conflict at {path!r}", status=409)
            if path in parent:
                tree[path] = parent[path]
            else:
                tree.pop(path, None)
        target.head = self._new_commit(
            (target.head,), tree, dict(metadata or {}), message or f"Revert {commit.id}"
        )

    def delete_objects(self, repository: str, branch: str, paths: Iterable[str]) -> int:
        self._count("delete_objects")
        self._check_repo(repository)
        ref = self._branch(branch)
        items = list(paths)
        for path in items:
            ref.staged[path] = None
        return len(items)

    # -- for jobs writing into a staging branch (direct mode) -------------------------------------

    def upload(self, branch: str, path: str, text: str) -> None:
        """Stage one object on ``branch`` (what a direct-mode job does)."""
        self._branch(branch).staged[path] = text.encode()


class LossyPort:
    """Wraps a port; :meth:`lose` makes the next call of an operation lose its answer.

    ``landed=True``: the call reaches lakeFS, then the answer is lost (a timeout after the write).
    ``landed=False``: the call never arrives. Either way the caller sees ``LakeFSUnavailableError``.

    :param inner: the wrapped port.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lose: dict[str, list[bool]] = {}
        self.calls: dict[str, int] = {}
        self.before: dict[str, Callable[[], None]] = {}

    def lose(self, operation: str, *, landed: bool, times: int = 1) -> None:
        """Lose the answer of the next ``times`` calls of ``operation``."""
        self._lose.setdefault(operation, []).extend([landed] * times)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            hook = self.before.pop(name, None)
            if hook is not None:
                hook()
            pending = self._lose.get(name)
            if not pending:
                return method(*args, **kwargs)
            landed = pending.pop(0)
            if landed:
                method(*args, **kwargs)
            raise LakeFSUnavailableError(f"lakeFS {name}: no response (lost)", status=None, operation=name)

        return call
