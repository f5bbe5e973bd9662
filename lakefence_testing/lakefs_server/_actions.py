"""lakeFS actions in the local server: pre-merge Lua hooks, run by a real Lua interpreter (``lupa``).

As lakeFS does (``pkg/actions``, ``pkg/catalog/actions_source.go``):

* actions are the files directly under ``_lakefs_actions/`` in the tree of the merge's **source**
  commit, each a YAML action ``{name, on: {pre-merge: {branches: [globs]}}, hooks: [...]}``;
* a matching action's hooks run after the merge commit is computed and before the branch moves,
  inside the same (retried) update; a hook failure aborts the merge with 412 and a message naming
  the run id, the action, the hook and the error text;
* a Lua hook (``type: lua``, ``properties.script`` or ``script_path``) gets the global ``action``
  (``applyRecord``: event fields and ``commit = {message, meta_range_id, creation_date, version,
  metadata, parents}``, ``parents[1]`` being the destination HEAD) and ``args``.

The interpreter offers what lakeFS's go-lua offers (no ``io``/``os``, no Lua patterns: no
``string.gsub``/``gmatch``/``match``, ``string.find`` plain only), so a hook that runs here runs
there. Only pre-merge Lua hooks run; an action with another hook type fails the merge with a clear message
rather than being skipped silently. The ``lakefs`` Lua module (``require("lakefs")``) has the read
functions lakeFS's has, answering as lakeFS's do (checked against lakeFS v1.86.0): ``diff_refs``
(three-dot) and ``list_objects`` return ``(status, table)``; ``stat_object`` returns ``(status,
JSON text)``; ``get_object`` ``(status, content)``. They read inside the merge's transaction, so
they see the merge commit (``action.commit_id``) before the branch moves, as in lakeFS.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakefence_testing.lakefs_server import _errors as errors
from lakefence_testing.lakefs_server._render import diff_list, object_stats_list

if TYPE_CHECKING:
    from lakefence_testing.lakefs_server._model import Commit
    from lakefence_testing.lakefs_server._tx import Tx

ACTIONS_PREFIX = "_lakefs_actions/"
DEFAULT_AMOUNT = 100
PRE_MERGE = "pre-merge"


def _load_yaml(data: bytes) -> Any:
    import yaml

    # YAML 1.2 booleans, as lakeFS's parser: ``on`` stays a string.
    loader: Any = type("_Yaml12Loader", (yaml.SafeLoader,), {})
    loader.yaml_implicit_resolvers = {
        key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
        for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    return yaml.load(data, Loader=loader)


def _action_files(tx: Tx, meta_range_id: str) -> list[tuple[str, str]]:
    """``(path, entry id)`` of the files directly under ``_lakefs_actions/``."""
    found = []
    for path, (_identity, entry_id) in tx.tree_iter(meta_range_id, ACTIONS_PREFIX):
        if not path.startswith(ACTIONS_PREFIX):
            break
        if "/" not in path[len(ACTIONS_PREFIX) :]:
            found.append((path, entry_id))
    return found


def _read(tx: Tx, entry_id: str) -> bytes:
    entry = tx.entry(entry_id)
    return tx.store.blob_path(entry.blob).read_bytes()


def _matches(action: Mapping[str, Any], branch: str) -> bool:
    on = action.get("on")
    if not isinstance(on, Mapping) or PRE_MERGE not in on:
        return False
    spec = on[PRE_MERGE] or {}
    branches = spec.get("branches") if isinstance(spec, Mapping) else None
    return not branches or any(fnmatch.fnmatchcase(branch, str(glob)) for glob in branches)


def _action_table(
    lua: Any, *, action_name: str, hook_id: str, run_id: str, repo: str, branch: str, source_ref: str, commit: Commit
) -> Any:
    created = datetime.fromtimestamp(commit.creation_ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return lua.table_from(
        {
            "action_name": action_name,
            "hook_id": hook_id,
            "run_id": run_id,
            "pre_run_id": "",
            "event_type": PRE_MERGE,
            "commit_id": commit.id,
            "branch_id": branch,
            "source_ref": source_ref,
            "tag_id": "",
            "merge_source": source_ref,
            "repository_id": repo,
            "storage_namespace": "",
            "commit": lua.table_from(
                {
                    "message": commit.message,
                    "meta_range_id": commit.meta_range_id,
                    "creation_date": created,
                    "version": commit.version,
                    "metadata": lua.table_from(dict(commit.metadata)),
                    "parents": lua.table_from(list(commit.parents)),
                }
            ),
        }
    )


def _to_lua(lua: Any, value: Any) -> Any:
    if isinstance(value, Mapping):
        return lua.table_from({k: _to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([_to_lua(lua, v) for v in value])
    return value


def _lakefs_module(lua: Any, tx: Tx) -> Any:
    """The ``lakefs`` Lua module: lakeFS's read functions, served from the hook's transaction."""
    store: Any = tx.store

    def answer(call: Any, as_text: bool = False) -> tuple[int, Any]:
        try:
            status, body = 200, call()
        except errors.ApiError as exc:
            status, body = exc.status, exc.body
        if isinstance(body, bytes | str):
            return status, body
        # lakeFS's stat_object hands the hook the JSON text of the API answer.
        return status, json.dumps(body, separators=(",", ":"), sort_keys=True) + "\n" if as_text else _to_lua(lua, body)

    def diff_refs(repo: str, left: str, right: str, after: Any = None, prefix: Any = None,
                  delimiter: Any = None, amount: Any = None) -> tuple[int, Any]:
        return answer(lambda: diff_list(store.diff_refs(
            repo, str(left), str(right), diff_type="three_dot", prefix=prefix or "", after=after or "",
            delimiter=delimiter or "", limit=int(amount or DEFAULT_AMOUNT), tx=tx,
        )))

    def list_objects(repo: str, ref: str, after: Any = None, prefix: Any = None,
                     delimiter: Any = None, amount: Any = None) -> tuple[int, Any]:
        return answer(lambda: object_stats_list(store.list_objects(
            repo, str(ref), prefix=prefix or "", after=after or "", delimiter=delimiter or "",
            limit=int(amount or DEFAULT_AMOUNT), tx=tx,
        )))

    def stat_object(repo: str, ref: str, path: str) -> tuple[int, Any]:
        return answer(lambda: store.stat_object(repo, str(ref), str(path), tx=tx).stats(str(path)), as_text=True)

    def get_object(repo: str, ref: str, path: str) -> tuple[int, Any]:
        def read() -> str:
            entry = store.stat_object(repo, str(ref), str(path), tx=tx)
            return str(store.blob_path(entry.blob).read_bytes().decode("utf-8", "replace"))

        return answer(read, as_text=True)

    return lua.table_from(
        {"diff_refs": diff_refs, "list_objects": list_objects, "stat_object": stat_object, "get_object": get_object}
    )


# lakeFS runs hooks in go-lua (Lua 5.2) with a "safe" library set: no io, no os, and a string
# library without pattern matching (no gsub, gmatch, match, dump; find only for plain text). A hook
# that works here must work there, so the local interpreter (Lua 5.4) offers no more than that.
_GO_LUA_PRELUDE = """
io, os = nil, nil
string.gsub, string.gmatch, string.match, string.dump = nil, nil, nil, nil
local find = string.find
string.find = function(s, pattern, ...)
  local init, plain = ...
  local special = false
  for i = 1, #pattern do
    if find("^$*+?.([%-", pattern:sub(i, i), 1, true) then special = true end
  end
  if select("#", ...) >= 2 and not plain and special then
    error("pattern matching is not implemented in lakeFS's Lua (go-lua): use string.find(s, text, init, true)")
  end
  return find(s, pattern, init or 1, true)
end
"""


def _run_lua(script: str, table: Any, args: Mapping[str, Any], lua: Any) -> str | None:
    """Run ``script``; return the error text, ``None`` when it succeeded."""
    lua.globals().action = table
    lua.globals().args = _to_lua(lua, dict(args))
    runner = lua.eval(
        "function(code) local chunk, err = load(code, 'lua'); if not chunk then return false, err end;"
        " local ok, e = pcall(chunk); return ok, e end"
    )
    ok, err = runner(script)
    return None if ok else str(err)


def run_pre_merge_hooks(tx: Tx, *, repo: str, branch: str, source_ref: str, source: Commit, merge: Commit) -> None:
    """Run the pre-merge hooks of ``source``'s tree on the computed merge commit, as lakeFS does.

    :param tx: the merge's write transaction (raising rolls it back: the branch does not move).
    :param repo: the repository.
    :param branch: the destination branch.
    :param source_ref: the source ref as the client named it.
    :param source: the source commit (actions are read from its tree).
    :param merge: the merge commit computed for the destination's current HEAD.
    :raises ApiError: 412 when a hook fails (or an action cannot run here), with lakeFS's message shape.
    """
    files = _action_files(tx, source.meta_range_id)
    if not files:
        return
    run_id = errors.run_id()
    failures: list[str] = []
    try:
        import lupa
    except ModuleNotFoundError as exc:
        raise errors.ApiError(
            412,
            f"update branch {branch}: actions need lupa (pip install 'airflow-provider-lakefence[testing]')",
        ) from exc

    for index, (path, entry_id) in enumerate(files):
        try:
            action = _load_yaml(_read(tx, entry_id))
        except Exception as exc:
            raise errors.ApiError(412, f"update branch {branch}: loading action {path}: {exc}") from exc
        if not isinstance(action, Mapping) or not _matches(action, branch):
            continue
        name = str(action.get("name", ""))
        for hook_index, hook in enumerate(action.get("hooks") or []):
            hook_id = str(hook.get("id", ""))
            hook_run = f"{index:04d}_{hook_index:04d}"
            props = hook.get("properties") or {}
            if hook.get("type") != "lua":
                failures.append(
                    f"hook run id '{hook_run}' failed on action '{name}' hook '{hook_id}': the local lakeFS test "
                    f"server runs only lua hooks, not {hook.get('type')!r}"
                )
                continue
            script = props.get("script")
            if not script and props.get("script_path"):
                entry = tx.tree_get(source.meta_range_id, str(props["script_path"]))
                script = None if entry is None else _read(tx, entry[1]).decode()
            if not script:
                failures.append(f"hook run id '{hook_run}' failed on action '{name}' hook '{hook_id}': no script")
                continue
            lua = lupa.LuaRuntime(unpack_returned_tuples=True, register_eval=False)
            lua.execute(_GO_LUA_PRELUDE)
            lua.globals().package.loaded.lakefs = _lakefs_module(lua, tx)
            table = _action_table(
                lua,
                action_name=name,
                hook_id=hook_id,
                run_id=run_id,
                repo=repo,
                branch=branch,
                source_ref=source_ref,
                commit=merge,
            )
            error = _run_lua(str(script), table, props.get("args") or {}, lua)
            if error is not None:
                failures.append(
                    f"hook run id '{hook_run}' failed on action '{name}' hook '{hook_id}': action failed: "
                    f"runtime error: {error}"
                )
    if failures:
        listed = "".join(f"\t* {failure}\n" for failure in failures)
        raise errors.ApiError(
            412,
            f"update branch {branch}: pre-merge hook aborted, run id '{run_id}': {len(failures)} "
            f"error{'s' if len(failures) > 1 else ''} occurred:\n{listed}\n",
        )
