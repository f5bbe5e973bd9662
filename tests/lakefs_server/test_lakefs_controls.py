"""The fault-injecting proxy on either backend: counts, latency, faults, hooks; in-process and over /_lakefence/."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import lakefs
import lakefs_sdk
import pytest
import requests
import urllib3
from lakefs.exceptions import ServerException

import lakefence_testing.lakefs_server as server_package
from lakefence_testing.controls import Controls, RemoteControls
from lakefence_testing.lakefs_server import DEFAULT_ACCESS_KEY_ID, DEFAULT_SECRET_ACCESS_KEY

_ROOT = Path(server_package.__file__).resolve().parents[2]


def _raw_client(lakefence_server, retries: int = 0) -> lakefs_sdk.client.LakeFSClient:
    config = lakefs_sdk.Configuration(
        host=lakefence_server.endpoint,
        username=lakefence_server.access_key_id,
        password=lakefence_server.secret_access_key,
    )
    config.retries = urllib3.Retry(total=retries, connect=retries, read=retries, status=0)
    return lakefs_sdk.client.LakeFSClient(config)


def test_counts_per_operation(lakefence_repo: lakefs.Repository, lakefence_controls: Controls) -> None:
    main = lakefence_repo.branch("main")
    main.object("a").upload("1")
    main.commit("c")
    main.get_commit()
    counts = lakefence_controls.counts()
    assert counts["uploadObject"] == 1
    assert counts["commit"] == 1
    assert counts["getCommit"] == 1
    lakefence_controls.reset_counts()
    assert lakefence_controls.counts() == {}


def test_fault_before_does_not_apply(lakefence_repo: lakefs.Repository, lakefence_controls: Controls) -> None:
    main = lakefence_repo.branch("main")
    feature = lakefence_repo.branch("feature").create("main")
    feature.object("f").upload("f")
    feature.commit("f")
    head = main.get_commit().id
    lakefence_controls.add_fault("mergeIntoBranch", status=503)
    with pytest.raises(ServerException) as info:
        feature.merge_into(main)
    assert info.value.status_code == 503
    assert main.get_commit().id == head
    merged = feature.merge_into(main)
    assert main.get_commit().id == merged


def test_fault_after_applies_then_fails(lakefence_repo: lakefs.Repository, lakefence_controls: Controls) -> None:
    main = lakefence_repo.branch("main")
    main.object("a").upload("1")
    head = main.get_commit().id
    lakefence_controls.add_fault("commit", status=500, when="after")
    with pytest.raises(ServerException):
        main.commit("lost answer")
    committed = main.get_commit()
    assert committed.parents == [head]
    assert committed.message == "lost answer"


def test_nth_call_and_drop(lakefence_server, lakefence_repo: lakefs.Repository, lakefence_controls: Controls) -> None:
    client = _raw_client(lakefence_server)
    lakefence_controls.add_fault("getBranch", nth=2, drop=True)
    client.branches_api.get_branch(lakefence_repo.id, "main")
    with pytest.raises(urllib3.exceptions.HTTPError):
        client.branches_api.get_branch(lakefence_repo.id, "main")
    client.branches_api.get_branch(lakefence_repo.id, "main")
    assert lakefence_controls.counts()["getBranch"] == 3
    assert lakefence_controls.faults() == []


def test_drop_after_keeps_the_write(
    lakefence_server, lakefence_repo: lakefs.Repository, lakefence_controls: Controls
) -> None:
    client = _raw_client(lakefence_server)
    lakefence_controls.add_fault("createBranch", drop=True, when="after")
    with pytest.raises(urllib3.exceptions.HTTPError):
        client.branches_api.create_branch(lakefence_repo.id, lakefs_sdk.BranchCreation(name="b", source="main"))
    assert client.branches_api.get_branch(lakefence_repo.id, "b").id == "b"


def test_latency_and_delay(lakefence_repo: lakefs.Repository, lakefence_controls: Controls) -> None:
    main = lakefence_repo.branch("main")
    lakefence_controls.set_latency(0.2)
    start = time.monotonic()
    main.get_commit()
    assert time.monotonic() - start >= 0.2
    lakefence_controls.set_latency(0)
    lakefence_controls.add_fault("getCommit", delay=0.3)
    start = time.monotonic()
    main.get_commit()
    assert time.monotonic() - start >= 0.3


def test_invalid_faults_rejected(lakefence_controls: Controls) -> None:
    with pytest.raises(ValueError):
        lakefence_controls.add_fault("commit")
    with pytest.raises(ValueError):
        lakefence_controls.add_fault("commit", nth=0, status=500)


def test_remote_controls(lakefence_server, lakefence_repo: lakefs.Repository, lakefence_controls: Controls) -> None:
    remote = RemoteControls(lakefence_server.url)
    lakefence_repo.branch("main").get_commit()
    assert remote.counts()["getCommit"] == 1
    remote.reset_counts()
    assert remote.counts() == {}
    remote.add_fault("getCommit", status=502)
    with pytest.raises(ServerException) as info:
        lakefence_repo.branch("main").get_commit()
    assert info.value.status_code == 502
    remote.add_fault("getCommit", nth=2, status=502)
    assert remote.faults() == lakefence_controls.faults()
    assert remote.faults()[0].nth == 2
    remote.clear_faults()
    assert remote.faults() == []
    lakefence_repo.branch("main").get_commit()
    remote.set_latency(0.1)
    assert lakefence_controls.latency() == pytest.approx(0.1)
    assert remote.latency() == pytest.approx(0.1)
    remote.reset()
    assert lakefence_controls.latency() == 0


@pytest.mark.lakefs_local_only
def test_remote_stats(lakefence_server, lakefence_repo: lakefs.Repository, lakefence_controls: Controls) -> None:
    remote = RemoteControls(lakefence_server.url)
    remote.reset()
    lakefence_repo.branch("main").get_commit()
    assert remote.stats()["commit_reads"] >= 1


def test_hooks_see_the_call_before_and_after(
    lakefence_server, lakefence_repo: lakefs.Repository, lakefence_controls: Controls
) -> None:
    direct = lakefs.Client(
        host=lakefence_server.server.url if lakefence_server.server is not None else lakefence_server.url,
        username=lakefence_server.access_key_id,
        password=lakefence_server.secret_access_key,
    )
    seen: list[tuple[str, int | None, bool]] = []

    def exists(name: str) -> bool:
        return name in {b.id for b in lakefs.Repository(lakefence_repo.id, client=direct).branches()}

    lakefence_controls.add_fault(
        "createBranch", hook=lambda call: seen.append((call.operation, call.status, exists("h")))
    )
    lakefence_controls.add_fault(
        "createBranch", nth=2, when="after", hook=lambda call: seen.append((call.method, call.status, exists("h2")))
    )
    lakefence_repo.branch("h").create("main")
    lakefence_repo.branch("h2").create("main")
    # Before: lakeFS has not seen the request yet; after: it has processed it (201).
    assert seen == [("createBranch", None, False), ("POST", 201, True)]
    assert lakefence_controls.faults() == []


def test_large_objects_stream_through(lakefence_repo: lakefs.Repository, lakefence_controls: Controls) -> None:
    import hashlib
    import os

    payload = os.urandom(3 << 20) * 8  # 24 MiB, sent chunked by the SDK
    branch = lakefence_repo.branch("main")
    branch.object("big.bin").upload(payload)
    digest = hashlib.sha256()
    with lakefence_repo.ref("main").object("big.bin").reader(mode="rb") as reader:
        while chunk := reader.read(1 << 20):
            digest.update(chunk)
    assert digest.hexdigest() == hashlib.sha256(payload).hexdigest()
    assert lakefence_controls.counts()["uploadObject"] == 1


def test_operation_ids_come_from_the_swagger_routes() -> None:
    from lakefence_testing.proxy import operation_of

    assert operation_of("POST", "/api/v1/repositories/r/refs/feature/merge/main") == "mergeIntoBranch"
    assert operation_of("GET", "/api/v1/repositories/r/refs/feature/merge/main") == "findMergeBase"
    assert operation_of("PUT", "/api/v1/repositories/r/branches/b/hard_reset?ref=x") == "hardResetBranch"
    assert operation_of("GET", "/api/v1/repositories/r/branches/b/objects/stage_allowed") is not None
    assert operation_of("GET", "/api/v1/auth/users/u1") == "getUser"
    assert operation_of("GET", "/repo/main/path") is None  # S3 gateway: not counted


@pytest.mark.lakefs_local_only
def test_local_server_keeps_only_its_stats(lakefence_server, lakefence_repo: lakefs.Repository) -> None:
    """Counts, latency and faults are the proxy's; the server itself serves only its internal counters."""
    server_url = lakefence_server.server.url  # the local server behind the proxy
    lakefence_repo.branch("main").get_commit()
    assert RemoteControls(server_url).stats()["commit_reads"] >= 1
    for path in ("counts", "latency", "faults"):
        answer = requests.get(f"{server_url}/_lakefence/{path}", timeout=10)
        assert answer.status_code == 404, path
    assert requests.delete(f"{server_url}/_lakefence/stats", timeout=10).status_code == 204
    assert RemoteControls(server_url).stats() == {}


@pytest.mark.lakefs_local_only
def test_server_process_runs_behind_the_proxy(tmp_path) -> None:
    """``python -m lakefence_testing.lakefs_server --latency``: the printed URL is a proxy's."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakefence_testing.lakefs_server", "--data-dir", str(tmp_path),
         "--latency", "0.2"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        controls = RemoteControls(url)
        assert controls.latency() == pytest.approx(0.2)
        client = lakefs.Client(host=url, username=DEFAULT_ACCESS_KEY_ID, password=DEFAULT_SECRET_ACCESS_KEY)
        began = time.monotonic()
        lakefs.Repository("behind-proxy", client=client).create(storage_namespace="local://behind-proxy")
        assert time.monotonic() - began >= 0.2
        assert controls.counts()["createRepository"] == 1
        assert "commit_reads" in controls.stats()  # the server's counters, through the proxy
        controls.set_latency(0)
        controls.add_fault("getRepository", status=503)
        with pytest.raises(lakefs_sdk.exceptions.ServiceException):
            client.sdk_client.repositories_api.get_repository("behind-proxy")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
