"""The local server's read-only pages at the lakeFS UI's paths: where the provider's extra links lead.

Over HTTP, through the fault-injecting proxy as every test client: the links the provider builds
(``airflow_lakefence.links.lakefs``) open pages that show the publication (its parents, its lakefence
record, the paths it changed), every link on a page leads to another page, values are escaped,
and a page view is neither an API call nor a store read the counters see.
"""

from __future__ import annotations

import html.parser
import urllib.parse

import lakefs
import pytest
import requests

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, LakefenceRecord, encode_metadata
from airflow_lakefence.links.lakefs import branch_url, commit_url
from lakefence_testing.controls import Controls
from lakefence_testing.pytest_plugin import LakeFSServerInfo

pytestmark = pytest.mark.lakefs_local_only

HOSTILE = "<script>alert(1)</script>&"


class _Links(html.parser.HTMLParser):
    """The page's links and its text (HTML entities decoded)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.text: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.extend(v for k, v in attrs if k == "href" and v)
        self.scripts += tag == "script"

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _get(url: str) -> tuple[requests.Response, _Links]:
    response = requests.get(url, timeout=30)
    parsed = _Links()
    parsed.feed(response.text)
    return response, parsed


@pytest.fixture
def publication(lakefence_repo: lakefs.Repository) -> dict[str, str]:
    """A fenced publication as the protocol writes it: a staged commit merged into ``main`` with records."""
    main = lakefence_repo.branch("main")
    main.object("events/part-0.parquet").upload(b"input")
    input_ref = main.commit("seed events").get_commit().id
    attempt = AttemptId(PublicationKey("daily", "manual__2026-11-25", "daily_counts", -1), 2, "ti-0192")
    staging = lakefence_repo.branch("lakefence-staging-x").create(input_ref)
    staging.object("tables/daily_counts/part-0.parquet").upload(b"counts")
    staging.object(f"tables/{HOSTILE}.txt").upload(b"x")
    staged = staging.commit(
        "stage", metadata=encode_metadata(LakefenceRecord(attempt, ROLE_STAGE, input_ref))
    ).get_commit().id
    metadata = {**encode_metadata(LakefenceRecord(attempt, ROLE_PUBLISH, input_ref, staged)), "pipeline": HOSTILE}
    merged = staging.merge_into(main, message=f"daily counts {HOSTILE}", metadata=metadata)
    return {"input_ref": input_ref, "staged": staged, "merged": merged, "repo": lakefence_repo.id}


def test_the_commit_link_shows_the_publication(lakefence_server: LakeFSServerInfo, publication: dict[str, str]) -> None:
    repo, merged = publication["repo"], publication["merged"]
    response, page = _get(commit_url(lakefence_server.url, repo, merged))
    assert response.status_code == 200 and response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "script-src" not in response.headers["Content-Security-Policy"]  # default-src 'none': no scripts
    text = " ".join(" ".join(page.text).split())
    assert f"Commit {merged}" in text and f"daily counts {HOSTILE}" in text
    # The lakefence record, laid out: who published (the publication key and the try), from what.
    assert "lakefence record" in text
    for shown in (
        "Role (lakefence.role) publish: the merge",
        "DAG (lakefence.dag_id) daily",
        "Run (lakefence.run_id) manual__2026-11-25",
        "Task (lakefence.task_id) daily_counts",
        "Try (lakefence.try_number) 2",
        f"Input commit (lakefence.input_ref) {publication['input_ref']}",
        f"Staged commit (lakefence.staged_commit) {publication['staged']}",
        f"pipeline {HOSTILE}",
    ):
        assert shown in text, shown
    # Parents (linked) and the changed paths against the first parent.
    base = f"/repositories/{repo}"
    assert f"{base}/commits/{publication['input_ref']}" in page.links
    assert f"{base}/commits/{publication['staged']}" in page.links
    assert "added tables/daily_counts/part-0.parquet 6 bytes" in text
    assert f"added tables/{HOSTILE}.txt" in text and "events/part-0.parquet" not in text
    # Escaped everywhere: the hostile text is shown, never interpreted.
    assert page.scripts == 0 and "<script>" not in response.text


def test_every_link_leads_to_a_page(lakefence_server: LakeFSServerInfo, publication: dict[str, str]) -> None:
    """From the commit and the branch pages, every link (parents, objects, history, folders) answers 200."""
    repo = publication["repo"]
    seen: set[str] = set()
    todo = [
        commit_url(lakefence_server.url, repo, publication["merged"]),
        branch_url(lakefence_server.url, repo, "main"),
    ]
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        response, page = _get(url)
        assert response.status_code == 200, (url, response.text)
        todo.extend(urllib.parse.urljoin(url, link) for link in page.links)
    paths = {urllib.parse.urlsplit(u).path for u in seen}
    assert {f"/repositories/{repo}/object", f"/repositories/{repo}/objects", "/repositories"} <= paths
    assert len(seen) > 10


def test_the_branch_page_shows_head_and_history(
    lakefence_server: LakeFSServerInfo, publication: dict[str, str]
) -> None:
    repo = publication["repo"]
    response, page = _get(branch_url(lakefence_server.url, repo, "main"))
    assert response.status_code == 200
    text = " ".join(" ".join(page.text).split())
    assert "branch main" in text and f"HEAD {publication['merged']}" in text
    history = [link.rsplit("/", 1)[1] for link in page.links if "/commits/" in link]
    # HEAD, then history newest first: the merge, its two parents, the repository's first commit.
    assert history[:2] == [publication["merged"], publication["merged"]]
    assert set(history[2:]) >= {publication["staged"], publication["input_ref"]}
    assert "publish: daily / daily_counts, try 2" in text
    folder = f"/repositories/{repo}/objects?ref=main&path=tables%2F"
    assert folder in page.links
    _, tables = _get(urllib.parse.urljoin(lakefence_server.url, folder))
    daily_folder = f"/repositories/{repo}/objects?ref=main&path=tables%2Fdaily_counts%2F"
    assert daily_folder in tables.links
    _, daily = _get(urllib.parse.urljoin(lakefence_server.url, daily_folder))
    obj = f"/repositories/{repo}/object?ref=main&path=tables%2Fdaily_counts%2Fpart-0.parquet"
    assert obj in daily.links
    _, stats = _get(urllib.parse.urljoin(lakefence_server.url, obj))
    assert "size 6 bytes" in " ".join(" ".join(stats.text).split())


def test_pages_are_not_api_calls(
    lakefence_server: LakeFSServerInfo, publication: dict[str, str], lakefence_controls: Controls
) -> None:
    """Request counts (by API operation) and the store's read counters see no page view."""
    repo = publication["repo"]
    lakefence_controls.reset_counts()
    for url in (
        commit_url(lakefence_server.url, repo, publication["merged"]),
        branch_url(lakefence_server.url, repo, "main"),
        f"{lakefence_server.url}/repositories/{repo}/commits?ref=main",
    ):
        assert requests.get(url, timeout=30).status_code == 200
    assert lakefence_controls.counts() == {}
    assert lakefence_controls.stats() == {}
    # The API itself is counted as before.
    requests.get(f"{lakefence_server.endpoint}/repositories/{repo}/commits/{publication['merged']}", timeout=30)
    assert lakefence_controls.counts() == {"getCommit": 1}


def test_unknown_pages_and_api_paths(lakefence_server: LakeFSServerInfo, publication: dict[str, str]) -> None:
    repo = publication["repo"]
    response, page = _get(f"{lakefence_server.url}/repositories/{repo}/commits/{'0' * 64}")
    assert response.status_code == 404 and "commit not found" in " ".join(page.text)
    response, _ = _get(f"{lakefence_server.url}/repositories/no-such-repo/objects?ref=main")
    assert response.status_code == 404 and response.headers["Content-Type"].startswith("text/html")
    assert requests.post(commit_url(lakefence_server.url, repo, publication["merged"]), timeout=30).status_code == 405
    # Outside the UI's paths the API answers as lakeFS does.
    api = requests.get(f"{lakefence_server.url}/api/v1/no-such-endpoint", timeout=30)
    assert api.status_code == 404 and api.json() == {"message": "invalid API endpoint"}
