"""Branch protection: the rules API (get/set, ETag, If-Match) and what a protected branch refuses.

Runs on both backends. Real lakeFS enforces new rules only once its settings cache expires (a few
seconds); the local server enforces them at once. The enforcement test therefore first waits,
bounded, until an upload to the protected branch is refused, then checks every operation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import lakefs
import lakefs_sdk
import pytest
from lakefs_sdk.exceptions import ApiException

ENFORCEMENT_DEADLINE = 60.0


def _rules(api: lakefs_sdk.RepositoriesApi, repo: lakefs.Repository) -> tuple[list[str], str]:
    response = api.get_branch_protection_rules_with_http_info(repo.id)
    return sorted(r.pattern for r in response.data), response.headers["ETag"]


def _rule(pattern: str) -> lakefs_sdk.BranchProtectionRule:
    return lakefs_sdk.BranchProtectionRule(pattern=pattern)


def _status(call: Callable[[], Any]) -> tuple[int, str]:
    try:
        call()
    except ApiException as exc:
        return exc.status, str(exc.body)
    return 200, ""


def test_rules_api_get_set_etag(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    api = lakefence_client.sdk_client.repositories_api
    assert _rules(api, lakefence_repo) == ([], "")
    # A conditional update of rules never set fails, as in lakeFS's settings manager.
    stale = _status(lambda: api.set_branch_protection_rules(
        lakefence_repo.id, [_rule("main")], if_match="0" * 64
    ))
    assert stale[0] == 412
    assert "Precondition failed" in stale[1]
    api.set_branch_protection_rules(lakefence_repo.id, [_rule("main"), _rule("rel-?")])
    patterns, etag = _rules(api, lakefence_repo)
    assert patterns == ["main", "rel-?"]
    assert etag
    api.set_branch_protection_rules(lakefence_repo.id, [_rule("ma*")], if_match=etag)
    patterns, second = _rules(api, lakefence_repo)
    assert patterns == ["ma*"]
    assert second != etag
    # The first ETag is stale now.
    assert _status(lambda: api.set_branch_protection_rules(lakefence_repo.id, [], if_match=etag))[0] == 412
    api.set_branch_protection_rules(lakefence_repo.id, [], if_match=second)
    assert _rules(api, lakefence_repo) == ([], "")


def test_rules_api_validation(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    api = lakefence_client.sdk_client.repositories_api
    client = api.api_client
    for body, fragment in (
        ([{"pattern": ""}], 'Error at \\"/0/pattern\\": minimum string length is 1'),
        ([{"x": "a"}], 'Error at \\"/0/pattern\\": property \\"pattern\\" is missing'),
        ({"pattern": "x"}, "value must be an array"),
    ):
        status, text = _status(lambda body=body: client.call_api(
            "/repositories/{repository}/settings/branch_protection", "PUT", {"repository": lakefence_repo.id},
            header_params={"Content-Type": "application/json"}, body=body, auth_settings=["basic_auth"],
            response_types_map={}, _return_http_data_only=True,
        ))
        assert status == 400
        assert fragment in text
    assert _status(lambda: api.get_branch_protection_rules("no-such-repo-x"))[0] == 404


def test_protected_branch_refuses_writes_allows_merges(
    lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client
) -> None:
    main = lakefence_repo.branch("main")
    main.object("a").upload(b"1")
    base = main.commit("base").get_commit()
    dev = lakefence_repo.branch("dev").create(main)
    dev.object("b").upload(b"2")
    dev.commit("on dev")
    sdk = lakefence_client.sdk_client
    sdk.repositories_api.set_branch_protection_rules(lakefence_repo.id, [_rule("ma*")])

    def probe() -> int:
        # Discarding changes of a path that has none: a no-op until the branch is protected.
        reset = lakefs_sdk.ResetCreation(type="object", path="no-such-path")
        return _status(lambda: sdk.branches_api.reset_branch(lakefence_repo.id, "main", reset))[0]

    deadline = time.monotonic() + ENFORCEMENT_DEADLINE
    while probe() != 403:
        # Real lakeFS reads the rules through a settings cache (about 3 s): wait for it, bounded.
        assert time.monotonic() < deadline, "the protection rules were never enforced"
        time.sleep(0.5)
    upload = _status(lambda: sdk.objects_api.upload_object(lakefence_repo.id, "main", "x", content=b"1"))
    assert upload[0] == 403
    assert "cannot write to protected branch" in upload[1]
    repo_id = lakefence_repo.id
    refused = {
        "delete": _status(lambda: sdk.objects_api.delete_object(repo_id, "main", "a")),
        "reset": _status(
            lambda: sdk.branches_api.reset_branch(repo_id, "main", lakefs_sdk.ResetCreation(type="reset"))
        ),
        "copy": _status(lambda: sdk.objects_api.copy_object(
            repo_id, "main", "c", lakefs_sdk.ObjectCopyCreation(src_path="a")
        )),
        "commit": _status(lambda: sdk.commits_api.commit(
            repo_id, "main", lakefs_sdk.CommitCreation(message="x", allow_empty=True)
        )),
        "hard_reset": _status(lambda: sdk.experimental_api.hard_reset_branch(repo_id, "main", base.parents[0])),
    }
    assert {name: status for name, (status, _) in refused.items()} == dict.fromkeys(refused, 403)
    assert "cannot write to protected branch" in refused["delete"][1]
    assert "cannot commit to protected branch" in refused["commit"][1]
    assert '"protected branch"' in refused["hard_reset"][1]
    batch = sdk.objects_api.delete_objects(repo_id, "main", lakefs_sdk.PathList(paths=["a"]))
    assert [(e.path, e.status_code) for e in batch.errors] == [("a", 403)]
    # Merges and reverts are allowed on a protected branch, as in lakeFS.
    merged = dev.merge_into(main)
    assert lakefence_repo.commit(merged).get_commit().parents[0] == base.id
    sdk.branches_api.revert_branch(repo_id, "main", lakefs_sdk.RevertCreation(ref=merged, parent_number=1))
    assert main.get_commit().parents == [merged]
    assert {o.path for o in main.objects()} == {"a"}
    # Branches not matching a pattern stay writable.
    assert _status(lambda: sdk.objects_api.upload_object(repo_id, "dev", "y", content=b"1"))[0] == 200


@pytest.mark.lakefs_local_only
def test_local_server_enforces_at_once(lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client) -> None:
    sdk = lakefence_client.sdk_client
    sdk.repositories_api.set_branch_protection_rules(lakefence_repo.id, [_rule("main")])
    with pytest.raises(ApiException) as refused:
        sdk.objects_api.upload_object(lakefence_repo.id, "main", "x", content=b"1")
    assert refused.value.status == 403
