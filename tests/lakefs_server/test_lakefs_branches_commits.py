"""Conformance: repositories, branches, commits, log and ref expressions (lakefs / lakefs_sdk clients)."""

from __future__ import annotations

import time
import uuid

import lakefs
import lakefs_sdk
import pytest
from lakefs.exceptions import (
    BadRequestException,
    ConflictException,
    ForbiddenException,
    NotFoundException,
    ServerException,
)


def _put(branch: lakefs.Branch, path: str, data: str = "x") -> None:
    branch.object(path).upload(data)


def _commits(branch: lakefs.Branch, count: int) -> list[str]:
    """Commit ``count`` times on ``branch`` (one new file each, ``f<i>``); return the ids, oldest first."""
    ids = []
    for i in range(count):
        _put(branch, f"f{i}", str(i))
        ids.append(branch.commit(f"c{i}").get_commit().id)
    return ids


def test_config_and_healthcheck(lakefence_client: lakefs.Client) -> None:
    api = lakefence_client.sdk_client
    api.health_check_api.health_check()
    config = api.config_api.get_config()
    assert config.storage_config is not None
    assert config.storage_config.blockstore_namespace_validity_regex
    assert lakefence_client.storage_config.blockstore_type
    assert lakefence_client.version


def test_repository_lifecycle(lakefence_server, lakefence_client: lakefs.Client) -> None:
    name = f"lakefence-{uuid.uuid4().hex[:12]}"
    namespace = f"{lakefence_server.storage_namespace}/{name}"
    repo = lakefs.Repository(name, client=lakefence_client).create(storage_namespace=namespace, default_branch="trunk")
    try:
        assert repo.properties.default_branch == "trunk"
        assert repo.properties.storage_namespace == namespace
        assert [b.id for b in repo.branches()] == ["trunk"]
        again = lakefs.Repository(name, client=lakefence_client).create(
            storage_namespace=namespace + "-x", exist_ok=True
        )
        assert again.properties.default_branch == "trunk"
        with pytest.raises(ConflictException):
            lakefs.Repository(name, client=lakefence_client).create(storage_namespace=namespace + "-y")
        assert name in {r.id for r in lakefs.repositories(client=lakefence_client, prefix="lakefence-")}
        first = repo.branch("trunk").get_commit()
        assert first.parents == [] and first.message == "Repository created"
    finally:
        repo.delete()
    # Real lakeFS may answer from its repository cache for a moment: wait, bounded, for the 404.
    deadline = time.monotonic() + 30
    while True:
        try:
            lakefence_client.sdk_client.repositories_api.get_repository(name)
        except lakefs_sdk.exceptions.NotFoundException:
            break
        assert time.monotonic() < deadline, "the deleted repository is still served"
        time.sleep(0.2)


def test_namespace_of_other_blockstore_is_400(lakefence_client: lakefs.Client) -> None:
    if lakefence_client.storage_config.blockstore_type == "mem":
        pytest.skip("mem:// is this lakeFS's own blockstore")
    with pytest.raises(BadRequestException):
        lakefs.Repository(f"lakefence-{uuid.uuid4().hex[:12]}", client=lakefence_client).create(
            storage_namespace="mem://not-this-blockstore"
        )


def test_repository_metadata(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    api = lakefence_client.sdk_client.internal_api
    assert lakefence_repo.metadata == {}
    api.set_repository_metadata(lakefence_repo.id, lakefs_sdk.RepositoryMetadataSet(metadata={"a": "1", "b": "2"}))
    api.delete_repository_metadata(lakefence_repo.id, lakefs_sdk.RepositoryMetadataKeys(keys=["a"]))
    assert lakefence_repo.metadata == {"b": "2"}


def test_branch_create_get_delete(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    _put(main, "a")
    c1 = main.commit("c1").get_commit()
    feature = lakefence_repo.branch("feature").create("main")
    assert feature.get_commit().id == c1.id
    with pytest.raises(ConflictException):
        lakefence_repo.branch("feature").create("main")
    assert lakefence_repo.branch("feature").create("main", exist_ok=True).id == "feature"
    from_commit = lakefence_repo.branch("from-commit").create(c1.id)
    assert from_commit.get_commit().id == c1.id
    from_expr = lakefence_repo.branch("from-parent").create("main~1")
    assert from_expr.get_commit().id == c1.parents[0]
    with pytest.raises(NotFoundException):
        lakefence_repo.branch("nope").create("no-such-ref")
    with pytest.raises(BadRequestException):
        lakefence_repo.branch("bad/name").create("main")
    with pytest.raises(BadRequestException):
        _ = lakefence_repo.branch("bad~name").head
    # lakeFS's getCommit maps only "not found"; an unparsable ref is a 500 there.
    with pytest.raises(ServerException) as unparsable:
        lakefence_repo.ref("main~x").get_commit()
    assert unparsable.value.status_code == 500
    feature.delete()
    with pytest.raises(NotFoundException):
        feature.get_commit()
    with pytest.raises(NotFoundException):
        feature.delete()
    with pytest.raises(ForbiddenException):
        main.delete()


def test_create_branch_returns_commit_id_text(
    lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client
) -> None:
    head = lakefence_repo.branch("main").get_commit().id
    created = lakefence_client.sdk_client.branches_api.create_branch(
        lakefence_repo.id, lakefs_sdk.BranchCreation(name="b1", source="main")
    )
    assert created == head


def test_hidden_branches_and_listing_pagination(
    lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client
) -> None:
    for i in range(7):
        lakefence_repo.branch(f"vis-{i}").create("main")
    lakefence_repo.branch("hid-1").create("main", hidden=True)
    visible = [b.id for b in lakefence_repo.branches()]
    assert "hid-1" not in visible
    assert visible == sorted(visible)
    assert "hid-1" in [b.id for b in lakefence_repo.branches(show_hidden=True)]
    api = lakefence_client.sdk_client.branches_api
    page1 = api.list_branches(lakefence_repo.id, prefix="vis-", amount=3)
    assert [r.id for r in page1.results] == ["vis-0", "vis-1", "vis-2"]
    assert page1.pagination.has_more and page1.pagination.next_offset == "vis-2"
    page3 = api.list_branches(lakefence_repo.id, prefix="vis-", amount=3, after="vis-5")
    assert [r.id for r in page3.results] == ["vis-6"]
    assert not page3.pagination.has_more and page3.pagination.next_offset == ""
    assert [b.id for b in lakefence_repo.branches(prefix="vis-")] == [f"vis-{i}" for i in range(7)]
    assert [b.id for b in lakefence_repo.branches(prefix="vis-", max_amount=2)] == ["vis-0", "vis-1"]


def test_commit_fields_and_no_changes(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    parent = main.get_commit()
    with pytest.raises(BadRequestException):
        main.commit("nothing")
    _put(main, "data/1")
    commit = main.commit("one", metadata={"k": "v"}).get_commit()
    assert commit.parents == [parent.id]
    assert commit.metadata == {"k": "v"}
    assert commit.message == "one"
    assert len(commit.id) == 64
    assert commit.meta_range_id
    empty = main.commit("empty", allow_empty=True).get_commit()
    assert empty.parents == [commit.id]
    assert empty.meta_range_id == commit.meta_range_id
    dated = main.commit("dated", allow_empty=True, date=1_600_000_000).get_commit()
    assert dated.creation_date == 1_600_000_000


def test_commit_generation_and_version(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    _put(main, "x")
    created = lakefence_client.sdk_client.commits_api.commit(
        lakefence_repo.id, "main", lakefs_sdk.CommitCreation(message="m")
    )
    first = lakefence_client.sdk_client.commits_api.get_commit(lakefence_repo.id, created.parents[0])
    assert created.version == 1
    assert created.generation == first.generation + 1


def test_log_amount_after_first_parent(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    ids = _commits(main, 5)
    log = [c.id for c in main.log()]
    assert log[:5] == list(reversed(ids))
    assert len(log) == 6
    assert [c.id for c in main.log(max_amount=2)] == [ids[4], ids[3]]
    api = lakefence_client.sdk_client.refs_api
    page = api.log_commits(lakefence_repo.id, "main", amount=2)
    assert page.pagination.has_more and page.pagination.next_offset == ids[3]
    page2 = api.log_commits(lakefence_repo.id, "main", amount=2, after=page.pagination.next_offset)
    assert [c.id for c in page2.results] == [ids[2], ids[1]]

    feature = lakefence_repo.branch("feature").create("main")
    _put(feature, "g")
    side = feature.commit("side").get_commit().id
    _put(main, "h")
    main_tip = main.commit("main-tip").get_commit().id
    merge = feature.merge_into(main)
    first_parent = [c.id for c in main.log(first_parent=True)]
    assert first_parent[:3] == [merge, main_tip, ids[4]]
    assert side not in first_parent
    assert side in [c.id for c in main.log()]


def test_log_objects_and_prefixes(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    _put(main, "a/1")
    c_a = main.commit("a").get_commit().id
    _put(main, "b/1")
    c_b = main.commit("b").get_commit().id
    _put(main, "a/2")
    c_a2 = main.commit("a2").get_commit().id
    assert [c.id for c in main.log(prefixes=["a/"])] == [c_a2, c_a]
    assert [c.id for c in main.log(objects=["b/1"])] == [c_b]


def test_ref_expressions(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    _put(main, "one")
    c1 = main.commit("c1").get_commit()
    _put(main, "two")
    c2 = main.commit("c2").get_commit()
    assert lakefence_repo.ref("main~1").get_commit().id == c1.id
    assert lakefence_repo.ref("main~2").get_commit().id == c1.parents[0]
    assert lakefence_repo.ref("main^").get_commit().id == c1.id
    assert lakefence_repo.ref("main^1~1").get_commit().id == c1.parents[0]
    assert lakefence_repo.ref(c2.id[:12]).get_commit().id == c2.id
    assert lakefence_repo.ref(f"{c2.id}~1").get_commit().id == c1.id
    with pytest.raises(NotFoundException):
        lakefence_repo.ref("main~10").get_commit()
    # An out-of-range parent is an invalid ref: getCommit answers it with a 500 (as lakeFS).
    with pytest.raises(ServerException) as out_of_range:
        lakefence_repo.ref("main^2").get_commit()
    assert out_of_range.value.status_code == 500
    # `main@` reads only committed data; `main` also sees uncommitted changes.
    _put(main, "staged-only")
    assert main.object("staged-only").exists()
    assert not lakefence_repo.ref("main@").object("staged-only").exists()
    assert lakefence_repo.ref("main@").get_commit().id == c2.id
    tag = lakefence_repo.tag("v1").create(c1.id)
    assert lakefence_repo.ref("v1").get_commit().id == c1.id
    assert tag.get_commit().id == c1.id
    assert lakefence_client.sdk_client.refs_api.find_merge_base(lakefence_repo.id, "v1", "main").base_commit_id == c1.id


def test_hard_reset_experimental(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    _put(main, "a")
    c1 = main.commit("c1").get_commit()
    _put(main, "b")
    main.commit("c2")
    _put(main, "staged")
    lakefence_client.sdk_client.experimental_api.hard_reset_branch(lakefence_repo.id, "main", c1.id)
    assert main.get_commit().id == c1.id
    # Uncommitted changes survive a hard reset, as in lakeFS.
    assert [c.path for c in main.uncommitted()] == ["staged"]
    with pytest.raises(lakefs_sdk.exceptions.NotFoundException):
        lakefence_client.sdk_client.experimental_api.hard_reset_branch(lakefence_repo.id, "main", "nope")
    with pytest.raises(lakefs_sdk.exceptions.NotFoundException):
        lakefence_client.sdk_client.experimental_api.hard_reset_branch(lakefence_repo.id, "missing", c1.id)


def test_reset_uncommitted_changes(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    _put(main, "keep/a")
    main.commit("base")
    _put(main, "keep/a", "changed")
    _put(main, "dir/x")
    _put(main, "dir/y")
    _put(main, "other")
    main.reset_changes("object", "keep/a")
    assert main.object("keep/a").reader().read() == b"x"
    main.reset_changes("common_prefix", "dir/")
    assert [c.path for c in main.uncommitted()] == ["other"]
    main.reset_changes()
    assert list(main.uncommitted()) == []


def test_tags(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    _put(main, "a")
    c1 = main.commit("c1").get_commit()
    for i in range(3):
        lakefence_repo.tag(f"t{i}").create("main")
    with pytest.raises(ConflictException):
        lakefence_repo.tag("t0").create("main")
    lakefence_repo.tag("t0").create("main", exist_ok=True)
    assert [t.id for t in lakefence_repo.tags()] == ["t0", "t1", "t2"]
    assert [t.id for t in lakefence_repo.tags(max_amount=1)] == ["t0"]
    assert lakefence_repo.tag("t1").get_commit().id == c1.id
    lakefence_repo.tag("t1").delete()
    with pytest.raises(NotFoundException):
        lakefence_repo.tag("t1").delete()
    with pytest.raises(NotFoundException):
        lakefence_repo.tag("nope").create("no-such-ref")


def test_wrong_credentials_are_401(lakefence_server) -> None:
    client = lakefs.Client(host=lakefence_server.url, username=lakefence_server.access_key_id, password="wrong")
    with pytest.raises(lakefs.exceptions.NotAuthorizedException):
        list(lakefs.repositories(client=client))


def test_repository_listing_pagination(lakefence_server, lakefence_client: lakefs.Client) -> None:
    prefix = f"lakefence-page-{uuid.uuid4().hex[:8]}-"
    names = [f"{prefix}{i}" for i in range(3)]
    repos = [
        lakefs.Repository(n, client=lakefence_client).create(
            storage_namespace=f"{lakefence_server.storage_namespace}/{n}"
        )
        for n in names
    ]
    try:
        api = lakefence_client.sdk_client.repositories_api
        page = api.list_repositories(prefix=prefix, amount=2)
        assert [r.id for r in page.results] == names[:2]
        assert page.pagination.has_more and page.pagination.next_offset == names[1]
        page = api.list_repositories(prefix=prefix, amount=2, after=names[1])
        assert [r.id for r in page.results] == names[2:]
        assert not page.pagination.has_more
        assert [r.id for r in lakefs.repositories(client=lakefence_client, prefix=prefix)] == names
    finally:
        for repo in repos:
            repo.delete()


def test_log_limit_and_stop_at(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    ids = _commits(main, 4)
    api = lakefence_client.sdk_client.refs_api
    stopped = api.log_commits(lakefence_repo.id, "main", stop_at=ids[1])
    assert [c.id for c in stopped.results] == [ids[3], ids[2], ids[1]]
    limited = api.log_commits(lakefence_repo.id, "main", amount=2, limit=True)
    assert [c.id for c in limited.results] == [ids[3], ids[2]]
    assert not limited.pagination.has_more


def test_read_only_repository_refuses_writes(lakefence_server, lakefence_client: lakefs.Client) -> None:
    name = f"lakefence-ro-{uuid.uuid4().hex[:8]}"
    lakefence_client.sdk_client.repositories_api.create_repository(
        lakefs_sdk.RepositoryCreation(
            name=name, storage_namespace=f"{lakefence_server.storage_namespace}/{name}", read_only=True
        )
    )
    repo = lakefs.Repository(name, client=lakefence_client)
    try:
        assert lakefence_client.sdk_client.repositories_api.get_repository(name).read_only is True
        with pytest.raises(ForbiddenException):
            repo.branch("b").create("main")
        with pytest.raises(ForbiddenException):
            repo.branch("main").commit("nope", allow_empty=True)
    finally:
        # A read-only repository is deleted only with force, as in lakeFS.
        with pytest.raises(lakefs_sdk.exceptions.ForbiddenException):
            lakefence_client.sdk_client.repositories_api.delete_repository(name)
        lakefence_client.sdk_client.repositories_api.delete_repository(name, force=True)
