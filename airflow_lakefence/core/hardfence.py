"""The hard fence: a lakeFS pre-merge hook that makes every lakefence merge a compare-and-swap.

lakeFS has no expected-head parameter on a merge, but it runs pre-merge hooks *inside* its retried
branch update, after the merge commit is computed and before the branch moves. A Lua hook sees
that commit's parents and metadata, so the shipped hook rejects a merge whose first parent (the
destination HEAD lakeFS computed it against) is not the head the client named in the merge's
metadata under :data:`EXPECTED_HEAD_KEY`. Merges that name no expected head pass untouched, so
the users' own merges are unaffected.

lakeFS loads actions from the *merged source commit's* tree (``_lakefs_actions/*.yaml``), so the
action file must be on the commit a publication builds on: it is committed on the target branch
(by a merge, which protected branches allow) and every staging branch created from the target
inherits it.

This module is pure (no Airflow, no lakeFS imports): it renders the action file, judges an
installed copy and recognises the hook's rejection in a lakeFS 412 message.
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from airflow_lakefence.exceptions import LakeFSNotFoundError

#: The version of the shipped hook; bumped whenever the rendered action changes.
HARD_FENCE_VERSION = 1
#: The action's name in lakeFS (unique per repository) and its hook id.
ACTION_NAME = "lakefence_hard_fence"
HOOK_ID = "lakefence_expected_head"
#: Where the action file lives in the repository's tree (lakeFS reads ``_lakefs_actions/`` only).
ACTION_PATH = "_lakefs_actions/lakefence_hard_fence.yaml"
#: The merge metadata key naming the expected first parent (a commit id).
EXPECTED_HEAD_KEY = "lakefence.expected_head"
#: The merge metadata key marking the merge that installs the fence.
INSTALL_KEY = "lakefence.hard_fence_install"
#: The text the hook's error starts with; lakeFS relays it in the 412 message.
REJECTION_MARKER = "LAKEFENCE_HARD_FENCE_REJECTED"

_VERSION_LINE = "# lakefence-hard-fence-version: "
_VERSION_RE = re.compile(r"^# lakefence-hard-fence-version: (\d+)\s*$", re.MULTILINE)
_REJECTION_RE = re.compile(
    REJECTION_MARKER + r" v(?P<version>\d+): branch (?P<branch>\S*) moved to (?P<found>\S+), "
    r"expected head (?P<expected>\S+)"
)
_RUN_ID_RE = re.compile(r"run id '([^']+)'")

# error(..., 0): level 0 keeps Lua's "chunk:line:" position out of the message the client parses.
_LUA_SCRIPT = f"""\
-- airflow-lakefence hard fence v{HARD_FENCE_VERSION}: a compare-and-swap for lakefence merges.
-- parents[1] is the destination HEAD lakeFS computed this merge against; lakeFS re-runs the
-- hook whenever it recomputes the merge on a moved destination.
local expected = action.commit.metadata["{EXPECTED_HEAD_KEY}"]
if expected == nil or expected == "" then
  return
end
local first = action.commit.parents[1]
if first ~= expected then
  error("{REJECTION_MARKER} v{HARD_FENCE_VERSION}: branch " .. tostring(action.branch_id) ..
    " moved to " .. tostring(first) .. ", expected head " .. expected, 0)
end
"""


def lua_script() -> str:
    """Return the hook's Lua source."""
    return _LUA_SCRIPT


def render_action() -> str:
    """Render the action file (YAML) exactly as the installer writes it.

    The text is fixed for a given :data:`HARD_FENCE_VERSION`, so an installed copy is checked by
    comparing bytes.
    """
    script = "".join(f"        {line}\n" if line else "\n" for line in _LUA_SCRIPT.splitlines())
    return (
        f"{_VERSION_LINE}{HARD_FENCE_VERSION}\n"
        "# Installed by airflow-lakefence. Do not edit: `python -m airflow_lakefence.hardfence check`\n"
        "# compares this file byte for byte with the version the package ships.\n"
        f"name: {ACTION_NAME}\n"
        "description: Reject a lakefence merge whose first parent is not the expected head named in its metadata\n"
        "on:\n"
        "  pre-merge:\n"
        "hooks:\n"
        f"  - id: {HOOK_ID}\n"
        "    type: lua\n"
        "    properties:\n"
        "      script: |\n"
        f"{script}"
    )


def render_action_bytes() -> bytes:
    """Return :func:`render_action` encoded as UTF-8 (what is uploaded)."""
    return render_action().encode()


def expected_head_metadata(head: str) -> dict[str, str]:
    """Return the merge metadata that makes the hard fence check ``head``.

    :param head: the commit id the merge's first parent must be.
    :raises ValueError: if ``head`` is empty.
    """
    if not head:
        raise ValueError("the expected head must be a commit id")
    return {EXPECTED_HEAD_KEY: head}


def expected_head_of(metadata: Mapping[str, str] | None) -> str | None:
    """Return the expected head a commit's metadata names, if any.

    :param metadata: a commit's metadata.
    """
    value = (metadata or {}).get(EXPECTED_HEAD_KEY)
    return value or None


class FenceStatus(enum.StrEnum):
    """The state of the hard fence on a commit."""

    OK = "ok"
    MISSING = "missing"
    OUTDATED = "outdated"
    NEWER = "newer"
    MODIFIED = "modified"
    FOREIGN = "foreign"


@dataclass(frozen=True)
class FenceCheck:
    """The answer of :func:`check_action`.

    :param status: the state.
    :param installed_version: the version marker of the installed file, ``None`` if none.
    :param message: a sentence for logs, errors and the CLI.
    """

    status: FenceStatus
    installed_version: int | None
    message: str

    @property
    def enforced(self) -> bool:
        """Whether publications built on this commit are checked by a hook this package can rely on.

        A newer version counts: the metadata key and the rule are part of the hook's contract, and a
        rolling upgrade would otherwise stop older workers.
        """
        return self.status in (FenceStatus.OK, FenceStatus.NEWER)


def installed_version(content: bytes | str) -> int | None:
    """Return the version marker of an action file, ``None`` when it carries none.

    :param content: the file's content.
    """
    text = content.decode(errors="replace") if isinstance(content, bytes) else content
    match = _VERSION_RE.search(text)
    return None if match is None else int(match.group(1))


def check_action(content: bytes | str | None, *, where: str = "the commit") -> FenceCheck:
    """Judge the action file found at :data:`ACTION_PATH`.

    :param content: the file's content, ``None`` when there is no file.
    :param where: names the commit in the message (e.g. ``"branch 'main' in 'repo'"``).
    """
    if content is None:
        return FenceCheck(
            FenceStatus.MISSING,
            None,
            f"the lakefence hard fence is not installed on {where} (no {ACTION_PATH}); install it with "
            "`python -m airflow_lakefence.hardfence install`",
        )
    text = content.decode(errors="replace") if isinstance(content, bytes) else content
    version = installed_version(text)
    if version is None:
        return FenceCheck(
            FenceStatus.FOREIGN,
            None,
            f"{ACTION_PATH} on {where} is not a lakefence hard fence (no version marker)",
        )
    if version < HARD_FENCE_VERSION:
        return FenceCheck(
            FenceStatus.OUTDATED,
            version,
            f"the lakefence hard fence on {where} is version {version}, this package ships version "
            f"{HARD_FENCE_VERSION}: reinstall it with `python -m airflow_lakefence.hardfence install`",
        )
    if version > HARD_FENCE_VERSION:
        return FenceCheck(
            FenceStatus.NEWER,
            version,
            f"the lakefence hard fence on {where} is version {version}, newer than this package's "
            f"version {HARD_FENCE_VERSION}",
        )
    if text != render_action():
        return FenceCheck(
            FenceStatus.MODIFIED,
            version,
            f"{ACTION_PATH} on {where} claims version {version} but differs from the shipped file: "
            "reinstall it with `python -m airflow_lakefence.hardfence install`",
        )
    return FenceCheck(FenceStatus.OK, version, f"the lakefence hard fence version {version} is installed on {where}")


class RejectionKind(enum.StrEnum):
    """Who rejected a merge with 412."""

    HARD_FENCE = "hard_fence"
    USER_HOOK = "user_hook"


@dataclass(frozen=True)
class MergeRejection:
    """A pre-merge hook's rejection, read from lakeFS's 412 message.

    :param kind: the hard fence, or a hook that is not ours.
    :param run_id: lakeFS's action run id (for ``lakectl actions runs describe``), if found.
    :param found_head: for the hard fence, the head lakeFS computed the merge against.
    :param expected_head: for the hard fence, the head the merge named.
    """

    kind: RejectionKind
    run_id: str | None = None
    found_head: str | None = None
    expected_head: str | None = None


def classify_rejection(message: str) -> MergeRejection:
    """Tell the hard fence's rejection from any other pre-merge hook's, given lakeFS's 412 message.

    When several hooks fail at once lakeFS lists them all; the hard fence's rejection wins, because
    it means the merge lost a race whatever the other hooks said.

    :param message: the 412 answer's message.
    """
    run = _RUN_ID_RE.search(message)
    run_id = None if run is None else run.group(1)
    match = _REJECTION_RE.search(message)
    if match is not None:
        return MergeRejection(RejectionKind.HARD_FENCE, run_id, match.group("found"), match.group("expected"))
    if REJECTION_MARKER in message:
        return MergeRejection(RejectionKind.HARD_FENCE, run_id)
    return MergeRejection(RejectionKind.USER_HOOK, run_id)


# -- merge-only replacement ------------------------------------------------------------------
#
# On a protected target (or by choice) an abandoned publication P is replaced without a hard
# reset: a hidden branch X from P, a revert bringing X back to the input's tree, the new staged
# commit merged into X, and X merged into the target naming P as the expected head. The target's
# new head M is a link of a chain: its first parent is P, not the input. M's metadata names what it
# replaced (so the fence can tell the chain from a foreign commit on top of the input) and which
# commit to revert to get from M's tree back to the input's (so the next link costs the same calls
# however long the chain is).

#: The merge metadata key of a chain link: the head it replaced (equal to its first parent).
REPLACES_KEY = "lakefence.replaces"
#: The merge metadata key of a chain link: the commit whose revert (parent 1) turns the link's tree
#: back into the input's tree; empty when the link's tree is the input's (a relocation).
UNWIND_KEY = "lakefence.unwind"


def link_metadata(replaces: str, unwind: str | None) -> dict[str, str]:
    """Return the metadata marking a merge as a link of a replacement chain.

    :param replaces: the head the link replaces (its first parent, the merge's expected head).
    :param unwind: the commit to revert (parent 1) to get back to the input's tree, ``None`` if none.
    :raises ValueError: if ``replaces`` is empty.
    """
    if not replaces:
        raise ValueError("a chain link replaces a commit")
    return {REPLACES_KEY: replaces, UNWIND_KEY: unwind or ""}


def is_chain_link(metadata: Mapping[str, str] | None, first_parent: str | None) -> bool:
    """Tell whether a commit is a replacement-chain link on top of ``first_parent``.

    :param metadata: the commit's metadata.
    :param first_parent: the commit's first parent.
    """
    replaces = (metadata or {}).get(REPLACES_KEY)
    return bool(replaces) and replaces == first_parent


def unwind_ref(
    commit_id: str, first_parent: str | None, metadata: Mapping[str, str] | None, input_ref: str
) -> str | None:
    """Return the commit to revert (parent 1) on a branch from ``commit_id`` to get the input's tree.

    * a plain publication (first parent is the input): the publication itself;
    * a chain link: the commit it records (``None`` when its tree already is the input's).

    :param commit_id: the abandoned publication at the target's head.
    :param first_parent: its first parent.
    :param metadata: its metadata.
    :param input_ref: the input commit.
    :raises ValueError: if the commit is neither (the fence never asks for that).
    """
    if first_parent == input_ref:
        return commit_id
    if is_chain_link(metadata, first_parent):
        return (metadata or {}).get(UNWIND_KEY) or None
    raise ValueError(f"commit {commit_id} is neither on top of the input {input_ref} nor a replacement-chain link")


# -- checking a commit ------------------------------------------------------------------------


class FenceReadPort(Protocol):
    """The one lakeFS read the fence check needs (the adapter has it)."""

    def read_object(self, repository: str, ref: str, path: str) -> bytes:
        """Read one object whole (``LakeFSNotFoundError`` when missing)."""
        ...


_COMMIT_ID_RE = re.compile(r"^[0-9a-f]{64}$")
_CHECKED: dict[str, FenceCheck] = {}
_CHECKED_LOCK = threading.Lock()
_CHECKED_MAX = 1024


def check_ref(port: FenceReadPort, repository: str, ref: str) -> FenceCheck:
    """Judge the hard fence on ``ref``: one ``getObject`` call, none for a commit checked before.

    A commit id names its tree (lakeFS commit ids are content hashes over it), so the answer for a
    commit never changes and is remembered for the process; a branch or tag is read every time.
    The caller vouches that the repository and ref exist: a 404 reads as "no action file".

    :param port: the lakeFS adapter.
    :param repository: the repository.
    :param ref: a commit id (cached) or another ref.
    :raises LakeFSError: when lakeFS cannot answer.
    """
    cacheable = bool(_COMMIT_ID_RE.fullmatch(ref))
    if cacheable:
        with _CHECKED_LOCK:
            known = _CHECKED.get(ref)
        if known is not None:
            return known
    where = f"{ref!r} in {repository!r}"
    try:
        check = check_action(port.read_object(repository, ref, ACTION_PATH), where=where)
    except LakeFSNotFoundError:
        check = check_action(None, where=where)
    if cacheable:
        with _CHECKED_LOCK:
            if len(_CHECKED) >= _CHECKED_MAX:
                _CHECKED.clear()
            _CHECKED[ref] = check
    return check


def forget_checks() -> None:
    """Forget the remembered checks (tests counting calls start from a clean slate)."""
    with _CHECKED_LOCK:
        _CHECKED.clear()
