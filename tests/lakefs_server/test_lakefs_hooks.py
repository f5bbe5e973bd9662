"""Pre-merge Lua hooks and their ``lakefs`` module, on both backends.

The hook's answers are compared with what lakeFS v1.86.0 answers: ``diff_refs`` (three-dot) and
``list_objects`` return ``(status, table)``, ``stat_object`` ``(status, JSON text)``,
``get_object`` ``(status, content)``; a failing hook aborts the merge with 412.
"""

from __future__ import annotations

import json

import lakefs
import lakefs_sdk
import pytest
from lakefs_sdk.exceptions import ApiException

_PROBE = r"""
local lakefs = require("lakefs")
local repo = action.repository_id
local out = {}
local code, diff = lakefs.diff_refs(repo, action.commit.parents[1], action.commit_id)
table.insert(out, "DIFF " .. code)
for _, d in ipairs(diff.results) do table.insert(out, d.type .. ":" .. d.path .. ":" .. d.size_bytes) end
local lcode, listing = lakefs.list_objects(repo, action.commit_id, "", "data/", "/")
table.insert(out, "LIST " .. lcode .. " " .. listing.pagination.results)
for _, o in ipairs(listing.results) do table.insert(out, o.path .. ":" .. tostring(o.metadata and o.metadata.k)) end
local scode, stat = lakefs.stat_object(repo, action.commit_id, "data/y")
table.insert(out, "STAT " .. scode .. " " .. type(stat) .. " " .. stat)
local gcode, content = lakefs.get_object(repo, action.commit_id, "data/y")
table.insert(out, "GET " .. gcode .. " " .. content)
local mcode, missing = lakefs.stat_object(repo, action.commit_id, "nope")
table.insert(out, "MISSING " .. mcode .. " " .. missing)
local ncode, nodiff = lakefs.diff_refs(repo, "nosuch", action.commit_id)
table.insert(out, "NODIFF " .. ncode .. " " .. nodiff.message)
error("PROBE|" .. table.concat(out, "|") .. "|END")
"""

# A server-side compare-and-swap: the merge lands only if the destination is still at the head
# named in the merge metadata (the hard fence's pattern).
_FENCE = r"""
local lakefs = require("lakefs")
local expected = action.commit.metadata["expected_head"]
local code, diff = lakefs.diff_refs(action.repository_id, expected, action.commit.parents[1])
if code ~= 200 then error("diff failed: " .. code) end
if action.commit.parents[1] ~= expected then error("destination moved from " .. expected) end
"""


def _action(name: str, script: str) -> bytes:
    body = "".join(f"        {line}\n" for line in script.strip().splitlines())
    return (
        f"name: {name}\non:\n  pre-merge:\n    branches: [main]\nhooks:\n  - id: {name}\n    type: lua\n"
        f"    properties:\n      script: |\n{body}"
    ).encode()


def _merge_error(refs: lakefs_sdk.RefsApi, repo: str, source: str, **merge: object) -> tuple[int, str]:
    try:
        refs.merge_into_branch(repo, source, "main", merge=lakefs_sdk.Merge(**merge))
    except ApiException as exc:
        return exc.status, json.loads(exc.body)["message"]
    return 200, ""


def test_lua_lakefs_module_answers_as_lakefs(
    lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client
) -> None:
    main = lakefence_repo.branch("main")
    main.object("data/x").upload(b"hello")
    main.commit("c1")
    feature = lakefence_repo.branch("f").create(main)
    feature.object("_lakefs_actions/probe.yaml").upload(_action("probe", _PROBE))
    feature.object("data/y").upload(b"world", content_type="text/plain", metadata={"k": "v"})
    feature.commit("c2")
    head = main.get_commit().id
    status, message = _merge_error(lakefence_client.sdk_client.refs_api, lakefence_repo.id, "f")
    assert status == 412
    assert message.startswith("update branch main: pre-merge hook aborted, run id '")
    probe = message.split("PROBE|", 1)[1].split("|END", 1)[0].split("|")
    assert probe[:6] == [
        "DIFF 200",
        "added:_lakefs_actions/probe.yaml:" + str(len(_action("probe", _PROBE))),
        "added:data/y:5",
        "LIST 200 2",
        "data/x:nil",
        "data/y:v",
    ]
    assert probe[6].startswith("STAT 200 string ")
    stat_json = json.loads(probe[6].split(" ", 3)[3])
    assert stat_json["path"] == "data/y" and stat_json["metadata"] == {"k": "v"} and stat_json["size_bytes"] == 5
    assert probe[7] == "GET 200 world"
    assert probe[8].startswith("MISSING 404 ")
    assert json.loads(probe[8].split(" ", 2)[2]) == {"message": "not found"}
    assert probe[9] == "NODIFF 404 get commit by branch nosuch: not found"
    # The hook refused the merge: the destination did not move.
    assert main.get_commit().id == head


@pytest.mark.parametrize("stale", [False, True])
def test_lua_fence_hook_is_a_compare_and_swap(
    lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client, stale: bool
) -> None:
    main = lakefence_repo.branch("main")
    main.object("_lakefs_actions/fence.yaml").upload(_action("fence", _FENCE))
    main.commit("install fence")
    expected = main.get_commit().id
    staging = lakefence_repo.branch("staging").create(main)
    staging.object("out/part-0").upload(b"rows")
    staging.commit("stage")
    if stale:
        main.object("other").upload(b"foreign")
        main.commit("a foreign commit")
    before = main.get_commit().id
    status, message = _merge_error(
        lakefence_client.sdk_client.refs_api, lakefence_repo.id, "staging", metadata={"expected_head": expected}
    )
    if stale:
        assert status == 412
        assert f"destination moved from {expected}" in message
        assert main.get_commit().id == before
    else:
        assert status == 200
        assert main.get_commit().parents[0] == expected
