"""Content addresses computed exactly as lakeFS computes them (pkg/ident, pkg/graveler)."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from typing import Any

# Type tags of lakeFS's pkg/ident address writer.
_BYTES = b"\x00"
_STRING = b"\x01"
_INT64 = b"\x02"
_STRING_SLICE = b"\x03"
_STRING_MAP = b"\x04"
_EMBEDDED = b"\x05"


def _int64(h: Any, value: int) -> None:
    h.update(_INT64)
    h.update(b"\x08")
    h.update(struct.pack(">q", value))


def _string(h: Any, value: str) -> None:
    data = value.encode("utf-8")
    h.update(_STRING)
    _int64(h, len(data))
    h.update(data)


def _bytes(h: Any, data: bytes) -> None:
    h.update(_BYTES)
    _int64(h, len(data))
    h.update(data)


def _string_slice(h: Any, values: Sequence[str]) -> None:
    h.update(_STRING_SLICE)
    _int64(h, len(values))
    for value in values:
        _string(h, value)


def _string_map(h: Any, values: Mapping[str, str]) -> None:
    h.update(_STRING_MAP)
    _int64(h, len(values))
    for key in sorted(values):
        _string(h, key)
        _string(h, values[key])


def commit_id(
    *,
    committer: str,
    message: str,
    meta_range_id: str,
    creation_date: int,
    metadata: Mapping[str, str],
    parents: Sequence[str],
) -> str:
    """Return the lakeFS commit id (``graveler.Commit.Identity``) of these commit fields.

    Version and generation are not part of the identity, as in lakeFS.

    :param committer: committer name.
    :param message: commit message.
    :param meta_range_id: id of the commit's tree.
    :param creation_date: creation time in Unix seconds.
    :param metadata: commit metadata.
    :param parents: parent commit ids, in stored order.
    """
    parents_hash = hashlib.sha256()
    _string_slice(parents_hash, parents)
    h = hashlib.sha256()
    _string(h, "commit:v1")
    _string(h, committer)
    _string(h, message)
    _string(h, meta_range_id)
    _int64(h, creation_date)
    _string_map(h, metadata)
    h.update(_EMBEDDED)
    _bytes(h, parents_hash.digest())
    return h.hexdigest()


def entry_identity(*, size: int, checksum: str, metadata: Mapping[str, str], content_type: str) -> str:
    """Return the identity lakeFS compares object entries by (``catalog.EntryToValue``).

    Address and modification time are not part of it: re-uploading the same bytes with the
    same metadata and content type is not a change.

    :param size: size in bytes.
    :param checksum: the object's ETag.
    :param metadata: user metadata.
    :param content_type: media type (left out when empty, as in lakeFS).
    """
    h = hashlib.sha256()
    _int64(h, size)
    _string(h, checksum)
    _string_map(h, metadata)
    if content_type:
        _string(h, content_type)
    return h.hexdigest()
