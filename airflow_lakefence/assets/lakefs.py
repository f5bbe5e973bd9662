"""``lakefs://`` Assets: URI rules, and the events a fenced publication emits.

An asset URI names a path prefix on a branch: ``lakefs://<repository>/<branch>/<prefix>``.
Airflow calls :func:`sanitize_uri` (registered under ``asset-uris`` in the provider info) for every
``lakefs`` URI, so a malformed one fails at DAG parse time and equal prefixes compare equal.

The fenced operators declare their ``lakefs://`` outlets as they are (so Airflow lists the task as
their producer) and emit their events only when a try published (merge, replacement, or a retried
call of its own publication), with the commits in the event's extra; a try that published nothing
withdraws them before Airflow would emit an empty event.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult

from airflow_lakefence.core.names.staging_names import is_valid_branch_name

SCHEME = "lakefs"
#: Decisions that put new data on the target: only they emit asset events.
PUBLISHING_DECISIONS = frozenset({"merge", "replace", "idempotent"})

_REPOSITORY_RE = re.compile(r"[a-z0-9][a-z0-9-]{2,62}")


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Validate and normalise a ``lakefs://repository/branch/prefix`` URI.

    :param uri: the split URI (Airflow passes it split).
    :return: the normalised URI: no query, fragment, credentials or port; no empty or dot path
        segments; no trailing slash.
    :raises ValueError: if the repository or branch is missing or invalid.
    """
    if uri.scheme != SCHEME:
        raise ValueError(f"not a {SCHEME}:// URI: {uri.geturl()!r}")
    if uri.username or uri.password or uri.port or "@" in uri.netloc:
        raise ValueError("lakefs:// asset URIs must not carry credentials or a port")
    if uri.query or uri.fragment:
        raise ValueError("lakefs:// asset URIs take no query or fragment")
    repository = uri.netloc
    if not _REPOSITORY_RE.fullmatch(repository):
        raise ValueError(f"invalid lakeFS repository {repository!r} in asset URI")
    segments = [s for s in urllib.parse.unquote(uri.path).split("/") if s]
    if not segments:
        raise ValueError("lakefs:// asset URIs need a branch: lakefs://<repository>/<branch>[/<prefix>]")
    if any(s in (".", "..") for s in segments):
        raise ValueError("lakefs:// asset URIs must not contain '.' or '..' segments")
    if not is_valid_branch_name(segments[0]):
        raise ValueError(f"invalid lakeFS branch {segments[0]!r} in asset URI")
    return SplitResult(SCHEME, repository, "/" + "/".join(segments), "", "")


def parse_uri(uri: str) -> tuple[str, str, str]:
    """Split a ``lakefs://`` asset URI into ``(repository, branch, prefix)``.

    :param uri: the URI.
    :raises ValueError: if it is not a valid lakefs asset URI.
    """
    clean = sanitize_uri(urllib.parse.urlsplit(uri))
    branch, _, prefix = clean.path.lstrip("/").partition("/")
    return clean.netloc, branch, prefix


def create_asset(*, repository: str, branch: str, prefix: str = "", extra: dict[str, Any] | None = None) -> Any:
    """Build the Asset of a prefix on a branch (the ``asset-uris`` factory).

    :param repository: the repository.
    :param branch: the branch.
    :param prefix: the path prefix ("" for the whole branch).
    :param extra: the asset's static extra.
    :raises ValueError: for an invalid repository or branch.
    """
    from airflow.providers.common.compat.sdk import Asset

    uri = f"{SCHEME}://{repository}/{branch}/{prefix.strip('/')}".rstrip("/")
    return Asset(uri=urllib.parse.urlunsplit(sanitize_uri(urllib.parse.urlsplit(uri))), extra=extra or {})


#: Keys of the scope in asset event extras before this release, written too until the next one.
DEPRECATED_EXTRA_KEYS = {
    "write_prefixes": "output_prefixes",
    "read_prefixes": "input_prefixes",
    "write_uris": "output_uris",
}


def event_extra(
    *,
    repository: str,
    output_ref: str,
    input_ref: str,
    staged_commit: str | None,
    decision: str,
    prefix: str,
    delta_versions: Mapping[str, int | None] | None = None,
    output_prefixes: Sequence[str] = (),
    input_prefixes: Sequence[str] = (),
) -> dict[str, Any]:
    """The extra of the asset event of one publication: enough to read exactly what was published.

    A scoped publication (``output_prefixes`` given) shares the branch with other writers: the
    output commit holds their data beside its own, so the extra also names the publication's scope
    (``fence_scope: "prefixes"``, ``output_prefixes``, ``input_prefixes``) and ``output_uris``, one
    ``lakefs://<repository>/<output_ref>/<prefix>`` per output prefix: exactly what it changed.
    Until the next release the same lists are also under the keys earlier releases used
    (``write_prefixes``, ``read_prefixes``, ``write_uris``; deprecated), for consumers not yet moved.

    :param repository: the repository.
    :param output_ref: the published commit.
    :param input_ref: the input commit.
    :param staged_commit: the staged commit.
    :param decision: the fence decision.
    :param prefix: the asset's path prefix.
    :param delta_versions: the declared Delta tables' roots and versions at ``output_ref``: the
        tables inside the asset's prefix are named under ``delta_versions``; an asset that *is* one
        table also gets ``delta_table`` and ``delta_version``.
    :param output_prefixes: a scoped publication's write set (normalised); empty in the branch-wide mode.
    :param input_prefixes: a scoped publication's read set (normalised).
    """
    extra: dict[str, Any] = {
        "output_ref": output_ref,
        "input_ref": input_ref,
        "staged_commit": staged_commit,
        "decision": decision,
        "commit_uri": f"{SCHEME}://{repository}/{output_ref}/{prefix}".rstrip("/"),
    }
    if output_prefixes:
        extra["fence_scope"] = "prefixes"
        extra["output_prefixes"] = list(output_prefixes)
        extra["input_prefixes"] = list(input_prefixes)
        extra["output_uris"] = [f"{SCHEME}://{repository}/{output_ref}/{w.strip('/')}" for w in output_prefixes]
        for old, new in DEPRECATED_EXTRA_KEYS.items():
            extra[old] = extra[new]
    norm = prefix.strip("/") + "/" if prefix.strip("/") else ""
    inside = {root: v for root, v in (delta_versions or {}).items() if root.startswith(norm)}
    if inside:
        extra["delta_versions"] = inside
        if norm in inside:
            extra["delta_table"] = norm.rstrip("/")
            extra["delta_version"] = inside[norm]
    return extra

