"""Small lakeFS helpers for the hard-fence tests (the SDK directly: they build scenarios), and the
product's adapter counting its calls."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import lakefs
import pytest
from lakefs_sdk.exceptions import ForbiddenException, NotFoundException
from lakefs_sdk.models.branch_protection_rule import BranchProtectionRule

from airflow_lakefence.lakefs_adapter.client import LakeFSClient


def head(repo: lakefs.Repository, branch: str = "main") -> str:
    """The branch's head commit id."""
    return str(repo.branch(branch).get_commit().id)


def stage(repo: lakefs.Repository, base: str, files: Mapping[str, bytes], *, name: str | None = None) -> str:
    """Commit ``files`` on a new branch from ``base``; return the commit id (the branch stays)."""
    branch = repo.branch(name or f"stage-{uuid.uuid4().hex[:10]}").create(base, hidden=True)
    for path, data in files.items():
        branch.object(path).upload(data)
    return str(branch.commit("staged", metadata={"test": "stage"}).get_commit().id)


def commit_on(repo: lakefs.Repository, branch: str, files: Mapping[str, bytes], message: str = "foreign") -> str:
    """Upload and commit directly on ``branch``; return the commit id."""
    ref = repo.branch(branch)
    for path, data in files.items():
        ref.object(path).upload(data)
    return str(ref.commit(message).get_commit().id)


def install_user_hook(repo: lakefs.Repository, branch: str, name: str, reject_key: str) -> str:
    """Commit a user's own pre-merge Lua hook rejecting merges whose metadata has ``reject_key``.

    :return: the commit id.
    """
    script = (
        f'if action.commit.metadata["{reject_key}"] ~= nil then\n'
        f'  error("USER_POLICY: merges tagged {reject_key} are not allowed", 0)\n'
        "end\n"
    )
    body = (
        f"name: {name}\non:\n  pre-merge:\nhooks:\n  - id: user_policy\n    type: lua\n    properties:\n"
        "      script: |\n" + "".join(f"        {line}\n" for line in script.splitlines())
    )
    return commit_on(repo, branch, {f"_lakefs_actions/{name}.yaml": body.encode()}, "user hook")


def protect(
    client: lakefs.Client,
    repo: lakefs.Repository,
    pattern: str,
    *,
    probe_branch: str | None = None,
    timeout: float = 60.0,
) -> None:
    """Protect branches matching ``pattern`` and wait until lakeFS enforces it on ``probe_branch``
    (default: the branch named ``pattern``).

    lakeFS caches the rules (about 10 s on v1.86): poll a harmless hard reset of the probe branch
    onto its own head until it is refused.
    """
    api = client.sdk_client
    try:
        api.repositories_api.set_branch_protection_rules(repo.id, [BranchProtectionRule(pattern=pattern)])
    except NotFoundException as exc:
        if "invalid API endpoint" not in str(exc.body):
            raise
        pytest.skip("this lakeFS server has no branch protection")
    probe = probe_branch or pattern
    probe_head = head(repo, probe)
    deadline = time.monotonic() + timeout
    while True:
        try:
            api.experimental_api.hard_reset_branch(repo.id, probe, probe_head)
        except ForbiddenException:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"branch protection on {pattern!r} not enforced after {timeout} s")
        time.sleep(0.5)


T = TypeVar("T")


class CountingClient(LakeFSClient):
    """The real adapter, counting its logical lakeFS calls by operation (a listing page is one call)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: Counter[str] = Counter()

    def _call(self, operation: str, what: str, fn: Callable[[], T], *, idempotent: bool) -> T:
        self.calls[operation] += 1
        return super()._call(operation, what, fn, idempotent=idempotent)
