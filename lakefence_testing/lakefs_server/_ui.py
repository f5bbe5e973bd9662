"""Read-only HTML pages at the paths of the lakeFS web UI, so that links into lakeFS lead somewhere.

The provider's extra links ("lakeFS commit", "lakeFS staging") and its task log point at the lakeFS
UI: ``/repositories/<repo>/commits/<id>`` and ``/repositories/<repo>/objects?ref=<branch>``. Real
lakeFS serves its own UI there; the local server answers the same paths with small pages built
from its store: a commit (its parents, its metadata with the lakefence record laid out, the paths
it changed), a ref's objects and recent history, one object's stats, a ref's log.

The pages are plain HTML without scripts, every value escaped; they read through the store without
counting its internal statistics (a page view is not an API call), need no login (the server is a
local test server) and never serve object contents.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from werkzeug.exceptions import NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from airflow_lakefence.core.records.metadata import METADATA_PREFIX
from lakefence_testing.lakefs_server import _errors as errors
from lakefence_testing.lakefs_server._store import Commit, Entry, Store

#: How many commits a ref's page shows, and how many changed paths or objects one page lists.
RECENT_COMMITS = 20
LOG_COMMITS = 100
MAX_LISTED = 1000

_RULES = Map(
    [
        Rule("/", endpoint="home"),
        Rule("/repositories", endpoint="repositories"),
        Rule("/repositories/<repository>", endpoint="repository"),
        Rule("/repositories/<repository>/objects", endpoint="objects"),
        Rule("/repositories/<repository>/object", endpoint="object"),
        Rule("/repositories/<repository>/commits", endpoint="log"),
        Rule("/repositories/<repository>/commits/<commit_id>", endpoint="commit"),
    ],
    strict_slashes=False,
)

# The lakefence record's keys (airflow_lakefence.core.records.metadata) as a reader names them, in reading order.
_RECORD_LABELS = {
    "role": "Role",
    "dag_id": "DAG",
    "run_id": "Run",
    "task_id": "Task",
    "map_index": "Map index",
    "try_number": "Try",
    "ti_id": "Task instance id",
    "input_ref": "Input commit",
    "staged_commit": "Staged commit",
    # Written by the hard fence's merge (airflow_lakefence.core.fences.hard), checked by its pre-merge hook.
    "expected_head": "Target HEAD the merge expected",
    "version": "Record format",
}
_ROLES = {
    "publish": "publish: the merge of an attempt's staged commit into the target branch",
    "stage": "stage: the commit of an attempt's output on its staging branch",
}
_COMMIT_KEYS = frozenset({"input_ref", "staged_commit", "expected_head"})
_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;max-width:70em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:.25em .6em;"
    "text-align:left;vertical-align:top}th{background:#f3f3f3}code{font-size:.95em}"
    ".note{color:#666}.added{color:#1a7f37}.removed{color:#cf222e}.changed{color:#9a6700}"
)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _href(url_path: str, /, **query: str) -> str:
    """An escaped URL for an ``href`` attribute: the path's segments quoted, then the query."""
    url = urllib.parse.quote(url_path)
    if query:
        url += "?" + urllib.parse.urlencode(query)
    return _e(url)


def _repo_path(repository: str, *rest: str) -> str:
    return "/".join(["/repositories", repository, *rest])


def _commit_link(repository: str, commit_id: str) -> str:
    return f'<a href="{_href(_repo_path(repository, "commits", commit_id))}"><code>{_e(commit_id)}</code></a>'


def _date(creation_ns: int) -> str:
    return datetime.fromtimestamp(creation_ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(rows: Iterable[tuple[str, str]], header: tuple[str, str] | None = None) -> str:
    """A two-column table; the cells are HTML already escaped by the caller."""
    head = f"<tr><th>{header[0]}</th><th>{header[1]}</th></tr>" if header else ""
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table>{head}{body}</table>"


def _page(title: str, body: str, status: int = 200) -> Response:
    document = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
        '<p class="note"><a href="/repositories">repositories</a> · local lakeFS-compatible test server,'
        " read-only pages</p>"
        f"{body}</body></html>\n"
    )
    response = Response(document, status=status, content_type="text/html; charset=utf-8")
    # Pages without scripts: forbid them outright, and any sniffing of the type.
    response.headers["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-store"
    return response


def lakefence_record(repository: str, metadata: dict[str, str]) -> list[tuple[str, str]]:
    """The rows (label, escaped HTML) of the ``lakefence.*`` metadata of a commit, in reading order.

    :param repository: the repository (commit ids are linked within it).
    :param metadata: the commit's metadata.
    """
    values = {k[len(METADATA_PREFIX) :]: v for k, v in metadata.items() if k.startswith(METADATA_PREFIX)}
    rows = []
    for name in [*_RECORD_LABELS, *sorted(set(values) - set(_RECORD_LABELS))]:
        if name not in values:
            continue
        value = values[name]
        if name in _COMMIT_KEYS:
            shown = _commit_link(repository, value)
        elif name == "role":
            shown = _e(_ROLES.get(value, value))
        else:
            shown = f"<code>{_e(value)}</code>"
        label = f"{_e(_RECORD_LABELS.get(name, name))} <span class=note>({_e(METADATA_PREFIX + name)})</span>"
        rows.append((label, shown))
    return rows


class UIPages:
    """The read-only pages at the lakeFS UI's paths.

    :param store: the server's store.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def serves(self, path: str) -> bool:
        """Whether ``path`` is one of the UI's paths (anything outside the API and the controls).

        :param path: the request path.
        """
        return not path.startswith(("/api/", "/_lakefence/"))

    def __call__(self, request: Request) -> Response:
        """Answer a GET of a UI path: the page, or an HTML page saying what was not found.

        :param request: the request.
        """
        adapter = _RULES.bind("localhost")
        try:
            endpoint, args = adapter.match(request.path, method="GET")
        except NotFound:
            return _page("Not found", f"<h1>Not found</h1><p>No page at <code>{_e(request.path)}</code>.</p>", 404)
        if request.method not in ("GET", "HEAD"):
            return _page("Read-only", "<h1>Read-only pages</h1><p>These pages only answer GET.</p>", 405)
        query = {k: v for k, v in request.args.items() if k in ("ref", "path")}
        try:
            with self.store.uncounted():
                page: Response = getattr(self, f"_{endpoint}")(**args, **query)
                return page
        except errors.ApiError as exc:
            return _page(
                "Not found" if exc.status == 404 else "Error",
                f"<h1>{_e(exc.status)}</h1><p>{_e(exc.message)}</p>",
                exc.status if exc.status >= 400 else 500,
            )

    # --- pages --------------------------------------------------------------------------

    def _home(self, ref: str = "", path: str = "") -> Response:
        return self._repositories()

    def _repositories(self, ref: str = "", path: str = "") -> Response:
        repos, has_more = self.store.list_repositories("", "", MAX_LISTED)
        items = "".join(
            f'<li><a href="{_href(_repo_path(r.id, "objects"), ref=r.default_branch)}">{_e(r.id)}</a>'
            f" (default branch <code>{_e(r.default_branch)}</code>)</li>"
            for r in repos
        )
        more = "<p class=note>(more not shown)</p>" if has_more else ""
        return _page("Repositories", f"<h1>Repositories</h1><ul>{items or '<li>none</li>'}</ul>{more}")

    def _repository(self, repository: str, ref: str = "", path: str = "") -> Response:
        return self._objects(repository, ref, path)

    def _resolve(self, repository: str, ref: str) -> tuple[str, str, str]:
        """Return ``(ref, kind, commit id)`` of ``ref`` (the default branch when empty)."""
        if not ref:
            ref = self.store.get_repository(repository).default_branch
        try:
            return ref, "branch", self.store.get_branch(repository, ref)
        except errors.ApiError as exc:
            if exc.status != 404:
                raise
        return ref, "ref", self.store.get_commit(repository, ref).id

    def _history(self, repository: str, ref: str, limit: int) -> tuple[str, bool]:
        commits, has_more = self.store.log(repository, ref, limit=limit)
        rows = "".join(
            f"<tr><td>{_commit_link(repository, c.id)}</td><td>{_e(c.message)}</td>"
            f"<td>{_e(self._record_summary(c))}</td><td>{_e(_date(c.creation_ns))}</td></tr>"
            for c in commits
        )
        table = f"<table><tr><th>commit</th><th>message</th><th>lakefence</th><th>date</th></tr>{rows}</table>"
        return table, has_more

    @staticmethod
    def _record_summary(commit: Commit) -> str:
        meta = commit.metadata
        role = meta.get(METADATA_PREFIX + "role")
        if role is None:
            return ""
        return (
            f"{role}: {meta.get(METADATA_PREFIX + 'dag_id', '?')} / {meta.get(METADATA_PREFIX + 'task_id', '?')},"
            f" try {meta.get(METADATA_PREFIX + 'try_number', '?')}"
        )

    def _objects(self, repository: str, ref: str = "", path: str = "") -> Response:
        ref, kind, head = self._resolve(repository, ref)
        page = self.store.list_objects(repository, ref, prefix=path, after="", delimiter="/", limit=MAX_LISTED)
        items = []
        for item_path, entry in page.items:
            if entry is None:
                target = _href(_repo_path(repository, "objects"), ref=ref, path=item_path)
                items.append(f'<li><a href="{target}">{_e(item_path)}</a></li>')
            else:
                target = _href(_repo_path(repository, "object"), ref=ref, path=item_path)
                items.append(f'<li><a href="{target}">{_e(item_path)}</a> ({_e(entry.size)} bytes)</li>')
        more = "<li class=note>(more not shown)</li>" if page.has_more else ""
        history, has_more = self._history(repository, ref, RECENT_COMMITS)
        full = _href(_repo_path(repository, "commits"), ref=ref)
        body = (
            f"<h1>{_e(repository)} · {_e(kind)} <code>{_e(ref)}</code></h1>"
            + _table([("HEAD" if kind == "branch" else "commit", _commit_link(repository, head))])
            + f"<h2>Objects under <code>{_e(path or '/')}</code></h2>"
            + f"<ul>{''.join(items) or '<li>none</li>'}{more}</ul>"
            + f"<h2>Recent history</h2>{history}"
            + (f'<p><a href="{full}">full history</a></p>' if has_more else "")
        )
        return _page(f"{repository} {ref}", body)

    def _object(self, repository: str, ref: str = "", path: str = "") -> Response:
        ref, _, _ = self._resolve(repository, ref)
        entry: Entry = self.store.stat_object(repository, ref, path)
        folder = path.rpartition("/")[0]
        up = _href(_repo_path(repository, "objects"), ref=ref, path=folder + "/" if folder else "")
        rows = [
            ("path", f"<code>{_e(path)}</code>"),
            ("ref", f'<a href="{up}"><code>{_e(ref)}</code></a>'),
            ("size", f"{_e(entry.size)} bytes"),
            ("checksum", f"<code>{_e(entry.checksum)}</code>"),
            ("content type", _e(entry.content_type)),
            ("modified", _e(_date(entry.mtime * 1_000_000_000))),
            *((f"metadata <code>{_e(k)}</code>", _e(v)) for k, v in sorted(entry.metadata.items())),
        ]
        return _page(f"{repository} {path}", f"<h1>Object <code>{_e(path)}</code></h1>{_table(rows)}")

    def _log(self, repository: str, ref: str = "", path: str = "") -> Response:
        ref, kind, _ = self._resolve(repository, ref)
        history, has_more = self._history(repository, ref, LOG_COMMITS)
        more = f"<p class=note>(only the latest {LOG_COMMITS} shown)</p>" if has_more else ""
        title = f"<h1>History of {_e(kind)} <code>{_e(ref)}</code></h1>"
        return _page(f"{repository} {ref} history", f"{title}{history}{more}")

    def _commit(self, repository: str, commit_id: str, ref: str = "", path: str = "") -> Response:
        commit = self.store.get_commit(repository, commit_id)
        ordinals = ("first", "second")
        parents = "<br>".join(
            f"{ordinals[n] if n < len(ordinals) else n + 1}: {_commit_link(repository, p)}"
            for n, p in enumerate(commit.parents)
        ) or "none (the repository's first commit)"
        rows = [
            ("id", f"<code>{_e(commit.id)}</code>"),
            ("message", _e(commit.message)),
            ("committer", _e(commit.committer)),
            ("date", _e(_date(commit.creation_ns))),
            ("parents", parents),
        ]
        record = lakefence_record(repository, commit.metadata)
        other = [
            (f"<code>{_e(k)}</code>", _e(v))
            for k, v in sorted(commit.metadata.items())
            if not k.startswith(METADATA_PREFIX)
        ]
        body = f"<h1>Commit <code>{_e(commit.id)}</code></h1>{_table(rows)}"
        if record:
            body += f'<h2 id="lakefence-record">lakefence record</h2>{_table(record)}'
        if other:
            body += f"<h2>Other metadata</h2>{_table(other)}"
        body += self._changes(repository, commit)
        return _page(f"Commit {commit.id}", body)

    def _changes(self, repository: str, commit: Commit) -> str:
        """The paths the commit changed against its first parent (all its objects for a first commit)."""
        items: list[tuple[str, str, Entry]] = []
        if commit.parents:
            page = self.store.diff_refs(
                repository, commit.parents[0], commit.id, diff_type="two_dot", prefix="", after="", delimiter="",
                limit=MAX_LISTED,
            )  # fmt: skip
            items = [(path, kind, entry) for path, (kind, entry) in page.items]
            against = f"against its first parent {_commit_link(repository, commit.parents[0])}"
        else:
            page = self.store.list_objects(repository, commit.id, prefix="", after="", delimiter="", limit=MAX_LISTED)
            items = [(path, "added", entry) for path, entry in page.items]
            against = "(the repository's first commit: every object)"
        rows = []
        for path, kind, entry in items:
            at = commit.parents[0] if kind == "removed" else commit.id
            link = f'<a href="{_href(_repo_path(repository, "object"), ref=at, path=path)}">{_e(path)}</a>'
            size = "" if kind == "removed" else f"{_e(entry.size)} bytes"
            rows.append(f'<tr><td class="{_e(kind)}">{_e(kind)}</td><td>{link}</td><td>{size}</td></tr>')
        more = f"<p class=note>(only the first {MAX_LISTED} shown)</p>" if page.has_more else ""
        table = "<table><tr><th>change</th><th>path</th><th>size</th></tr>" + "".join(rows) + "</table>"
        return (
            f'<h2 id="changes">Changed paths</h2><p class=note>{against}</p>'
            + (table if rows else "<p>none</p>")
            + more
        )
