"""Install, check and probe the hard fence (the shipped lakeFS pre-merge hook) on a repository.

lakeFS loads actions from the tree of the commit being merged, so the fence protects the
publications built on a commit that carries :data:`~airflow_lakefence.core.fences.hard.ACTION_PATH`.
:func:`install_hard_fence` puts it on a branch the way every lakefence publication arrives: a
commit on a temporary hidden branch, merged into the branch (protected branches allow merges; the
branch's uncommitted changes, if any, are never swept into the commit). The install merge names its
expected head, so the new hook checks its own installation. Installing over an older version (an
upgrade, e.g. version 1 to 2 for scoped publications) is the same merge.

The rendering and judging of the action file are pure (:mod:`airflow_lakefence.core.fences.hard`);
this module does the lakeFS calls, through :class:`~airflow_lakefence.lakefs_adapter.client.LakeFSClient`
only. Command line: ``python -m airflow_lakefence.hardfence --help``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from airflow_lakefence.core.fences.hard import (
    ACTION_PATH,
    EXPECTED_HEAD_KEY,
    HARD_FENCE_VERSION,
    INSTALL_COMMAND,
    INSTALL_KEY,
    FenceCheck,
    FenceStatus,
    check_ref,
    expected_head_metadata,
    render_action_bytes,
    scoped_merge_metadata,
)
from airflow_lakefence.exceptions import (
    HardFenceInstallError,
    LakeFenceError,
    LakeFSHardFenceRejectedError,
    LakeFSPreconditionFailedError,
)
from airflow_lakefence.lakefs_adapter.client import LakeFSClient

__all__ = [
    "HardFenceInstallError",
    "InstallResult",
    "ProbeResult",
    "check_hard_fence",
    "install_hard_fence",
    "probe_hard_fence",
]

log = logging.getLogger(__name__)

TEMP_BRANCH_PREFIX = "lakefence-hardfence"
# The target may move between the temporary branch's creation and the install merge (the new hook
# then rejects the merge): a few fresh tries, each built on the new head.
_INSTALL_TRIES = 3
_PROBE_HEAD = "lakefence-probe-not-a-commit"
#: Where the probe writes on its hidden branches (never on the probed branch).
PROBE_PREFIX = "_lakefence_hard_fence_probe/"


@dataclass(frozen=True)
class InstallResult:
    """What :func:`install_hard_fence` found and did.

    :param before: the fence's state on the branch before.
    :param installed: whether this call merged the action into the branch.
    :param merge_commit: the install merge commit, when installed.
    :param head: the branch's head after the call, as this call knows it.
    """

    before: FenceCheck
    installed: bool
    merge_commit: str | None
    head: str


@dataclass(frozen=True)
class ProbeResult:
    """What :func:`probe_hard_fence` saw.

    :param enforced: whether lakeFS rejected a merge naming a wrong expected head (branch-wide rule).
    :param message: lakeFS's answers (the 412 messages) or what went wrong.
    :param scoped: whether lakeFS also ran the scoped rule: refused a scoped merge whose scope changed
        since its base and accepted one whose scope did not.
    """

    enforced: bool
    message: str
    scoped: bool = False


def check_hard_fence(client: LakeFSClient, repository: str, ref: str) -> FenceCheck:
    """Judge the hard fence on ``ref`` (one lakeFS call; none for a commit id checked before).

    The caller vouches that ``repository`` and ``ref`` exist: a 404 is read as "no action file".

    :param client: the lakeFS adapter.
    :param repository: the repository.
    :param ref: the commit (or branch) publications build on.
    :raises LakeFSError: when lakeFS cannot answer.
    """
    return check_ref(client, repository, ref)


@contextmanager
def _temporary_branch(client: LakeFSClient, repository: str, source: str, purpose: str) -> Iterator[tuple[str, str]]:
    name = f"{TEMP_BRANCH_PREFIX}-{purpose}-{uuid.uuid4().hex[:12]}"
    base = client.create_branch(repository, name, source, hidden=True)
    try:
        yield name, base
    finally:
        try:
            client.delete_branch(repository, name)
        except LakeFenceError as exc:  # a leftover hidden branch is harmless; the outcome stands
            log.warning("could not delete temporary branch %s in %s: %s", name, repository, exc)


def _upload(client: LakeFSClient, repository: str, branch: str, path: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="lakefence-hardfence-") as tmp:
        local = os.path.join(tmp, "object")
        with open(local, "wb") as fh:
            fh.write(data)
        client.upload_file(repository, branch, path, local)


def install_hard_fence(client: LakeFSClient, repository: str, branch: str, *, force: bool = False) -> InstallResult:
    """Install (or upgrade) the hard fence on ``branch`` by a merge.

    Costs one call when the fence is already current; otherwise about six (check, create branch,
    upload, commit, merge, delete branch), whatever the branch holds.

    :param client: the lakeFS adapter.
    :param repository: the repository.
    :param branch: the branch whose future publications the fence guards (usually the target).
    :param force: replace a file at the action's path that is not a lakefence hard fence.
    :raises HardFenceInstallError: if a foreign file is in the way (without ``force``) or the branch
        moved under every try.
    :raises LakeFSError: for lakeFS failures (e.g. a dirty or missing branch, a user hook rejecting
        the merge, branch protection covering the temporary branch).
    """
    before = check_hard_fence(client, repository, branch)
    if before.status in (FenceStatus.OK, FenceStatus.NEWER):
        head = client.get_commit(repository, branch).id
        return InstallResult(before, False, None, head)
    if before.status is FenceStatus.FOREIGN and not force:
        raise HardFenceInstallError(f"{before.message}; refusing to overwrite it without force")
    message = f"Install the lakefence hard fence v{HARD_FENCE_VERSION}"
    last: LakeFSHardFenceRejectedError | None = None
    for _ in range(_INSTALL_TRIES):
        with _temporary_branch(client, repository, branch, "install") as (temp, base):
            _upload(client, repository, temp, ACTION_PATH, render_action_bytes())
            staged = client.commit(repository, temp, message, {INSTALL_KEY: str(HARD_FENCE_VERSION)})
            if staged is None:  # the branch gained the current file since the check: installed by someone else
                return InstallResult(before, False, None, base)
            metadata = {**expected_head_metadata(base), INSTALL_KEY: str(HARD_FENCE_VERSION)}
            try:
                merge = client.merge(repository, staged.id, branch, message, metadata)
            except LakeFSHardFenceRejectedError as exc:
                last = exc
                continue
            log.info(
                "installed the lakefence hard fence v%s on %s in %s: %s", HARD_FENCE_VERSION, branch, repository, merge
            )
            return InstallResult(before, True, merge, merge)
    raise HardFenceInstallError(
        f"branch {branch!r} in {repository!r} moved under each of {_INSTALL_TRIES} install tries"
        + ("" if last is None else f" (last: {last})")
    )


def probe_hard_fence(client: LakeFSClient, repository: str, branch: str) -> ProbeResult:
    """Prove that lakeFS enforces the fence on publications built on ``branch``'s head.

    On two hidden branches from ``branch``'s head (``src`` with a throw-away change under
    :data:`PROBE_PREFIX`, ``dst`` the destination), three merges of ``src`` into ``dst``:

    1. naming a wrong expected head: lakeFS must refuse it with the fence's 412 (branch-wide rule);
    2. after a commit on ``dst`` under :data:`PROBE_PREFIX`, scoped to :data:`PROBE_PREFIX` and naming
       the head as expected base: lakeFS must refuse it (the scope changed since the base);
    3. the same merge scoped to ``src``'s own sub-prefix only: lakeFS must accept it (its scope did not
       change), on the hidden ``dst``.

    A fence file that lakeFS does not run (actions disabled in its configuration) is caught here and
    nowhere else; so is a version-1 fence, which refuses the scoped merges. Costs eleven calls (two
    branches, two uploads and commits, three merges, two deletes); ``branch`` itself is never written.

    :param client: the lakeFS adapter.
    :param repository: the repository.
    :param branch: the branch whose head carries the fence.
    :raises LakeFSError: for lakeFS failures other than the expected 412s.
    """
    with (
        _temporary_branch(client, repository, branch, "probe-src") as (source, base),
        _temporary_branch(client, repository, branch, "probe-dst") as (destination, _),
    ):
        _upload(client, repository, source, f"{PROBE_PREFIX}src/probe", b"probe\n")
        staged = client.commit(repository, source, "lakefence hard fence probe", {})
        if staged is None:
            raise HardFenceInstallError("the probe's commit unexpectedly had no changes")
        message = "lakefence hard fence probe"
        try:
            merge = client.merge(repository, staged.id, destination, message, {EXPECTED_HEAD_KEY: _PROBE_HEAD})
        except LakeFSHardFenceRejectedError:
            pass
        except LakeFSPreconditionFailedError as exc:
            return ProbeResult(False, f"a pre-merge hook other than the hard fence rejected the probe: {exc}")
        else:
            return ProbeResult(
                False, f"lakeFS accepted a merge naming a wrong expected head ({merge}): the fence does not run"
            )
        branch_wide = "lakeFS rejected a stale merge"
        _upload(client, repository, destination, f"{PROBE_PREFIX}dst/probe", b"probe\n")
        if client.commit(repository, destination, "lakefence hard fence probe: the destination moves", {}) is None:
            raise HardFenceInstallError("the probe's destination commit unexpectedly had no changes")
        try:
            scoped = scoped_merge_metadata(base, [PROBE_PREFIX])
            merge = client.merge(repository, staged.id, destination, message, scoped)
        except LakeFSHardFenceRejectedError as exc:
            refused = str(exc)
            if not exc.scoped:
                return ProbeResult(
                    True,
                    f"{branch_wide}; the fence that ran is version {exc.version}, which refuses every scoped "
                    f"merge onto a moved target: upgrade it with `{INSTALL_COMMAND}`",
                )
        except LakeFSPreconditionFailedError as exc:
            return ProbeResult(
                True, f"{branch_wide}; a pre-merge hook other than the hard fence rejected the scoped probe: {exc}"
            )
        else:
            return ProbeResult(True, f"{branch_wide}; lakeFS accepted a scoped merge whose scope changed ({merge})")
        try:
            disjoint = scoped_merge_metadata(base, [f"{PROBE_PREFIX}src/"])
            client.merge(repository, staged.id, destination, message, disjoint)
        except LakeFSPreconditionFailedError as exc:
            return ProbeResult(True, f"{branch_wide}; lakeFS refused a scoped merge whose scope did not change: {exc}")
        return ProbeResult(
            True,
            f"{branch_wide}, refused a scoped merge whose scope changed and accepted one whose scope did not "
            f"(lakeFS's refusal: {refused})",
            scoped=True,
        )
