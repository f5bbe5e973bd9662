"""The hard fence: a lakeFS pre-merge hook that makes every lakefence merge a compare-and-swap.

lakeFS has no expected-head parameter on a merge, but it runs pre-merge hooks *inside* its retried
branch update, after the merge commit is computed and before the branch moves. A Lua hook sees
that commit's parents and metadata, so the shipped hook rejects a merge whose first parent (the
destination HEAD lakeFS computed it against) is not the head the client named in the merge's
metadata under :data:`EXPECTED_HEAD_KEY`. Merges that name no expected head pass untouched, so
the users' own merges are unaffected.

Version 2 adds *scoped* merges: a merge whose metadata also names scope prefixes
(:func:`scoped_merge_metadata`) passes on a destination that moved since the expected base when no
commit since that base changed a path under any of the prefixes: the hook asks lakeFS itself
(``require("lakefs").diff_refs``, one call per prefix, inside the retried branch update). Version 1
knows no scope and refuses such a merge whenever the destination moved: a repository that was not
upgraded fails closed. Version 1's branch-wide rule is unchanged in version 2, so an installed
version 1 keeps fencing branch-wide publications.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote

from airflow_lakefence.core.fences.hard_hooks import (  # the action file is data: re-exported here
    ACTION_NAME,
    ACTION_PATH,
    BRANCH_WIDE_VERSIONS,
    DESCRIPTIONS,
    EXPECTED_HEAD_KEY,
    FENCE_KEY,
    HARD_FENCE_VERSION,
    HOOK_ID,
    INSTALL_COMMAND,
    INSTALL_KEY,
    LUA_SCRIPT_V1,
    LUA_SCRIPT_V2,
    LUA_SCRIPTS,
    MARKER_VERSION_RE,
    MAX_SCOPE_PREFIXES,
    REJECTION_MARKER,
    REJECTION_RE,
    RUN_ID_RE,
    SCOPE_COUNT_KEY,
    SCOPE_KEY_PREFIX,
    SCOPED_REJECTION_RE,
    SCOPED_VERSION,
    VERSION_LINE,
    VERSION_RE,
    lua_script,
    render_action,
    render_action_bytes,
)
from airflow_lakefence.exceptions import LakeFSNotFoundError

#: The module's names, the action file's included (re-exported: callers know them as the hard fence's).
__all__ = [
    "ACTION_NAME",
    "ACTION_PATH",
    "BRANCH_WIDE_VERSIONS",
    "DESCRIPTIONS",
    "EXPECTED_HEAD_KEY",
    "FENCE_KEY",
    "HARD_FENCE_VERSION",
    "HOOK_ID",
    "INSTALL_COMMAND",
    "INSTALL_KEY",
    "LUA_SCRIPTS",
    "LUA_SCRIPT_V1",
    "LUA_SCRIPT_V2",
    "MARKER_VERSION_RE",
    "MAX_SCOPE_PREFIXES",
    "NO_HARD_FENCE",
    "REJECTION_MARKER",
    "REJECTION_RE",
    "REPLACES_KEY",
    "RUN_ID_RE",
    "SCOPED_REJECTION_RE",
    "SCOPED_VERSION",
    "SCOPE_COUNT_KEY",
    "SCOPE_KEY_PREFIX",
    "UNWIND_KEY",
    "VERSION_LINE",
    "VERSION_RE",
    "FenceCheck",
    "FenceReadPort",
    "FenceStatus",
    "HardFenceStatus",
    "MergeRejection",
    "RejectionKind",
    "check_action",
    "check_ref",
    "classify_rejection",
    "expected_head_metadata",
    "expected_head_of",
    "explain_scoped_rejection",
    "fence_vouch_metadata",
    "forget_checks",
    "installed_version",
    "is_chain_link",
    "link_metadata",
    "lua_script",
    "render_action",
    "render_action_bytes",
    "scope_of",
    "scoped_merge_metadata",
    "unwind_ref",
    "vouched_check",
]


def expected_head_metadata(head: str) -> dict[str, str]:
    """Return the merge metadata that makes the hard fence check ``head``.

    :param head: the commit id the merge's first parent must be.
    :raises ValueError: if ``head`` is empty.
    """
    if not head:
        raise ValueError("the expected head must be a commit id")
    return {EXPECTED_HEAD_KEY: head}


def scoped_merge_metadata(expected_base: str, prefixes: Sequence[str]) -> dict[str, str]:
    """Return the merge metadata of a scoped merge: the expected base and the scope's prefixes.

    Version 2 of the hook accepts such a merge on a destination that moved since
    ``expected_base`` when nothing under any prefix changed since then. Version 1 reads only the
    expected head, so it refuses the merge as soon as the destination moved: an un-upgraded
    repository fails closed, never open.

    :param expected_base: the commit the publication built on (its input).
    :param prefixes: the scope (read and write prefixes, normalised, e.g. ``"tables/t/date=1/"``).
    :raises ValueError: if the base is empty, there is no prefix, too many, or an empty one.
    """
    if not expected_base:
        raise ValueError("the expected base must be a commit id")
    if not prefixes:
        raise ValueError("a scoped merge names at least one prefix")
    if len(prefixes) > MAX_SCOPE_PREFIXES:
        raise ValueError(f"a scoped merge names at most {MAX_SCOPE_PREFIXES} prefixes, got {len(prefixes)}")
    if any(not p for p in prefixes):
        raise ValueError("a scope prefix must not be empty")
    metadata = {EXPECTED_HEAD_KEY: expected_base, SCOPE_COUNT_KEY: str(len(prefixes))}
    metadata.update({f"{SCOPE_KEY_PREFIX}{i}": prefix for i, prefix in enumerate(prefixes, start=1)})
    return metadata


def scope_of(metadata: Mapping[str, str] | None) -> tuple[str, ...] | None:
    """Return the scope prefixes a merge's metadata names, ``None`` for a branch-wide merge.

    :param metadata: a commit's metadata.
    :raises ValueError: for a malformed scope (the hook refuses such a merge too).
    """
    meta = metadata or {}
    count = meta.get(SCOPE_COUNT_KEY)
    if not count:
        return None
    if not count.isdigit() or not 1 <= int(count) <= MAX_SCOPE_PREFIXES:
        raise ValueError(f"malformed {SCOPE_COUNT_KEY}: {count!r}")
    prefixes = tuple(meta.get(f"{SCOPE_KEY_PREFIX}{i}", "") for i in range(1, int(count) + 1))
    if not all(prefixes):
        raise ValueError(f"{SCOPE_COUNT_KEY} is {count} but a prefix is missing")
    return prefixes


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
        """Whether branch-wide publications built on this commit are checked by a hook this package can rely on.

        A newer version counts: the metadata key and the rule are part of the hook's contract, and a
        rolling upgrade would otherwise stop older workers. An older version shipped by this package,
        byte for byte (:func:`check_action` says ``outdated`` with its version), counts too: its
        branch-wide rule is unchanged, so an upgrade of the package does not stop publications on
        repositories not yet upgraded.
        """
        if self.status in (FenceStatus.OK, FenceStatus.NEWER):
            return True
        return self.status is FenceStatus.OUTDATED and self.installed_version in BRANCH_WIDE_VERSIONS

    @property
    def scoped(self) -> bool:
        """Whether scoped publications (merges naming scope prefixes) built on this commit are checked."""
        return (
            self.status in (FenceStatus.OK, FenceStatus.NEWER)
            and self.installed_version is not None
            and self.installed_version >= SCOPED_VERSION
        )

    def refusal(self, *, scoped: bool) -> str | None:
        """Say why a publication may not rely on this fence, ``None`` when it may.

        :param scoped: whether the publication is scoped to prefixes.
        """
        if self.scoped or (not scoped and self.enforced):
            return None
        if scoped and self.enforced:
            return (
                f"{self.message}. Version {self.installed_version} fences branch-wide publications only and "
                f"refuses every scoped merge onto a target that moved: upgrade it with `{INSTALL_COMMAND}` "
                "(the upgrade is itself a fenced merge; branch-wide publications keep working meanwhile)"
            )
        return self.message


def installed_version(content: bytes | str) -> int | None:
    """Return the version marker of an action file, ``None`` when it carries none.

    :param content: the file's content.
    """
    text = content.decode(errors="replace") if isinstance(content, bytes) else content
    match = VERSION_RE.search(text)
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
            f"`{INSTALL_COMMAND}`",
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
        if version in LUA_SCRIPTS and text != render_action(version):
            return FenceCheck(
                FenceStatus.MODIFIED,
                version,
                f"{ACTION_PATH} on {where} claims version {version} but differs from the file that version "
                f"shipped: reinstall it with `{INSTALL_COMMAND}`",
            )
        return FenceCheck(
            FenceStatus.OUTDATED,
            version,
            f"the lakefence hard fence on {where} is version {version}, this package ships version "
            f"{HARD_FENCE_VERSION}: upgrade it with `{INSTALL_COMMAND}`",
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
            f"reinstall it with `{INSTALL_COMMAND}`",
        )
    return FenceCheck(FenceStatus.OK, version, f"the lakefence hard fence version {version} is installed on {where}")


@dataclass(frozen=True)
class HardFenceStatus:
    """What the check before the job found: whether lakeFS runs the hard fence on this attempt's merges.

    A value, decided once (:meth:`~airflow_lakefence.core.publication.publisher.Publisher.check_hard_fence`) and
    narrowed once more after the job (:meth:`after_writing`); the publish reads it, never changes it.

    :param relied_on: lakeFS runs the fence on merges built on the input (a scoped publication
        needs a fence that checks scopes: version 2 or later).
    :param intact: the staged commit keeps the input's action file unchanged, so a merge lakeFS
        accepted needs no verification after acting (and vouches for the fence in its metadata).
    :param version: the installed fence's version, ``None`` when none.
    :param vouch: see the attribute.
    :param diff_decides: see the attribute.
    """

    relied_on: bool = False
    intact: bool = False
    version: int | None = None
    #: the fence the publication's metadata vouches for (``0``: none installed) when the input's
    #: action file was judged and the staged commit keeps it unchanged; ``None``: vouch for nothing
    vouch: int | None = None
    #: relied on, but whether the staged commit keeps the action file is unknown before the job (a
    #: direct-mode job without ``output_prefixes`` writes where it likes): a diff of the actions'
    #: directory between the input and the staged commit, sent beside the merge, decides whether
    #: the merge needs verifying
    diff_decides: bool = False

    def after_writing(self, paths: Iterable[str], actions_dir: str) -> HardFenceStatus:
        """The status once the job wrote ``paths``: one under the actions' directory voids ``intact``.

        :param paths: object paths the job wrote.
        :param actions_dir: the actions' directory (``_lakefs_actions/``).
        """
        if (not self.intact and self.vouch is None) or not any(p.startswith(actions_dir) for p in paths):
            return self
        return HardFenceStatus(self.relied_on, False, self.version)


#: No hard fence relied on (``hard_fence="off"``, or none installed).
NO_HARD_FENCE = HardFenceStatus()


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
    :param expected_head: for the hard fence, the head (or, scoped, the base) the merge named.
    :param version: for the hard fence, the version of the hook that refused.
    :param scope_prefix: for a scoped refusal, the prefix that changed since the expected base.
    :param path: for a scoped refusal, one path that changed under it.
    """

    kind: RejectionKind
    run_id: str | None = None
    found_head: str | None = None
    expected_head: str | None = None
    version: int | None = None
    scope_prefix: str | None = None
    path: str | None = None

    @property
    def scoped(self) -> bool:
        """Whether the hard fence refused a scoped merge because its scope changed."""
        return self.scope_prefix is not None


def classify_rejection(message: str) -> MergeRejection:
    """Tell the hard fence's rejection from any other pre-merge hook's, given lakeFS's 412 message.

    When several hooks fail at once lakeFS lists them all; the hard fence's rejection wins, because
    it means the merge lost a race whatever the other hooks said.

    :param message: the 412 answer's message.
    """
    run = RUN_ID_RE.search(message)
    run_id = None if run is None else run.group(1)
    match = REJECTION_RE.search(message)
    if match is not None:
        return MergeRejection(
            RejectionKind.HARD_FENCE, run_id, match.group("found"), match.group("expected"), int(match.group("version"))
        )
    scoped = SCOPED_REJECTION_RE.search(message)
    if scoped is not None:
        return MergeRejection(
            RejectionKind.HARD_FENCE,
            run_id,
            scoped.group("found"),
            scoped.group("expected"),
            int(scoped.group("version")),
            unquote(scoped.group("prefix")),
            unquote(scoped.group("path")),
        )
    marker = MARKER_VERSION_RE.search(message)
    if marker is not None:
        return MergeRejection(RejectionKind.HARD_FENCE, run_id, version=int(marker.group("version")))
    if REJECTION_MARKER in message:
        return MergeRejection(RejectionKind.HARD_FENCE, run_id)
    return MergeRejection(RejectionKind.USER_HOOK, run_id)


def explain_scoped_rejection(rejection: MergeRejection, *, target: str) -> str:
    """Say what a hard-fence refusal of a *scoped* merge means and what to do.

    A version-1 hook refuses every scoped merge whose target moved (it knows no scope): that is an
    installation to upgrade, not a race.

    :param rejection: the classified 412.
    :param target: the target branch (for the message).
    """
    if rejection.version is not None and rejection.version < SCOPED_VERSION:
        return (
            f"the hard fence on {target!r} is version {rejection.version}: it refuses scoped merges onto a target that "
            f"moved (it moved to {rejection.found_head} since {rejection.expected_head}). Upgrade it with "
            f"`{INSTALL_COMMAND}`, then clear the task"
        )
    if rejection.scoped:
        return (
            f"lakeFS's hard fence refused the scoped merge into {target!r}: {rejection.path!r} under the scope "
            f"prefix {rejection.scope_prefix!r} changed between the input {rejection.expected_head} and "
            f"{rejection.found_head}, the target's head the merge was computed on (action run {rejection.run_id})"
        )
    return (
        f"lakeFS's hard fence refused the merge into {target!r} (action run {rejection.run_id}): "
        f"it moved to {rejection.found_head} since {rejection.expected_head}"
    )


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


def fence_vouch_metadata(version: int) -> dict[str, str]:
    """Return the merge metadata with which a publication vouches for the hard fence in its tree.

    Only for a merge that names its expected head and whose source changed nothing under
    ``_lakefs_actions/``: its tree then holds the input's action file, which was version ``version``
    (``0``: the input had no action file, so neither has the publication).

    :param version: the version of the fence on the publication's input, ``0`` for none.
    """
    return {FENCE_KEY: str(version)}


def vouched_check(
    metadata: Mapping[str, str] | None, first_parent: str | None, *, where: str = "the commit"
) -> FenceCheck | None:
    """Judge the hard fence on a commit from the commit's own metadata, without reading its tree.

    Two kinds of lakefence merge vouch for the action file in their tree: the installer's
    (:data:`INSTALL_KEY`: its source is the file it uploaded on top of the expected head) and a
    publication whose source left ``_lakefs_actions/`` as its input had it (:data:`FENCE_KEY`).
    Either merge's tree is its source applied to its first parent, which equals the expected head it
    names (:data:`EXPECTED_HEAD_KEY`): the version named is the file in the tree. Metadata copied onto
    a commit with another first parent (a cherry-pick elsewhere) vouches for nothing; neither does a
    version this package cannot judge. ``lakefence.*`` keys are reserved: a user's commit metadata
    cannot carry them through the operators.

    :param metadata: the commit's metadata.
    :param first_parent: the commit's first parent (the merge destination's HEAD it was computed on).
    :param where: names the commit in the message.
    :return: the check, or ``None`` when the commit does not vouch (read the file then).
    """
    meta = metadata or {}
    expected = expected_head_of(meta)
    if expected is None or expected != first_parent:
        return None
    value = meta.get(FENCE_KEY) or meta.get(INSTALL_KEY) or ""
    if not value.isdigit():
        return None
    version = int(value)
    if version == 0:  # the publication's input had no action file, and its source added none
        return check_action(None, where=where)
    if version in LUA_SCRIPTS:
        return check_action(render_action(version), where=where)
    if version > HARD_FENCE_VERSION:  # a newer package's fence: judged as its file would be
        return check_action(f"{VERSION_LINE}{version}\n", where=where)
    return None


class FenceReadPort(Protocol):
    """The one lakeFS read the fence check needs (the adapter has it)."""

    def read_object(self, repository: str, ref: str, path: str) -> bytes:
        """Read one object whole (``LakeFSNotFoundError`` when missing)."""
        ...


_COMMIT_ID_RE = re.compile(r"^[0-9a-f]{64}$")
_CHECKED: dict[str, FenceCheck] = {}
_CHECKED_LOCK = threading.Lock()
_CHECKED_MAX = 1024


def check_ref(
    port: FenceReadPort,
    repository: str,
    ref: str,
    *,
    metadata: Mapping[str, str] | None = None,
    first_parent: str | None = None,
) -> FenceCheck:
    """Judge the hard fence on ``ref``: one ``getObject`` call, none for a commit checked before or
    one that vouches for its fence.

    A commit id names its tree (lakeFS commit ids are content hashes over it), so the answer for a
    commit never changes and is remembered for the process; a branch or tag is read every time.
    When the caller has read the commit already (the target's HEAD is the input), its metadata and
    first parent may answer without a call (:func:`vouched_check`).
    The caller vouches that the repository and ref exist: a 404 reads as "no action file".

    :param port: the lakeFS adapter.
    :param repository: the repository.
    :param ref: a commit id (cached) or another ref.
    :param metadata: the metadata of the commit ``ref`` names, if the caller read it.
    :param first_parent: that commit's first parent.
    :raises LakeFSError: when lakeFS cannot answer.
    """
    cacheable = bool(_COMMIT_ID_RE.fullmatch(ref))
    if cacheable:
        with _CHECKED_LOCK:
            known = _CHECKED.get(ref)
        if known is not None:
            return known
    where = f"{ref!r} in {repository!r}"
    vouched = vouched_check(metadata, first_parent, where=where) if metadata is not None else None
    if vouched is not None:
        check = vouched
    else:
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
