"""The hard fence's action file: its version, metadata keys and the Lua hooks lakeFS runs.

Data for :mod:`airflow_lakefence.core.fences.hard` (which re-exports every name here): the two
versions of the pre-merge hook's Lua source and the YAML action that wraps them. Pure: no Airflow,
no lakeFS imports.
"""

from __future__ import annotations

import re

#: The version of the shipped hook; bumped whenever the rendered action changes.
HARD_FENCE_VERSION = 2
#: The first version that checks scoped merges (prefix-scoped publications).
SCOPED_VERSION = 2
#: Older versions whose exact file still fences branch-wide merges (they refuse scoped ones).
BRANCH_WIDE_VERSIONS = frozenset({1})
#: The action's name in lakeFS (unique per repository) and its hook id.
ACTION_NAME = "lakefence_hard_fence"
HOOK_ID = "lakefence_expected_head"
#: Where the action file lives in the repository's tree (lakeFS reads ``_lakefs_actions/`` only).
ACTION_PATH = "_lakefs_actions/lakefence_hard_fence.yaml"
#: The merge metadata key naming the expected first parent (a commit id); for a scoped merge, the
#: expected *base*: the commit since which nothing may have changed inside the scope.
EXPECTED_HEAD_KEY = "lakefence.expected_head"
#: The merge metadata key marking the merge that installs the fence.
INSTALL_KEY = "lakefence.hard_fence_install"
#: The merge metadata key with which a lakefence publication vouches for its own tree: the action
#: file is exactly the one the version named here shipped (see :func:`vouched_check`).
FENCE_KEY = "lakefence.hard_fence"
#: The merge metadata key holding how many scope prefixes a scoped merge names (``"1"``...).
SCOPE_COUNT_KEY = "lakefence.scope.count"
#: The merge metadata keys of the scope prefixes themselves: ``lakefence.scope.1`` ... (1-based).
#: One key per prefix, the prefix as the plain value: nothing to escape, whatever it contains.
SCOPE_KEY_PREFIX = "lakefence.scope."
#: The most prefixes a scoped merge may name (the hook makes one lakeFS diff call per prefix).
MAX_SCOPE_PREFIXES = 64
#: The text the hook's error starts with; lakeFS relays it in the 412 message.
REJECTION_MARKER = "LAKEFENCE_HARD_FENCE_REJECTED"
#: The command that installs or upgrades the fence (named in messages).
INSTALL_COMMAND = "python -m airflow_lakefence.hardfence install"

VERSION_LINE = "# lakefence-hard-fence-version: "
VERSION_RE = re.compile(r"^# lakefence-hard-fence-version: (\d+)\s*$", re.MULTILINE)
REJECTION_RE = re.compile(
    REJECTION_MARKER + r" v(?P<version>\d+): branch (?P<branch>\S*) moved to (?P<found>\S+), "
    r"expected head (?P<expected>\S+)"
)
# The scoped rejection: prefix and path are percent-encoded by the hook (no spaces, no quotes).
SCOPED_REJECTION_RE = re.compile(
    REJECTION_MARKER + r" v(?P<version>\d+): branch (?P<branch>\S*) scope (?P<prefix>\S+) changed since "
    r"expected base (?P<expected>\S+): path (?P<path>\S+) \((?P<type>[\w_]+)\), merge computed on (?P<found>\S+)"
)
MARKER_VERSION_RE = re.compile(REJECTION_MARKER + r" v(?P<version>\d+)")
RUN_ID_RE = re.compile(r"run id '([^']+)'")

# error(..., 0): level 0 keeps Lua's "chunk:line:" position out of the message the client parses.
LUA_SCRIPT_V1 = f"""\
-- airflow-lakefence hard fence v1: a compare-and-swap for lakefence merges.
-- parents[1] is the destination HEAD lakeFS computed this merge against; lakeFS re-runs the
-- hook whenever it recomputes the merge on a moved destination.
local expected = action.commit.metadata["{EXPECTED_HEAD_KEY}"]
if expected == nil or expected == "" then
  return
end
local first = action.commit.parents[1]
if first ~= expected then
  error("{REJECTION_MARKER} v1: branch " .. tostring(action.branch_id) ..
    " moved to " .. tostring(first) .. ", expected head " .. expected, 0)
end
"""

# Version 2 keeps version 1's rule for branch-wide merges and adds the scoped rule: a merge naming
# scope prefixes passes on a moved destination when no commit since the expected base changed a
# path under any of them. diff_refs is three-dot (lakeFS's default): "what changed on the
# destination since its merge base with the expected base". The prefix and path in the message
# are percent-encoded so that the client can parse them whatever they contain.
LUA_SCRIPT_V2 = f"""\
-- airflow-lakefence hard fence v{HARD_FENCE_VERSION}: a compare-and-swap for lakefence merges,
-- branch-wide or scoped to prefixes. parents[1] is the destination HEAD lakeFS computed this merge
-- against; lakeFS re-runs the hook whenever it recomputes the merge on a moved destination.
local meta = action.commit.metadata
local expected = meta["{EXPECTED_HEAD_KEY}"]
if expected == nil or expected == "" then
  return
end
local first = action.commit.parents[1]
if first == expected then
  return
end
local marker = "{REJECTION_MARKER} v{HARD_FENCE_VERSION}: branch " .. tostring(action.branch_id)
local count = meta["{SCOPE_COUNT_KEY}"]
if count == nil or count == "" then
  error(marker .. " moved to " .. tostring(first) .. ", expected head " .. expected, 0)
end
local n = tonumber(count)
if n == nil or n ~= math.floor(n) or not (n >= 1 and n <= {MAX_SCOPE_PREFIXES}) then
  error(marker .. " scope malformed: {SCOPE_COUNT_KEY} is " .. count, 0)
end
-- lakeFS's Lua (go-lua) has no gsub/match: encode byte by byte, with a plain find.
local safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/="
local function enc(s)
  local out = {{}}
  for i = 1, string.len(s) do
    local c = string.sub(s, i, i)
    if string.find(safe, c, 1, true) then
      out[#out + 1] = c
    else
      out[#out + 1] = string.format("%%%02X", string.byte(c))
    end
  end
  return table.concat(out)
end
local lakefs = require("lakefs")
for i = 1, n do
  local prefix = meta["{SCOPE_KEY_PREFIX}" .. i]
  if prefix == nil or prefix == "" then
    error(marker .. " scope malformed: no {SCOPE_KEY_PREFIX}" .. i, 0)
  end
  local status, diff = lakefs.diff_refs(action.repository_id, expected, first, "", prefix, "", 1)
  if status ~= 200 then
    error(marker .. " scope " .. enc(prefix) .. " not checked: diff from expected base " .. expected ..
      " answered " .. tostring(status), 0)
  end
  local change = diff.results[1]
  if change ~= nil then
    error(marker .. " scope " .. enc(prefix) .. " changed since expected base " .. expected .. ": path " ..
      enc(change.path) .. " (" .. tostring(change.type) .. "), merge computed on " .. tostring(first), 0)
  end
end
"""

LUA_SCRIPTS = {1: LUA_SCRIPT_V1, 2: LUA_SCRIPT_V2}
DESCRIPTIONS = {
    1: "Reject a lakefence merge whose first parent is not the expected head named in its metadata",
    2: "Reject a lakefence merge whose destination moved (branch-wide) or changed inside its scope "
    "(scoped) since the head named in its metadata",
}


def lua_script(version: int = HARD_FENCE_VERSION) -> str:
    """Return the hook's Lua source.

    :param version: the version (the current one by default; older ones for checks and tests).
    :raises KeyError: for a version this package never shipped.
    """
    return LUA_SCRIPTS[version]


def render_action(version: int = HARD_FENCE_VERSION) -> str:
    """Render the action file (YAML) exactly as the installer writes it.

    The text is fixed for a given version, so an installed copy is checked by comparing bytes.

    :param version: the version (the current one by default).
    :raises KeyError: for a version this package never shipped.
    """
    script = "".join(f"        {line}\n" if line else "\n" for line in LUA_SCRIPTS[version].splitlines())
    return (
        f"{VERSION_LINE}{version}\n"
        "# Installed by airflow-lakefence. Do not edit: `python -m airflow_lakefence.hardfence check`\n"
        "# compares this file byte for byte with the version the package ships.\n"
        f"name: {ACTION_NAME}\n"
        f"description: {DESCRIPTIONS[version]}\n"
        "on:\n"
        "  pre-merge:\n"
        "hooks:\n"
        f"  - id: {HOOK_ID}\n"
        "    type: lua\n"
        "    properties:\n"
        "      script: |\n"
        f"{script}"
    )


def render_action_bytes(version: int = HARD_FENCE_VERSION) -> bytes:
    """Return :func:`render_action` encoded as UTF-8 (what is uploaded).

    :param version: the version (the current one by default).
    """
    return render_action(version).encode()
