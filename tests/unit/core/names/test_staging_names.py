"""Staging-branch naming and commit-metadata encoding."""

from __future__ import annotations

import pytest

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import (
    MAX_BRANCH_NAME_LENGTH,
    is_valid_branch_name,
    parse_staging_branch_name,
    staging_branch_name,
    staging_branch_prefix,
    validate_staging_prefix,
)
from airflow_lakefence.core.records.metadata import (
    ROLE_PUBLISH,
    ROLE_STAGE,
    LakeFenceRecord,
    check_user_metadata,
    decode_metadata,
    encode_metadata,
)

KEYS = [
    PublicationKey("dag", "manual__2026-11-21T12:34:56.123456+00:00", "publish", -1),
    PublicationKey("dág ünïcode", "scheduled__x", "tâsk.with.dots/and slashes", 7),
    PublicationKey("d" * 250, "r" * 250, "t" * 250, 0),
    PublicationKey("", "", "", -1),
    PublicationKey("-", "-", "---", 3),
]


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("try_number", [1, 2, 10, 12345])
def test_staging_names_are_valid_bounded_and_prefixed(key: PublicationKey, try_number: int) -> None:
    name = staging_branch_name(AttemptId(key, try_number, "01a1fe20-3772-745f-9c0c-59dcc1f238b4"))
    assert is_valid_branch_name(name)
    assert len(name) <= MAX_BRANCH_NAME_LENGTH
    assert name.startswith(staging_branch_prefix(key))
    info = parse_staging_branch_name(name)
    assert info is not None and info.try_number == try_number


def test_names_unique_per_attempt_and_prefix_per_key() -> None:
    key = KEYS[0]
    names = {staging_branch_name(AttemptId(key, t, ti)) for t in (1, 2) for ti in ("a", "b")}
    assert len(names) == 4
    other = PublicationKey(key.dag_id, key.run_id, key.task_id, 0)
    assert staging_branch_prefix(other) != staging_branch_prefix(key)
    # no key's prefix is a prefix of another key's branch names
    assert not staging_branch_name(AttemptId(other, 1, "a")).startswith(staging_branch_prefix(key))


def test_custom_prefix_and_invalid_prefixes() -> None:
    name = staging_branch_name(AttemptId(KEYS[0], 1, "x"), "stg_team-a")
    assert name.startswith("stg_team-a-") and parse_staging_branch_name(name, "stg_team-a") is not None
    assert parse_staging_branch_name(name) is None
    for bad in ["", "-x", "has space", "ü", "a" * 33, "a/b"]:
        with pytest.raises(ValueError):
            validate_staging_prefix(bad)


@pytest.mark.parametrize("name", ["main", "a", "feature-1", "_x", "A_b-9"])
def test_valid_branch_names(name: str) -> None:
    assert is_valid_branch_name(name)


@pytest.mark.parametrize("name", ["", "-a", "a b", "a/b", "ü", "a.b", "x" * 129, "a\n"])
def test_invalid_branch_names(name: str) -> None:
    assert not is_valid_branch_name(name)


def test_parse_rejects_foreign_names() -> None:
    assert parse_staging_branch_name("main") is None
    assert parse_staging_branch_name("lakefence-x-0123456789abcdef-tX-01234567") is None


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("role", [ROLE_STAGE, ROLE_PUBLISH])
def test_metadata_round_trip(key: PublicationKey, role: str) -> None:
    record = LakeFenceRecord(AttemptId(key, 4, "ti"), role, "i" * 64, "c" * 64 if role == ROLE_PUBLISH else None)
    encoded = encode_metadata(record)
    assert all(isinstance(k, str) and isinstance(v, str) and k.startswith("lakefence.") for k, v in encoded.items())
    assert decode_metadata({**encoded, "user": "x", ".lakefs.merge.strategy": "default"}) == record


def test_metadata_rejects_unknown_role() -> None:
    with pytest.raises(ValueError):
        encode_metadata(LakeFenceRecord(AttemptId(KEYS[0], 1, "t"), "bogus", "i"))


@pytest.mark.parametrize(
    "metadata",
    [None, {}, {"a": "b"}, {"lakefence.version": "1"}],
)
def test_decode_absent(metadata: dict[str, str] | None) -> None:
    assert decode_metadata(metadata) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("map_index", "x"), ("try_number", "0"), ("try_number", "-1"), ("role", "other"), ("version", "2")],
)
def test_decode_malformed(field: str, value: str) -> None:
    encoded = encode_metadata(LakeFenceRecord(AttemptId(KEYS[0], 1, "t"), ROLE_STAGE, "i"))
    encoded[f"lakefence.{field}"] = value
    assert decode_metadata(encoded) is None


def test_user_metadata_checks() -> None:
    assert check_user_metadata({"team": "a"}) == {"team": "a"}
    assert check_user_metadata(None) == {}
    for bad in [{"lakefence.role": "x"}, {".lakefs.merge.strategy": "x"}, {"n": 1}, {1: "x"}]:
        with pytest.raises(ValueError):
            check_user_metadata(bad)  # type: ignore[arg-type]
