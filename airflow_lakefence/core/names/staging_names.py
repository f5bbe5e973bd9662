"""Staging-branch naming.

A staging branch name is derived from the publication key and the attempt:

``<prefix>-<task slug>-<key hash>-t<try>-<ti hash>``

* the part up to and including ``<key hash>-`` is the same for every try of one publication key, so
  the staging branches of earlier tries are found with one prefix listing;
* ``t<try>-<ti hash>`` makes the name unique per attempt, so a leftover of an earlier try can never
  be mistaken for the current one (the ti id changes on every retry and clear);
* the slug keeps names readable in the lakeFS UI; the hashes keep them bounded and collision-free
  whatever the DAG, run and task ids contain.

lakeFS validates branch names with Go's ``^\\w[-\\w]*$`` where ``\\w`` is ASCII only.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey

DEFAULT_STAGING_PREFIX = "lakefence"
MAX_PREFIX_LENGTH = 32
MAX_BRANCH_NAME_LENGTH = 128
_SLUG_LENGTH = 24
_KEY_HASH_LENGTH = 16
_TI_HASH_LENGTH = 8

_BRANCH_RE = re.compile(r"^\w[-\w]*$", re.ASCII)
_NON_WORD_RE = re.compile(r"[^\w-]+", re.ASCII)


def is_valid_branch_name(name: str) -> bool:
    """Tell whether ``name`` is a valid lakeFS branch name of bounded length.

    :param name: the candidate name.
    """
    return bool(_BRANCH_RE.fullmatch(name)) and len(name) <= MAX_BRANCH_NAME_LENGTH


def validate_staging_prefix(prefix: str) -> str:
    """Return ``prefix`` if it can start a staging branch name.

    :param prefix: the configured ``staging_branch_prefix``.
    :raises ValueError: if it is empty, too long or has characters lakeFS rejects.
    """
    if not prefix or len(prefix) > MAX_PREFIX_LENGTH or not _BRANCH_RE.fullmatch(prefix):
        raise ValueError(
            f"staging_branch_prefix {prefix!r} must match ^\\w[-\\w]*$ (ASCII) and be 1 to "
            f"{MAX_PREFIX_LENGTH} characters long"
        )
    return prefix


def _digest(value: object, length: int) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:length]


def _slug(text: str) -> str:
    return _NON_WORD_RE.sub("_", text)[:_SLUG_LENGTH].strip("-") or "task"


def key_hash(key: PublicationKey) -> str:
    """Return the short, stable hash of a publication key used in branch names.

    :param key: the publication key.
    """
    return _digest([key.dag_id, key.run_id, key.task_id, key.map_index], _KEY_HASH_LENGTH)


def staging_branch_prefix(key: PublicationKey, prefix: str = DEFAULT_STAGING_PREFIX) -> str:
    """Return the name prefix shared by the staging branches of every try of ``key``.

    :param key: the publication key.
    :param prefix: the configured staging prefix.
    :raises ValueError: if ``prefix`` is invalid.
    """
    validate_staging_prefix(prefix)
    return f"{prefix}-{_slug(key.task_id)}-{key_hash(key)}-"


def staging_branch_name(attempt: AttemptId, prefix: str = DEFAULT_STAGING_PREFIX) -> str:
    """Return the staging branch name of one attempt.

    :param attempt: the attempt.
    :param prefix: the configured staging prefix.
    :raises ValueError: if ``prefix`` is invalid.
    """
    ti_hash = _digest(attempt.ti_id, _TI_HASH_LENGTH)
    name = f"{staging_branch_prefix(attempt.key, prefix)}t{attempt.try_number}-{ti_hash}"
    if not is_valid_branch_name(name):  # pragma: no cover - guaranteed by construction
        raise ValueError(f"derived staging branch name {name!r} is invalid")
    return name


@dataclass(frozen=True)
class StagingBranchInfo:
    """What a staging branch name tells without asking anyone.

    :param key_hash: the publication key's hash.
    :param try_number: the attempt's try number.
    :param ti_hash: the short hash of the attempt's task-instance id.
    """

    key_hash: str
    try_number: int
    ti_hash: str


def parse_staging_branch_name(name: str, prefix: str = DEFAULT_STAGING_PREFIX) -> StagingBranchInfo | None:
    """Parse a staging branch name made by :func:`staging_branch_name`.

    :param name: a branch name.
    :param prefix: the staging prefix it was made with.
    :return: the parsed parts, or ``None`` when ``name`` is not a staging branch of ``prefix``.
    """
    pattern = (
        rf"^{re.escape(prefix)}-[\w-]*-(?P<key>[0-9a-f]{{{_KEY_HASH_LENGTH}}})"
        rf"-t(?P<try>[0-9]+)-(?P<ti>[0-9a-f]{{{_TI_HASH_LENGTH}}})$"
    )
    match = re.fullmatch(pattern, name, re.ASCII)
    if match is None:
        return None
    return StagingBranchInfo(match["key"], int(match["try"]), match["ti"])
