"""Commit-metadata encoding of lakefence records.

Every commit the protocol writes (the staged commit and the publishing merge commit) carries the
publication key, the attempt and the input commit under ``lakefence.*`` keys. The publish fence
reads them back from the target's HEAD to recognise a publication of an earlier try of the same
key (replaceable) or of this very attempt (a retried call).

Malformed or partial lakefence metadata decodes to ``None``: the fence then treats the commit as
foreign and fails closed rather than guessing.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey

METADATA_PREFIX = "lakefence."
FORMAT_VERSION = "1"
ROLE_STAGE = "stage"
ROLE_PUBLISH = "publish"
ROLES = frozenset({ROLE_STAGE, ROLE_PUBLISH})

#: The output prefixes (write set) of a scoped attempt (a JSON list), on its staged commit and its
#: evidence marker: the staging-branch cleaner names them.
OUTPUT_PREFIXES_KEY = METADATA_PREFIX + "output_prefixes"
#: The key earlier releases wrote the same list under: still read, so their commits judge right.
LEGACY_OUTPUT_PREFIXES_KEY = METADATA_PREFIX + "write_prefixes"

_REQUIRED = ("version", "role", "dag_id", "run_id", "task_id", "map_index", "try_number", "ti_id", "input_ref")


@dataclass(frozen=True)
class LakeFenceRecord:
    """The lakefence facts a commit carries.

    :param attempt: the attempt that wrote the commit.
    :param role: ``stage`` (the staged commit) or ``publish`` (the merge into the target).
    :param input_ref: the input commit id the attempt built on.
    :param staged_commit: for a publish record, the staged commit it merged.
    """

    attempt: AttemptId
    role: str
    input_ref: str
    staged_commit: str | None = None


def encode_metadata(record: LakeFenceRecord) -> dict[str, str]:
    """Encode a record as lakeFS commit metadata (string to string).

    :param record: the record.
    :raises ValueError: if the role is unknown.
    """
    if record.role not in ROLES:
        raise ValueError(f"unknown lakefence role {record.role!r}")
    key = record.attempt.key
    values = {
        "version": FORMAT_VERSION,
        "role": record.role,
        "dag_id": key.dag_id,
        "run_id": key.run_id,
        "task_id": key.task_id,
        "map_index": str(key.map_index),
        "try_number": str(record.attempt.try_number),
        "ti_id": record.attempt.ti_id,
        "input_ref": record.input_ref,
    }
    if record.staged_commit is not None:
        values["staged_commit"] = record.staged_commit
    return {METADATA_PREFIX + name: value for name, value in values.items()}


def decode_metadata(metadata: Mapping[str, str] | None) -> LakeFenceRecord | None:
    """Decode the lakefence record of a commit's metadata.

    :param metadata: the commit's metadata, possibly ``None``.
    :return: the record, or ``None`` for a commit without a complete, well-formed record.
    """
    if not metadata:
        return None
    values = {k[len(METADATA_PREFIX) :]: v for k, v in metadata.items() if k.startswith(METADATA_PREFIX)}
    if any(name not in values for name in _REQUIRED):
        return None
    if values["version"] != FORMAT_VERSION or values["role"] not in ROLES:
        return None
    try:
        map_index = int(values["map_index"])
        try_number = int(values["try_number"])
    except ValueError:
        return None
    if try_number < 1:
        return None
    key = PublicationKey(values["dag_id"], values["run_id"], values["task_id"], map_index)
    return LakeFenceRecord(
        attempt=AttemptId(key, try_number, values["ti_id"]),
        role=values["role"],
        input_ref=values["input_ref"],
        staged_commit=values.get("staged_commit"),
    )


def output_prefixes_metadata(output_prefixes: Sequence[str]) -> dict[str, str]:
    """The metadata naming a scoped attempt's output prefixes (empty for the branch-wide mode).

    :param output_prefixes: the normalised write set, empty when not scoped.
    """
    return {OUTPUT_PREFIXES_KEY: json.dumps(list(output_prefixes))} if output_prefixes else {}


def output_prefixes_of(metadata: Mapping[str, str] | None) -> tuple[str, ...]:
    """The output prefixes a commit's metadata names (empty when it names none, or a malformed list).

    Commits of earlier releases name them under :data:`LEGACY_OUTPUT_PREFIXES_KEY`.

    :param metadata: a commit's metadata.
    """
    metadata = metadata or {}
    try:
        value = json.loads(metadata.get(OUTPUT_PREFIXES_KEY, metadata.get(LEGACY_OUTPUT_PREFIXES_KEY, "[]")))
    except ValueError:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return ()
    return tuple(value)


def check_user_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Validate user-supplied commit metadata.

    :param metadata: what the DAG author passed as ``commit_metadata``.
    :return: a plain ``dict`` copy.
    :raises ValueError: if a key or value is not a string, or a key uses the reserved
        ``lakefence.`` or ``.lakefs.`` prefixes.
    """
    result: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"commit_metadata must map str to str, got {key!r}: {type(value).__name__}")
        if key.startswith(METADATA_PREFIX) or key.startswith(".lakefs."):
            raise ValueError(f"commit_metadata key {key!r} uses a reserved prefix")
        result[key] = value
    return result


#: Names of earlier releases (one release more, with a DeprecationWarning): old name -> new name.
_RENAMED = {
    "WRITE_SET_KEY": "LEGACY_OUTPUT_PREFIXES_KEY",
    "write_set_metadata": "output_prefixes_metadata",
    "write_set_of": "output_prefixes_of",
}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        warnings.warn(
            f"airflow_lakefence.core.records.metadata.{name} is deprecated: use {_RENAMED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[_RENAMED[name]]
    # The spelling of earlier releases; the package spells its names LakeFence*.
    if name == "LakefenceRecord":
        warnings.warn(
            "airflow_lakefence.core.records.metadata.LakefenceRecord is deprecated: use LakeFenceRecord",
            DeprecationWarning,
            stacklevel=2,
        )
        return LakeFenceRecord
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
