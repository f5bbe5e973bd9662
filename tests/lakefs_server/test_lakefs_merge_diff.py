"""Conformance: diff (two_dot, three_dot, uncommitted), merge, revert and cherry-pick."""

from __future__ import annotations

import json

import lakefs
import lakefs_sdk
import pytest
from lakefs.exceptions import BadRequestException, ConflictException, NotFoundException


def _put(branch: lakefs.Branch, path: str, data: str = "x") -> None:
    branch.object(path).upload(data)


def _changes(changes: object) -> list[tuple[str, str]]:
    return [(c.path, c.type) for c in changes]  # type: ignore[attr-defined]


@pytest.fixture
def forked(lakefence_repo: lakefs.Repository) -> tuple[lakefs.Branch, lakefs.Branch]:
    """``main`` with a/1, a/2, b/1 committed, and ``feature`` branched from it."""
    main = lakefence_repo.branch("main")
    for path in ("a/1", "a/2", "b/1"):
        _put(main, path, path)
    main.commit("base")
    return main, lakefence_repo.branch("feature").create("main")


def test_uncommitted_diff(forked: tuple[lakefs.Branch, lakefs.Branch]) -> None:
    _, feature = forked
    _put(feature, "a/1", "changed")
    _put(feature, "c/new")
    feature.object("b/1").delete()
    _put(feature, "tmp")
    feature.object("tmp").delete()
    assert _changes(feature.uncommitted()) == [("a/1", "changed"), ("b/1", "removed"), ("c/new", "added")]
    assert _changes(feature.uncommitted(prefix="c/")) == [("c/new", "added")]
    sizes = {c.path: c.size_bytes for c in feature.uncommitted()}
    assert sizes["a/1"] == len("changed")


def test_two_dot_and_three_dot(forked: tuple[lakefs.Branch, lakefs.Branch], lakefence_repo: lakefs.Repository) -> None:
    main, feature = forked
    _put(feature, "a/1", "feature")
    _put(feature, "c/1")
    feature.commit("feature work")
    _put(main, "d/1")
    main.commit("main work")
    # two_dot compares trees: main's new file shows as removed from main's point of view.
    assert _changes(main.diff(feature, type="two_dot")) == [("a/1", "changed"), ("c/1", "added"), ("d/1", "removed")]
    # three_dot: what merging feature into main would bring.
    assert _changes(main.diff(feature)) == [("a/1", "changed"), ("c/1", "added")]
    assert _changes(main.diff(feature, type="two_dot", max_amount=1)) == [("a/1", "changed")]
    assert _changes(main.diff(feature, type="two_dot", prefix="c/")) == [("c/1", "added")]
    assert _changes(main.diff(feature, type="two_dot", after="a/1")) == [("c/1", "added"), ("d/1", "removed")]
    assert _changes(main.diff(feature, type="two_dot", delimiter="/")) == [
        ("a/", "prefix_changed"),
        ("c/", "prefix_changed"),
        ("d/", "prefix_changed"),
    ]
    assert list(main.diff(main, type="two_dot")) == []


def test_diff_pagination(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    base = main.get_commit().id
    for i in range(5):
        _put(main, f"p/{i}")
    main.commit("five")
    api = lakefence_client.sdk_client.refs_api
    page = api.diff_refs(lakefence_repo.id, base, "main", type="two_dot", amount=2)
    assert [d.path for d in page.results] == ["p/0", "p/1"]
    assert page.pagination.has_more and page.pagination.next_offset == "p/1"
    page = api.diff_refs(lakefence_repo.id, base, "main", type="two_dot", amount=2, after="p/3")
    assert [d.path for d in page.results] == ["p/4"]
    assert not page.pagination.has_more
    assert len(list(lakefence_repo.ref(base).diff(main, type="two_dot"))) == 5


def test_merge_parents_metadata_and_tree(
    forked: tuple[lakefs.Branch, lakefs.Branch], lakefence_client: lakefs.Client, lakefence_repo: lakefs.Repository
) -> None:
    main, feature = forked
    commits = lakefence_client.sdk_client.commits_api
    _put(feature, "c/1")
    source = commits.get_commit(lakefence_repo.id, feature.commit("feature").get_commit().id)
    dest_before = commits.get_commit(lakefence_repo.id, "main")
    merge_id = feature.merge_into(main, message="publish", metadata={"run": "42"})
    merge = commits.get_commit(lakefence_repo.id, merge_id)
    assert merge.parents == [dest_before.id, source.id]
    assert merge.metadata == {"run": "42", ".lakefs.merge.strategy": "default"}
    assert merge.message == "publish"
    assert merge.generation == max(dest_before.generation, source.generation) + 1
    assert main.get_commit().id == merge_id
    # No fast-forward: main had no new commits, still a new merge commit with the source's tree.
    assert merge.meta_range_id == source.meta_range_id
    assert merge_id != source.id
    assert main.object("c/1").exists()


def test_merge_default_message(forked: tuple[lakefs.Branch, lakefs.Branch]) -> None:
    main, feature = forked
    _put(feature, "z")
    feature.commit("z")
    merge_id = feature.merge_into(main)
    assert main.get_commit().message == "Merge 'feature' into 'main'"
    assert main.get_commit().id == merge_id


def test_merge_no_changes_is_400(forked: tuple[lakefs.Branch, lakefs.Branch]) -> None:
    main, feature = forked
    with pytest.raises(BadRequestException):
        feature.merge_into(main)
    merged = feature.merge_into(main, allow_empty=True)
    assert main.get_commit().id == merged
    forced = feature.merge_into(main, force=True)
    assert main.get_commit().parents[0] == merged
    assert main.get_commit().id == forced


def test_merge_into_dirty_branch_is_400(forked: tuple[lakefs.Branch, lakefs.Branch]) -> None:
    main, feature = forked
    _put(feature, "f")
    feature.commit("f")
    _put(main, "uncommitted")
    with pytest.raises(BadRequestException):
        feature.merge_into(main)


def test_merge_conflict_is_409_with_empty_reference(
    forked: tuple[lakefs.Branch, lakefs.Branch], lakefence_client: lakefs.Client, lakefence_repo: lakefs.Repository
) -> None:
    main, feature = forked
    _put(feature, "a/1", "feature")
    feature.commit("f")
    _put(main, "a/1", "main")
    main.commit("m")
    head = main.get_commit().id
    with pytest.raises(lakefs_sdk.exceptions.ApiException) as info:
        lakefence_client.sdk_client.refs_api.merge_into_branch(lakefence_repo.id, "feature", "main")
    assert info.value.status == 409
    assert info.value.body is not None and json.loads(info.value.body) == {"reference": ""}
    with pytest.raises(ConflictException):
        feature.merge_into(main)
    assert main.get_commit().id == head
    # The three-dot diff marks the conflict.
    assert ("a/1", "conflict") in _changes(main.diff(feature))


def test_merge_strategies(forked: tuple[lakefs.Branch, lakefs.Branch]) -> None:
    main, feature = forked
    _put(feature, "a/1", "feature")
    _put(feature, "c/1", "feature")
    feature.commit("f")
    _put(main, "a/1", "main")
    main.commit("m")
    feature.merge_into(main, strategy="dest-wins")
    assert main.object("a/1").reader().read() == b"main"
    assert main.object("c/1").exists()
    assert main.get_commit().metadata[".lakefs.merge.strategy"] == "dest-wins"
    _put(feature, "a/1", "feature2")
    feature.commit("f2")
    feature.merge_into(main, strategy="source-wins")
    assert main.object("a/1").reader().read() == b"feature2"
    assert main.get_commit().metadata[".lakefs.merge.strategy"] == "source-wins"
    _put(feature, "q")
    feature.commit("q")
    with pytest.raises(BadRequestException):
        feature.merge_into(main, strategy="nonsense")


def test_squash_merge_has_one_parent(forked: tuple[lakefs.Branch, lakefs.Branch]) -> None:
    main, feature = forked
    _put(feature, "s")
    feature.commit("s")
    before = main.get_commit().id
    feature.merge_into(main, squash_merge=True)
    merged = main.get_commit()
    assert merged.parents == [before]
    assert main.object("s").exists()


def test_merge_unknown_refs_are_404(
    forked: tuple[lakefs.Branch, lakefs.Branch], lakefence_repo: lakefs.Repository
) -> None:
    main, _ = forked
    with pytest.raises(NotFoundException):
        lakefence_repo.ref("no-such-ref").merge_into(main)
    with pytest.raises(NotFoundException):
        lakefence_repo.ref("main").merge_into("no-such-branch")


def test_merge_deletions_and_identical_changes(forked: tuple[lakefs.Branch, lakefs.Branch]) -> None:
    # Entries are compared by identity (size, checksum, metadata, content type), not address:
    # the same content added on both sides is not a conflict.
    main, feature = forked
    feature.object("b/1").delete()
    _put(feature, "same", "same")
    feature.commit("delete b/1")
    _put(main, "same", "same")
    _put(main, "m/1")
    main.commit("main side")
    feature.merge_into(main)
    assert not main.object("b/1").exists()
    assert main.object("m/1").exists()
    assert main.object("same").reader().read() == b"same"


def test_revert(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    _put(main, "keep")
    main.commit("keep")
    _put(main, "undo-me")
    bad = main.commit("bad").get_commit()
    reverted = main.revert(bad.id)
    assert reverted.parents == [bad.id]
    assert not main.object("undo-me").exists()
    assert main.object("keep").exists()
    with pytest.raises(BadRequestException):
        main.revert(bad.id)


def test_revert_merge_needs_parent_number(forked: tuple[lakefs.Branch, lakefs.Branch]) -> None:
    main, feature = forked
    _put(feature, "m")
    feature.commit("m")
    merge_id = feature.merge_into(main)
    with pytest.raises(ConflictException):
        main.revert(merge_id)
    main.revert(merge_id, parent_number=1)
    assert not main.object("m").exists()


def test_cherry_pick(forked: tuple[lakefs.Branch, lakefs.Branch]) -> None:
    main, feature = forked
    _put(feature, "picked")
    picked = feature.commit("pick me", metadata={"k": "v"}).get_commit()
    _put(feature, "not-picked")
    feature.commit("leave me")
    head = main.get_commit().id
    created = main.cherry_pick(picked.id)
    assert created.parents == [head]
    assert created.message == "pick me"
    assert created.metadata["cherry-pick-origin"] == picked.id
    assert created.metadata["k"] == "v"
    assert main.object("picked").exists()
    assert not main.object("not-picked").exists()
    # As in lakeFS, picking changes the branch already has adds a commit with an unchanged tree.
    # Picked by a ref expression: lakeFS v1.86 alters its cached record of a picked commit, whose
    # id then no longer resolves until the cache entry expires.
    again = main.cherry_pick("feature~1")
    assert again.parents == [created.id]
    assert again.meta_range_id == created.meta_range_id


def test_diff_right_stats(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    base = main.get_commit().id
    main.object("r").upload("right", content_type="text/plain", metadata={"a": "b"})
    main.commit("r")
    page = lakefence_client.sdk_client.refs_api.diff_refs(
        lakefence_repo.id, base, "main", type="two_dot", include_right_stats=True
    )
    (item,) = page.results
    assert item.right is not None
    assert item.right.content_type == "text/plain"
    assert item.right.metadata == {"a": "b"}
    assert item.right.checksum == main.object("r").stat().checksum


def test_cherry_pick_merge_commit_needs_parent_number(
    forked: tuple[lakefs.Branch, lakefs.Branch], lakefence_repo: lakefs.Repository
) -> None:
    main, feature = forked
    _put(feature, "m")
    feature.commit("m")
    merge_id = feature.merge_into(main)
    other = lakefence_repo.branch("other").create(merge_id + "~1")
    with pytest.raises(BadRequestException):
        other.cherry_pick(merge_id)
    picked = other.cherry_pick(merge_id, parent_number=1)
    assert other.object("m").exists()
    assert picked.metadata["cherry-pick-origin"] == merge_id
