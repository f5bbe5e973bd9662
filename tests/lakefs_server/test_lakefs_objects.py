"""Conformance: object upload, stat, get (ranges), list, delete, copy; lakefs-spec as a second client."""

from __future__ import annotations

import hashlib
import json

import lakefs
import lakefs_sdk
import pytest
from lakefs.exceptions import (
    NotFoundException,
    ObjectExistsException,
    ObjectNotFoundException,
)
from lakefs_spec import LakeFSFileSystem


def test_upload_stat_read(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    data = bytes(range(256)) * 1000
    obj = main.object("dir/blob.bin").upload(data, content_type="application/x-test", metadata={"owner": "me"})
    stat = obj.stat()
    assert stat.size_bytes == len(data)
    assert stat.content_type == "application/x-test"
    assert stat.metadata == {"owner": "me"}
    assert stat.checksum == hashlib.md5(data).hexdigest()
    assert obj.reader().read() == data


def test_upload_chunked_large_body(lakefence_repo: lakefs.Repository) -> None:
    # The SDK sends a file-like body: urllib3 uses chunked transfer encoding.
    main = lakefence_repo.branch("main")
    data = b"0123456789abcdef" * (1 << 17)
    with main.object("big").writer(mode="wb") as writer:
        for offset in range(0, len(data), 65536):
            writer.write(data[offset : offset + 65536])
    assert main.object("big").stat().size_bytes == len(data)
    assert main.object("big").reader().read() == data


def test_exclusive_upload(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    main.object("once").upload("first", mode="x")
    with pytest.raises(ObjectExistsException):
        main.object("once").upload("second", mode="x")
    assert main.object("once").reader().read() == b"first"
    main.commit("c")
    with pytest.raises(ObjectExistsException):
        main.object("once").upload("third", mode="xb")


def test_ranges(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    main.object("r").upload(b"0123456789")
    api = lakefence_client.sdk_client.objects_api
    assert bytes(api.get_object(lakefence_repo.id, "main", "r", range="bytes=2-4")) == b"234"
    assert bytes(api.get_object(lakefence_repo.id, "main", "r", range="bytes=7-")) == b"789"
    assert bytes(api.get_object(lakefence_repo.id, "main", "r", range="bytes=-2")) == b"89"
    resp = api.get_object_with_http_info(lakefence_repo.id, "main", "r", range="bytes=2-4")
    assert resp.status_code == 206
    assert resp.headers["Content-Range"] == "bytes 2-4/10"
    with pytest.raises(lakefs_sdk.exceptions.ApiException) as info:
        api.get_object(lakefence_repo.id, "main", "r", range="bytes=20-30")
    assert info.value.status == 416
    with main.object("r").reader() as reader:
        reader.seek(5)
        assert reader.read(3) == b"567"


def test_head_and_exists(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    assert not main.object("nope").exists()
    main.object("yes").upload("1")
    assert main.object("yes").exists()
    with pytest.raises(ObjectNotFoundException):
        main.object("nope").stat()
    with pytest.raises(ObjectNotFoundException):
        main.object("nope").reader().read()


def test_list_prefix_delimiter_pagination(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    main = lakefence_repo.branch("main")
    paths = ["a/1", "a/2", "a/b/3", "c", "d/4", "d/5"]
    for p in paths:
        main.object(p).upload(p)
    main.commit("files")
    main.object("e").upload("staged")
    main.object("c").delete()
    assert [o.path for o in main.objects()] == ["a/1", "a/2", "a/b/3", "d/4", "d/5", "e"]
    assert [o.path for o in lakefence_repo.ref("main@").objects()] == paths
    assert [o.path for o in main.objects(prefix="a/")] == ["a/1", "a/2", "a/b/3"]
    listed = list(main.objects(delimiter="/"))
    assert [(o.path, type(o).__name__) for o in listed] == [
        ("a/", "CommonPrefix"),
        ("d/", "CommonPrefix"),
        ("e", "ObjectInfo"),
    ]
    assert [o.path for o in main.objects(prefix="a/", delimiter="/")] == ["a/1", "a/2", "a/b/"]
    api = lakefence_client.sdk_client.objects_api
    page = api.list_objects(lakefence_repo.id, "main", amount=2)
    assert [o.path for o in page.results] == ["a/1", "a/2"]
    assert page.pagination.has_more and page.pagination.next_offset == "a/2"
    page = api.list_objects(lakefence_repo.id, "main", amount=2, after="a/2")
    assert [o.path for o in page.results] == ["a/b/3", "d/4"]
    page = api.list_objects(lakefence_repo.id, "main", delimiter="/", amount=1, after="a/")
    assert [o.path for o in page.results] == ["d/"]
    assert [o.path for o in main.objects(max_amount=3)] == ["a/1", "a/2", "a/b/3"]


def test_delete_and_delete_many(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    for p in ("x/1", "x/2", "x/3", "y"):
        main.object(p).upload(p)
    main.commit("c")
    main.object("y").delete()
    main.delete_objects(["x/1", "x/2", "never-existed"])
    assert [o.path for o in main.objects()] == ["x/3"]
    assert sorted((c.path, c.type) for c in main.uncommitted()) == [
        ("x/1", "removed"),
        ("x/2", "removed"),
        ("y", "removed"),
    ]
    main.commit("deleted")
    assert [o.path for o in main.objects()] == ["x/3"]


def test_copy(lakefence_repo: lakefs.Repository) -> None:
    main = lakefence_repo.branch("main")
    main.object("src").upload("payload", metadata={"m": "1"})
    main.commit("src")
    other = lakefence_repo.branch("other").create("main")
    copied = lakefence_repo.ref("main").object("src").copy("other", "dst")
    assert copied.reader().read() == b"payload"
    assert copied.stat().metadata == {"m": "1"}
    assert copied.stat().physical_address != main.object("src").stat().physical_address
    assert [c.path for c in other.uncommitted()] == ["dst"]
    with pytest.raises(NotFoundException):
        main.object("missing").copy("other", "dst2")


def test_upload_to_missing_branch_is_404(lakefence_repo: lakefs.Repository) -> None:
    with pytest.raises(NotFoundException):
        lakefence_repo.branch("no-branch").object("x").upload("x")


def test_lakefs_spec_round_trip(lakefence_server, lakefence_repo: lakefs.Repository) -> None:
    fs = LakeFSFileSystem(
        host=lakefence_server.url,
        username=lakefence_server.access_key_id,
        password=lakefence_server.secret_access_key,
    )
    root = f"{lakefence_repo.id}/main"
    fs.pipe(f"{root}/spec/a.txt", b"alpha")
    fs.pipe(f"{root}/spec/b.txt", b"beta")
    assert fs.cat(f"{root}/spec/a.txt") == b"alpha"
    assert sorted(fs.ls(f"{root}/spec", detail=False)) == [f"{root}/spec/a.txt", f"{root}/spec/b.txt"]
    assert fs.exists(f"{root}/spec/b.txt")
    assert fs.info(f"{root}/spec/b.txt")["size"] == 4
    fs.rm(f"{root}/spec/a.txt")
    assert not fs.exists(f"{root}/spec/a.txt")
    lakefence_repo.branch("main").commit("spec files")
    with fs.transaction(lakefence_repo.id, "main") as tx:
        fs.pipe(f"{lakefence_repo.id}/{tx.branch.id}/spec/c.txt", b"gamma")
        tx.commit(message="from lakefs-spec")
    assert fs.cat(f"{root}/spec/c.txt") == b"gamma"


def test_presign_without_pre_signing_blockstore(
    lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client
) -> None:
    """``presign=true`` fails (400) when there is an object to pre-sign, and only then."""
    if lakefence_client.storage_config.pre_sign_support:
        pytest.skip("this lakeFS's blockstore pre-signs")
    main = lakefence_repo.branch("main")
    main.object("d/x").upload(b"x")
    objects = lakefence_client.sdk_client.objects_api
    refused = {"message": "local adapter presigned URL: operation not supported"}
    for call in (
        lambda: objects.stat_object(lakefence_repo.id, "main", "d/x", presign=True),
        lambda: objects.get_object(lakefence_repo.id, "main", "d/x", presign=True),
        lambda: objects.list_objects(lakefence_repo.id, "main", presign=True),
    ):
        with pytest.raises(lakefs_sdk.exceptions.BadRequestException) as bad:
            call()
        assert json.loads(bad.value.body) == refused
    with pytest.raises(lakefs_sdk.exceptions.NotFoundException):
        objects.stat_object(lakefence_repo.id, "main", "nothing", presign=True)
    # Common prefixes are not pre-signed: a page of them alone is answered.
    page = objects.list_objects(lakefence_repo.id, "main", delimiter="/", presign=True)
    assert [(r.path, r.path_type) for r in page.results] == [("d/", "common_prefix")]
    assert objects.list_objects(lakefence_repo.id, "main", prefix="zz", presign=True).results == []
