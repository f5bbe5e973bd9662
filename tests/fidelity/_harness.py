"""Differential fidelity harness: the same seeded random API operations against two lakeFS servers.

Each seed gets a fresh repository on both servers and a sequence of operations drawn from
``random.Random(seed)``. Every operation is sent to both over raw HTTP (the generated SDK
validates requests itself and would hide the servers' own validation), and the answers are
compared after normalisation: status, reason phrase and body, with commit ids replaced by
symbols in the order they were first seen (``C0``, ``C1``, ...) and meta-range ids likewise
(``M0``, ...), times and physical addresses dropped. The first differing answer ends the seed
(the two states may differ from then on) and is reported with the operations that led to it.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import requests

from tests.fidelity._backends import Endpoint

HEX64 = re.compile(r"[0-9a-f]{64}")
HEX12 = re.compile(r"\b[0-9a-f]{12}\b")
RUN_ID = re.compile(r"run id '[0-9a-z]{20}'")
_DROP_KEYS = {"creation_date", "mtime", "physical_address", "storage_namespace", "last_modified"}

# No hex-looking names: lakeFS resolves those as commit-id prefixes too, and ids differ.
BRANCHES = ["main", "br1", "br2", "feat-x", "b_3"]
TAGS = ["t1", "t2", "v1.0"]
PATHS = ["a", "b", "d/x", "d/y", "d/e/z", "f.txt", "g/h/i"]
PREFIXES = ["", "d/", "d", "g/", "d/e/", "zz"]
CONTENTS = [b"", b"one", b"two", b"three" * 10]
INVALID_BRANCHES = ["bad name", "-lead", "a/b", "ünï", ""]
INVALID_TAGS = ["bad..tag", "t@{x", "sp ace", "x.lock"]


@dataclass
class Op:
    """One HTTP request, described by what the generator chose (symbolic, server independent)."""

    kind: str
    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    data: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """Return a one-line, reproducible description."""
        parts = [self.kind, self.method, self.path]
        if self.params:
            parts.append(f"params={self.params}")
        if self.body is not None:
            parts.append(f"json={json.dumps(self.body, sort_keys=True)}")
        if self.data is not None:
            parts.append(f"data={self.data[:20]!r}")
        if self.headers:
            parts.append(f"headers={self.headers}")
        return " ".join(parts)


class Symbols:
    """Maps one server's commit and meta-range ids to server-independent symbols."""

    def __init__(self) -> None:
        self.commits: dict[str, str] = {}
        self.by_symbol: dict[str, str] = {}
        self.ranges: dict[str, str] = {}
        self.short: dict[str, str] = {}

    def commit(self, commit_id: str) -> str:
        if commit_id not in self.commits:
            symbol = f"C{len(self.commits)}"
            self.commits[commit_id] = symbol
            self.by_symbol[symbol] = commit_id
            self.short[commit_id[:12]] = f"{symbol}:12"
        return self.commits[commit_id]

    def meta_range(self, range_id: str) -> str:
        if not range_id:
            return ""
        if range_id not in self.ranges:
            self.ranges[range_id] = f"M{len(self.ranges)}"
        return self.ranges[range_id]

    def concrete(self, text: str) -> str:
        """Replace ``{C3}`` placeholders by this server's ids (unknown symbols stay invalid)."""
        def one(m: re.Match[str]) -> str:
            found = self.by_symbol.get(m.group(1), "0" * 64)
            return found[: int(m.group(2))] if m.group(2) else found

        text = re.sub(r"\{(C\d+)(?::(\d+))?\}", one, text)
        by_range = {symbol: range_id for range_id, symbol in self.ranges.items()}
        return re.sub(r"\{(M\d+)\}", lambda m: by_range.get(m.group(1), "f" * 64), text)

    def normalise(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self.normalise(v, k) for k, v in sorted(value.items()) if k not in _DROP_KEYS}
        if isinstance(value, list):
            return [self.normalise(v, key) for v in value]
        if isinstance(value, str):
            if key == "meta_range_id":
                # lakeFS may write equal trees under different ids (its ranges are re-chunked
                # by a merge): ids are no evidence of content, listings are compared instead.
                return "M" if value else ""
            value = RUN_ID.sub("run id 'R'", value)
            value = HEX64.sub(lambda m: self.commit(m.group(0)), value)
            # Names made of a commit id's first 12 characters (branch "{C1:12}").
            return HEX12.sub(lambda m: self.short.get(m.group(0), m.group(0)), value)
        return value


def _unalias_cherry_pick(commit: dict[str, Any]) -> None:
    # lakeFS v1.86 adds the cherry-pick-* keys to the picked commit's metadata map, which its
    # commit cache shares: until evicted the picked commit reads back with them, naming itself
    # as origin, and its id no longer resolves (the id recomputed from the altered record
    # differs). The local server leaves the picked commit as it was (docs/lakefs-server.md).
    metadata = commit.get("metadata")
    if isinstance(metadata, dict) and metadata.get("cherry-pick-origin") == commit.get("id"):
        metadata.pop("cherry-pick-origin")
        metadata.pop("cherry-pick-committer", None)


class Server:
    """One server under test: an HTTP session and its symbol table."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.session = requests.Session()
        self.session.auth = (endpoint.access_key_id, endpoint.secret_access_key)
        self.symbols = Symbols()

    def _tree_of(self, match: re.Match[str]) -> str:
        commit_id = self.symbols.by_symbol.get(match.group(1), "0" * 64)
        response = self.session.get(f"{self.endpoint.url}/api/v1{match.group(2)}/commits/{commit_id}", timeout=60)
        return str(response.json().get("meta_range_id", "")) if response.ok else "f" * 64

    def send(self, op: Op) -> requests.Response:
        def concrete(text: str) -> str:
            # {MR:C3@/repositories/r}: the tree id of commit C3 on this server.
            return self.symbols.concrete(re.sub(r"\{MR:(C\d+)@([^}]*)\}", self._tree_of, text))

        params = {
            k: ([concrete(x) for x in v] if isinstance(v, list) else concrete(str(v))) for k, v in op.params.items()
        }
        body = None if op.body is None else json.loads(concrete(json.dumps(op.body)))
        kwargs: dict[str, Any] = {"params": params, "headers": dict(op.headers), "timeout": 60}
        if body is not None:
            kwargs["json"] = body
        if op.data is not None:
            kwargs["data"] = op.data
        return self.session.request(op.method, f"{self.endpoint.url}/api/v1{concrete(op.path)}", **kwargs)

    def answer(self, op: Op) -> dict[str, Any]:
        """Send ``op`` and return its normalised answer."""
        response = self.send(op)
        if op.kind == "revert" and response.status_code == 204:
            # A revert answers no commit id: name the new commit now, in creation order (logs
            # order commits of one second by that order).
            head = self.session.get(f"{self.endpoint.url}/api/v1{self.symbols.concrete(op.path[: -len('/revert')])}")
            if head.ok:
                self.symbols.commit(head.json()["commit_id"])
        body: Any
        text = response.content
        content_type = response.headers.get("Content-Type", "")
        if op.kind in ("get_object", "head_object") and response.status_code < 300:
            body = {"bytes": text.decode("latin-1"), "etag": response.headers.get("ETag"),
                    "content_type": content_type.split(";")[0]}
        elif "json" in content_type and text:
            try:
                body = json.loads(text)
            except ValueError:
                body = text.decode("utf-8", "replace")
        else:
            body = text.decode("utf-8", "replace")
        if op.kind == "log" and isinstance(body, dict) and isinstance(body.get("results"), list):
            body["results"] = self._order_ties(body["results"])
            for commit in body["results"]:
                _unalias_cherry_pick(commit)
        if op.kind == "list_tags" and isinstance(body, dict) and isinstance(body.get("results"), list):
            # Tags named like commit-id prefixes sort by this server's ids: when the listing is in
            # this server's id order, compare it in symbol order.
            ids = [t.get("id") for t in body["results"]]
            if ids == sorted(ids):
                body["results"] = sorted(body["results"], key=lambda t: str(self.symbols.normalise(t.get("id"))))
        if op.kind == "get_protection" and isinstance(body, list):
            # lakeFS lists the rules in Go map order: compare them as a set.
            body = sorted(body, key=json.dumps)
        if op.kind == "get_commit" and isinstance(body, dict):
            _unalias_cherry_pick(body)
        return {"status": response.status_code, "reason": response.reason, "body": self.symbols.normalise(body)}

    def _order_ties(self, commits: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Commits created within the same second are ordered by id in lakeFS's log, and ids
        # differ between servers: order each same-second run by creation order instead.
        groups: list[list[dict[str, Any]]] = []
        for c in commits:
            if groups and groups[-1][0].get("creation_date") == c.get("creation_date"):
                groups[-1].append(c)
            else:
                groups.append([c])
        ordered = []
        for group in groups:
            ordered.extend(sorted(group, key=lambda c: -int(self.symbols.commit(c["id"])[1:])))
        return ordered


@dataclass
class Divergence:
    """The first answer on which the two servers differed."""

    seed: int
    step: int
    op: str
    answers: dict[str, Any]
    history: list[str]

    def __str__(self) -> str:
        lines = [f"seed {self.seed}, step {self.step}: {self.op}"]
        for name, answer in self.answers.items():
            lines.append(f"  {name}: {json.dumps(answer, sort_keys=True)[:1500]}")
        lines.append("  after: " + " | ".join(self.history[-8:]))
        return "\n".join(lines)


class Generator:
    """Draws operations from a seeded RNG; needs only what both servers agree on."""

    def __init__(self, rng: random.Random, repo: str) -> None:
        self.rng = rng
        self.repo = repo
        self.commit_count = 1
        self.range_count = 0
        self.branches = ["main"]
        self.tags: list[str] = []
        self.poisoned: set[str] = set()
        self.deleted: set[str] = set()
        self.commits_drawn = 0

    # --- choices ------------------------------------------------------------------------

    def pick(self, seq: list[Any]) -> Any:
        return self.rng.choice(seq)

    def commit_sym(self) -> str:
        choice = self.rng.randrange(self.commit_count)
        # A commit lakeFS v1.86 cherry-picked no longer resolves by id (see _unalias_cherry_pick):
        # use its parent-most stand-in, the first commit, instead.
        return "{C0}" if f"C{choice}" in self.poisoned else f"{{C{choice}}}"

    def ref(self) -> str:
        roll = self.rng.random()
        if roll < 0.45:
            return self.branch()
        if roll < 0.6:
            return self.tag()
        if roll < 0.8:
            return self.commit_sym()
        if roll < 0.85:
            return self.commit_sym()[:-1] + ":12}" if self.maybe(0.3) else self.branch() + "~1"
        if roll < 0.9:
            return self.branch() + self.pick(["@", "$", "^2", "~2", "^1"])
        return self.pick(["nosuch", "main~100", "bad ref"])

    def branch(self) -> str:
        """A branch name, most often one that exists."""
        return self.pick(self.branches) if self.maybe(0.85) else self.pick(BRANCHES)

    def tag(self) -> str:
        return self.pick(self.tags) if self.tags and self.maybe(0.8) else self.pick(TAGS)

    def observe(self, op: Op, status: int, body: Any = None) -> None:
        """Track which branches and tags exist (both servers answered alike)."""
        if op.kind == "cherry_pick" and status == 201 and isinstance(body, dict):
            self.poisoned.add(body["metadata"]["cherry-pick-origin"])
        if op.kind == "create_branch" and status == 201:
            self.branches.append(op.body["name"])
        elif op.kind == "delete_branch" and status == 204:
            self.branches.remove(op.path.rsplit("/", 1)[1])
            self.deleted.add(op.path.rsplit("/", 1)[1])
        elif op.kind == "create_tag" and status == 201:
            self.tags.append(op.body["id"])
        elif op.kind == "delete_tag" and status == 204:
            self.tags.remove(op.path.rsplit("/", 1)[1])

    def path(self) -> str:
        return self.pick(PATHS)

    def maybe(self, p: float = 0.5) -> bool:
        return self.rng.random() < p

    # --- operations ---------------------------------------------------------------------

    def next(self) -> Op:
        r = f"/repositories/{self.repo}"
        kinds = [
            ("upload", 14), ("delete", 6), ("commit", 10), ("create_branch", 6), ("delete_branch", 2),
            ("merge", 9), ("hard_reset", 3), ("revert", 3), ("cherry_pick", 3), ("create_tag", 3),
            ("delete_tag", 1), ("diff_refs", 6), ("diff_branch", 4), ("log", 5), ("list_objects", 6),
            ("stat", 3), ("get_object", 2), ("merge_base", 2), ("get_commit", 2), ("list_branches", 2),
            ("list_tags", 1), ("reset", 2), ("get_branch", 1), ("invalid", 4), ("protection", 1),
        ]
        kind = self.rng.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
        return getattr(self, f"op_{kind}")(r)

    def op_upload(self, r: str) -> Op:
        headers = {"Content-Type": "application/octet-stream"}
        if self.maybe(0.2):
            headers["X-Lakefs-Meta-" + self.pick(["owner", "my_key", "Mixed-Case"])] = self.pick(["v1", "v2"])
        if self.maybe(0.1):
            headers["If-None-Match"] = "*"
        path = self.path()
        # Contents differ between paths (only f.txt may be empty): lakeFS v1.86's merge takes
        # "the base's entry" of a key added on both sides from the next base key, and an equal
        # object there hides the conflict (docs/lakefs-server.md). Not emulated.
        content = self.pick(CONTENTS)
        data = content if path == "f.txt" else path.encode() + b":" + content
        return Op("upload", "POST", f"{r}/branches/{self.branch()}/objects",
                  params={"path": path}, data=data, headers=headers)

    def op_delete(self, r: str) -> Op:
        branch = self.branch()
        if self.maybe(0.5):
            return Op("delete", "DELETE", f"{r}/branches/{branch}/objects", params={"path": self.path()})
        paths = self.rng.sample(PATHS, self.rng.randint(1, len(PATHS)))
        return Op("delete", "POST", f"{r}/branches/{branch}/objects/delete", body={"paths": paths})

    def op_commit(self, r: str) -> Op:
        body: dict[str, Any] = {"message": self.pick(["c", "work", "fix: thing"])}
        if self.maybe(0.3):
            body["metadata"] = {"k": self.pick(["1", "2"])}
        if self.maybe(0.25):
            body["allow_empty"] = True
        if self.maybe(0.15):
            body["date"] = self.pick([1_600_000_000 + self.rng.randrange(1000), 0, -5, 2**62, 2**63, 1.5])
        else:
            # A commit's id hashes its creation second: two commits of the same content (parents,
            # tree, message) get one id within a second and two across a tick, on both servers,
            # so which one a server sees depends on the wall clock. A distinct message keeps the
            # answer a function of the seed; pinned dates still exercise identical commits.
            self.commits_drawn += 1
            body["message"] += f" #{self.commits_drawn}"
        params: dict[str, Any] = {}
        if self.maybe(0.05):
            # The tree of an existing commit: lakeFS does not check the id, and a commit of an
            # unknown tree breaks every later read of the branch.
            params["source_metarange"] = f"{{MR:C{self.rng.randrange(self.commit_count)}@{r}}}"
        branch = self.branch()
        if branch in self.deleted and branch not in self.branches:
            # lakeFS caches the listing of a ref's actions for about 5 s: a commit to a branch
            # deleted within that time passes the prepare-commit hook and fails later, with
            # another message (docs/lakefs-server.md). Not emulated.
            branch = "main"
        return Op("commit", "POST", f"{r}/branches/{branch}/commits", params=params, body=body)

    def op_protection(self, r: str) -> Op:
        # Patterns matching no branch the generator uses: real lakeFS enforces new rules only
        # after its settings cache expires, the local server at once.
        if self.maybe(0.5):
            return Op("get_protection", "GET", f"{r}/settings/branch_protection")
        rules = [{"pattern": p} for p in self.rng.sample(["stable_*", "rel-?", "x[0-9]", ""], self.rng.randint(0, 2))]
        return Op("set_protection", "PUT", f"{r}/settings/branch_protection", body=rules)

    def op_create_branch(self, r: str) -> Op:
        # Names colliding with a tag or with a commit id are 409s. A branch named like an id's prefix
        # is allowed, but is not drawn: listings order by name, and the ids differ between servers.
        names = [*BRANCHES, self.tag(), self.commit_sym(), "deadbeef"]
        name = self.pick(names) if self.maybe(0.9) else self.pick(INVALID_BRANCHES)
        body: dict[str, Any] = {"name": name, "source": self.ref()}
        if self.maybe(0.2):
            body["hidden"] = True
        return Op("create_branch", "POST", f"{r}/branches", body=body)

    def op_delete_branch(self, r: str) -> Op:
        return Op("delete_branch", "DELETE", f"{r}/branches/{self.branch()}")

    def op_merge(self, r: str) -> Op:
        body: dict[str, Any] = {}
        if self.maybe(0.3):
            body["strategy"] = self.pick(["dest-wins", "source-wins", "bogus"])
        if self.maybe(0.15):
            body["squash_merge"] = True
        if self.maybe(0.15):
            body["allow_empty"] = True
        if self.maybe(0.1):
            body["force"] = True
        if self.maybe(0.2):
            body["metadata"] = {"m": "1"}
        source = self.branch() if self.maybe(0.6) else self.ref()
        return Op("merge", "POST", f"{r}/refs/{source}/merge/{self.branch()}", body=body)

    def op_hard_reset(self, r: str) -> Op:
        params: dict[str, Any] = {"ref": self.ref()}
        if self.maybe(0.2):
            params["force"] = "true"
        return Op("hard_reset", "PUT", f"{r}/branches/{self.branch()}/hard_reset", params=params)

    def op_revert(self, r: str) -> Op:
        body = {"ref": self.commit_sym() if self.maybe(0.8) else self.ref(), "parent_number": self.pick([0, 0, 1, 2])}
        if self.maybe(0.2):
            body["allow_empty"] = True
        return Op("revert", "POST", f"{r}/branches/{self.branch()}/revert", body=body)

    def op_cherry_pick(self, r: str) -> Op:
        body: dict[str, Any] = {"ref": self.commit_sym() if self.maybe(0.8) else self.ref()}
        if self.maybe(0.4):
            body["parent_number"] = self.pick([1, 2, 3])
        return Op("cherry_pick", "POST", f"{r}/branches/{self.branch()}/cherry-pick", body=body)

    def op_create_tag(self, r: str) -> Op:
        # Also named like a commit id (409) or like its 12-character prefix (a tag, which then wins
        # over the commit when resolving that name).
        names = [*TAGS, *BRANCHES[:2], self.commit_sym(), self.commit_sym()[:-1] + ":12}"]
        name = self.pick(names) if self.maybe(0.9) else self.pick(INVALID_TAGS)
        return Op("create_tag", "POST", f"{r}/tags", body={"id": name, "ref": self.ref()})

    def op_delete_tag(self, r: str) -> Op:
        return Op("delete_tag", "DELETE", f"{r}/tags/{self.tag()}")

    def _listing(self, params: dict[str, Any]) -> None:
        if self.maybe(0.5):
            params["prefix"] = self.pick(PREFIXES)
        if self.maybe(0.4):
            params["delimiter"] = "/"
        if self.maybe(0.4):
            params["amount"] = self.pick([1, 2, 3, 1000])
        if self.maybe(0.3):
            params["after"] = self.pick([*PATHS, "d/", "d"])

    def op_diff_refs(self, r: str) -> Op:
        params: dict[str, Any] = {}
        if self.maybe(0.7):
            params["type"] = self.pick(["two_dot", "three_dot"])
        self._listing(params)
        return Op("diff_refs", "GET", f"{r}/refs/{self.ref()}/diff/{self.ref()}", params=params)

    def op_diff_branch(self, r: str) -> Op:
        params: dict[str, Any] = {}
        self._listing(params)
        return Op("diff_branch", "GET", f"{r}/branches/{self.branch()}/diff", params=params)

    def op_log(self, r: str) -> Op:
        params: dict[str, Any] = {"amount": 1000}
        if self.maybe(0.2):
            params["objects"] = self.rng.sample(PATHS, self.rng.randint(1, 2))
        if self.maybe(0.2):
            params["prefixes"] = [self.pick(PREFIXES)]
        if self.maybe(0.2):
            params["first_parent"] = "true"
        if self.maybe(0.15):
            params["amount"] = self.pick([1, 2])
            params["limit"] = "true"
        if self.maybe(0.1):
            params["stop_at"] = self.commit_sym()
        if self.maybe(0.15):
            params["since"] = self.pick(["2000-01-01T00:00:00Z", "2020-09-13T12:30:00Z", "2100-01-01T00:00:00Z"])
        return Op("log", "GET", f"{r}/refs/{self.ref()}/commits", params=params)

    def op_list_objects(self, r: str) -> Op:
        params: dict[str, Any] = {}
        self._listing(params)
        if self.maybe(0.1):
            params["user_metadata"] = "false"
        return Op("list_objects", "GET", f"{r}/refs/{self.ref()}/objects/ls", params=params)

    def op_stat(self, r: str) -> Op:
        return Op("stat", "GET", f"{r}/refs/{self.ref()}/objects/stat", params={"path": self.path()})

    def op_get_object(self, r: str) -> Op:
        return Op("get_object", "GET", f"{r}/refs/{self.ref()}/objects", params={"path": self.path()})

    def op_merge_base(self, r: str) -> Op:
        return Op("merge_base", "GET", f"{r}/refs/{self.ref()}/merge/{self.branch()}")

    def op_get_commit(self, r: str) -> Op:
        return Op("get_commit", "GET", f"{r}/commits/{self.ref()}")

    def op_list_branches(self, r: str) -> Op:
        params: dict[str, Any] = {}
        if self.maybe(0.5):
            params["show_hidden"] = self.pick(["true", "false"])
        if self.maybe(0.3):
            params["prefix"] = self.pick(["b", "f", "m"])
        if self.maybe(0.3):
            params["amount"] = self.pick([1, 2])
        if self.maybe(0.2):
            params["after"] = self.branch()
        return Op("list_branches", "GET", f"{r}/branches", params=params)

    def op_list_tags(self, r: str) -> Op:
        return Op("list_tags", "GET", f"{r}/tags")

    def op_reset(self, r: str) -> Op:
        body: dict[str, Any] = {"type": self.pick(["reset", "object", "common_prefix"])}
        if body["type"] != "reset":
            body["path"] = self.pick(PATHS + PREFIXES[1:])
        return Op("reset", "PUT", f"{r}/branches/{self.branch()}", body=body)

    def op_get_branch(self, r: str) -> Op:
        return Op("get_branch", "GET", f"{r}/branches/{self.branch()}")

    def op_invalid(self, r: str) -> Op:
        choice = self.rng.randrange(12)
        if choice == 0:
            amount = self.pick([-1, 0, 1001, 100000])
            return Op("invalid", "GET", f"{r}/refs/main/objects/ls", params={"amount": amount})
        if choice == 1:
            return Op("invalid", "GET", f"{r}/refs/main/diff/b1", params={"type": "bogus"})
        if choice == 2:
            return Op("invalid", "GET", f"{r}/branches", params={"amount": self.pick([-5, 0, 5000])})
        if choice == 3:
            body = {"ref": "main", "parent_number": -1}
            return Op("invalid", "POST", f"{r}/branches/{self.branch()}/revert", body=body)
        if choice == 4:
            return Op("invalid", "POST", f"{r}/branches", body={"name": self.pick(INVALID_BRANCHES), "source": "main"})
        if choice == 5:
            return Op("invalid", "POST", f"{r}/tags", body={"id": self.pick(INVALID_TAGS), "ref": "main"})
        if choice == 6:
            return Op("invalid", "GET", f"{r}/refs/main/commits", params={"amount": self.pick([-1, 0, 1001])})
        if choice == 7:
            return Op("invalid", "POST", "/repositories/no-such-repo/branches/main/commits", body={"message": "x"})
        if choice == 8:
            name = self.pick(INVALID_BRANCHES[:3])
            return Op("invalid", "PUT", f"{r}/branches/{name}/hard_reset", params={"ref": "main"})
        if choice == 10:
            # Boolean query parameters: Go's ParseBool spellings, invalid ones, empty ones (with a
            # default: a plain-text binding error; without: the validator's), unknown ones.
            method, path, name = self.pick([
                ("GET", f"{r}/branches", "show_hidden"), ("GET", f"{r}/refs/main/objects/ls", "user_metadata"),
                ("GET", f"{r}/refs/main/commits", "first_parent"), ("GET", f"{r}/refs/main/commits", "limit"),
                ("GET", f"{r}/branches/main", "force"), ("GET", f"{r}/refs/main/objects/ls", "presign"),
            ])  # fmt: skip
            return Op("invalid", method, path, params={name: self.pick(["yes", "", "T", "FALSE", "0", "1"])})
        if choice == 11:
            # Repository creation bodies lakeFS's validator refuses (none of them creates anything).
            body = self.pick([
                {"name": "ab", "storage_namespace": "local://never"},
                {"name": "never-made", "storage_namespace": "local://never", "sample_data": "yes"},
                {"name": "never-made", "storage_namespace": "foo://never"},
                {"storage_namespace": "local://never", "read_only": None},
                {"name": "never-made", "storage_namespace": "local://never", "default_branch": None},
                {"name": 7, "storage_namespace": "local://never"},
                ["never-made"],
            ])  # fmt: skip
            params = {"bare": self.pick(["yes", "true"])} if self.maybe(0.3) else {}
            return Op("invalid", "POST", "/repositories", params=params, body=body)
        return Op("invalid", "GET", f"{r}/refs/main/objects/stat", params={"path": ""})


def run_seed(
    seed: int, servers: list[Server], steps: int, record: list[tuple[Op, dict[str, Any]]] | None = None
) -> tuple[Divergence | None, int]:
    """Run one seed on fresh repositories; return the first divergence (or None) and the steps run.

    :param seed: RNG seed.
    :param servers: the servers to compare (the first is the reference for symbols).
    :param steps: number of operations.
    :param record: if given, gets each operation the servers answered alike, with that answer.
    """
    rng = random.Random(seed)
    repo = f"fid-{seed}-{uuid.uuid4().hex[:8]}"
    history: list[str] = []
    for server in servers:
        server.symbols = Symbols()
        response = server.session.post(
            f"{server.endpoint.url}/api/v1/repositories",
            json={"name": repo, "storage_namespace": f"local://{repo}", "default_branch": "main"},
            timeout=60,
        )
        response.raise_for_status()
        head = server.session.get(f"{server.endpoint.url}/api/v1/repositories/{repo}/branches/main", timeout=60)
        server.symbols.commit(head.json()["commit_id"])
    generator = Generator(rng, repo)
    try:
        for step in range(steps):
            op = generator.next()
            answers = {s.endpoint.name: s.answer(op) for s in servers}
            first = next(iter(answers.values()))
            if any(a != first for a in answers.values()):
                return Divergence(seed, step, op.describe(), answers, history), step + 1
            history.append(f"{op.describe()} -> {first['status']}")
            if record is not None:
                record.append((op, first))
            generator.observe(op, first["status"], first["body"])
            generator.commit_count = len(servers[0].symbols.commits)
            generator.range_count = len(servers[0].symbols.ranges)
        return None, steps
    finally:
        for server in servers:
            server.session.delete(f"{server.endpoint.url}/api/v1/repositories/{repo}", timeout=60)
