"""Conformance: repository creation as lakeFS answers it: bare repositories, sample data, namespaces, bodies.

What each test asserts was first observed on real lakeFS v1.86.0 (``--lakefs-backend=real``); the
local server answers alike, except for sample data, which it refuses (501) instead of writing
lakeFS's sample files (docs/lakefs-server.md).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import lakefs
import lakefs_sdk
import pytest
import requests
from lakefs_sdk import RepositoryCreation
from lakefs_sdk.exceptions import ApiException, NotFoundException


class _Repos:
    """Creates repositories with unique names under the session's namespace prefix; deletes them at the end."""

    def __init__(self, server, client: lakefs.Client) -> None:
        self.server = server
        self.api = client.sdk_client.repositories_api
        self.created: list[str] = []
        self.tag = uuid.uuid4().hex[:8]

    def name(self, label: str) -> str:
        return f"lakefence-{label}-{self.tag}"

    def namespace(self, label: str) -> str:
        return f"{self.server.storage_namespace.rstrip('/')}/ns-{label}-{self.tag}"

    def create(self, label: str, namespace: str, bare: bool | None = None, **fields: object) -> lakefs_sdk.Repository:
        name = self.name(label)
        self.created.append(name)
        return self.api.create_repository(
            RepositoryCreation(name=name, storage_namespace=namespace, **fields), bare=bare
        )

    def delete_all(self) -> None:
        for name in self.created:
            try:
                self.api.delete_repository(name, force=True)
            except NotFoundException:
                pass


@pytest.fixture
def repos(lakefence_server, lakefence_client: lakefs.Client) -> Iterator[_Repos]:
    made = _Repos(lakefence_server, lakefence_client)
    yield made
    made.delete_all()


def _raw(lakefence_server, method: str, path: str, **kwargs: object) -> requests.Response:
    """A request as sent, past the SDK's own validation of types."""
    auth = (lakefence_server.access_key_id, lakefence_server.secret_access_key)
    return requests.request(method, f"{lakefence_server.endpoint}{path}", auth=auth, timeout=60, **kwargs)


def test_bare_repository_has_no_commit_and_no_branch(repos: _Repos, lakefence_client: lakefs.Client) -> None:
    namespace = repos.namespace("bare")
    created = repos.create("bare", namespace, bare=True, default_branch="trunk")
    assert (created.id, created.default_branch, created.storage_namespace) == (repos.name("bare"), "trunk", namespace)
    assert created.read_only is None  # lakeFS's answer to a bare creation carries no read_only
    name = created.id
    api = lakefence_client.sdk_client
    assert api.repositories_api.get_repository(name).read_only is False
    assert api.branches_api.list_branches(name).results == []
    assert api.tags_api.list_tags(name).results == []
    with pytest.raises(NotFoundException) as missing:
        api.branches_api.get_branch(name, "trunk")
    assert json.loads(missing.value.body) == {"message": "branch not found"}
    with pytest.raises(NotFoundException) as no_ref:
        api.refs_api.log_commits(name, "trunk")
    assert json.loads(no_ref.value.body) == {"message": "ref: not found"}
    with pytest.raises(NotFoundException) as no_source:
        api.branches_api.create_branch(name, lakefs_sdk.BranchCreation(name="b", source="trunk"))
    assert json.loads(no_source.value.body) == {"message": "source reference 'trunk': not found"}
    with pytest.raises(lakefs_sdk.exceptions.ForbiddenException):
        api.branches_api.delete_branch(name, "trunk")  # still the default branch, even absent
    assert api.repositories_api.get_branch_protection_rules(name) == []
    api.repositories_api.delete_repository(name)


def test_bare_and_read_only_repositories_do_not_claim_their_namespace(repos: _Repos) -> None:
    used, bare_first, read_only_first = (repos.namespace(x) for x in ("used", "bare-first", "ro-first"))
    repos.create("writable", used)
    # A writable repository claims its namespace (lakeFS writes _lakefs/dummy there) ...
    with pytest.raises(lakefs_sdk.exceptions.BadRequestException) as taken:
        repos.create("again", used)
    assert json.loads(taken.value.body)["message"] == (
        f"failed to create repository: found lakeFS objects in the storage (:{used}) key(_lakefs/dummy):"
        " storage namespace already in use"
    )
    # ... which a bare or a read-only repository neither checks nor claims.
    assert repos.create("bare-on-used", used, bare=True).storage_namespace == used
    assert repos.create("ro-on-used", used, read_only=True).read_only is True
    repos.create("bare-first", bare_first, bare=True)
    assert repos.create("after-bare", bare_first).storage_namespace == bare_first
    repos.create("ro-first", read_only_first, read_only=True)
    assert repos.create("after-ro", read_only_first).storage_namespace == read_only_first


def test_default_branch_name_is_taken_as_given(repos: _Repos, lakefence_client: lakefs.Client) -> None:
    created = repos.create("odd-default", repos.namespace("odd-default"), default_branch="not a branch id")
    assert created.default_branch == "not a branch id"
    listed = lakefence_client.sdk_client.branches_api.list_branches(created.id).results
    assert [b.id for b in listed] == ["not a branch id"]
    with pytest.raises(lakefs_sdk.exceptions.BadRequestException) as invalid:
        lakefence_client.sdk_client.branches_api.get_branch(created.id, "not a branch id")
    assert json.loads(invalid.value.body) == {"message": "argument branch: branch id: invalid value: validation error"}


def test_sample_data(repos: _Repos, lakefence_client: lakefs.Client, lakefence_backend: str) -> None:
    """lakeFS writes its sample files, commits them and protects the default branch; the local server refuses."""
    namespace = repos.namespace("samples")
    api = lakefence_client.sdk_client
    name = repos.name("samples")
    if lakefence_backend == "local":
        with pytest.raises(ApiException) as refused:
            repos.create("samples", namespace, sample_data=True)
        assert refused.value.status == 501
        assert "sample data is not supported" in json.loads(refused.value.body)["message"]
        with pytest.raises(NotFoundException):
            api.repositories_api.get_repository(name)
        return
    repos.create("samples", namespace, sample_data=True, default_branch="trunk")
    log = api.refs_api.log_commits(name, "trunk").results
    assert [(c.message, c.committer) for c in log] == [
        ("Add sample data", api.auth_api.get_current_user().user.id),
        ("Repository created", ""),
    ]
    paths = {o.path for o in lakefs.Repository(name, client=lakefence_client).ref("trunk").objects()}
    assert {"README.md", "lakes.parquet", "data/lakes.source.md"} <= paths
    readme = lakefs.Repository(name, client=lakefence_client).ref("trunk").object("README.md").reader().read()
    assert f"lakefs://{name}/trunk/lakes.parquet".encode() in readme  # a template, filled in
    assert [r.pattern for r in api.repositories_api.get_branch_protection_rules(name)] == ["trunk"]


def test_sample_data_in_read_only_or_bare_repository(repos: _Repos, lakefence_client: lakefs.Client) -> None:
    api = lakefence_client.sdk_client
    # Read-only: the repository is created, then writing the samples into it fails.
    with pytest.raises(lakefs_sdk.exceptions.ForbiddenException) as refused:
        repos.create("ro-samples", repos.namespace("ro-samples"), sample_data=True, read_only=True)
    assert json.loads(refused.value.body) == {"message": "error populating sample repository: read-only repository"}
    name = repos.name("ro-samples")
    assert api.repositories_api.get_repository(name).read_only is True
    assert [c.message for c in api.refs_api.log_commits(name, "main").results] == ["Repository created"]
    assert api.repositories_api.get_branch_protection_rules(name) == []
    # Bare: no samples, no error.
    bare = repos.create("bare-samples", repos.namespace("bare-samples"), bare=True, sample_data=True)
    assert api.branches_api.list_branches(bare.id).results == []


def test_repository_creation_body_is_validated_as_by_lakefs(lakefence_server) -> None:
    def message(body: object) -> str:
        response = _raw(lakefence_server, "POST", "/repositories", json=body)
        assert response.status_code == 400, response.text
        return str(response.json()["message"])

    prefix = "request body has an error: doesn't match schema #/components/schemas/RepositoryCreation: "
    namespace = f"{lakefence_server.storage_namespace}/never-created"
    boolean = '{\n    "default": false,\n    "example": true,\n    "type": "boolean"\n  }'
    assert message({"name": "abc", "storage_namespace": namespace, "sample_data": "yes"}) == (
        f'{prefix}Error at "/sample_data": value must be a boolean\nSchema:\n  {boolean}\n\nValue:\n  "yes"\n'
    )
    assert message({"name": "ab", "storage_namespace": namespace}).startswith(
        f'{prefix}Error at "/name": string doesn\'t match the regular expression "^[a-z0-9][a-z0-9-]{{2,62}}$"\n'
    )
    missing = message({"storage_namespace": namespace})
    assert missing.startswith(f'{prefix}Error at "/name": property "name" is missing\nSchema:\n')
    # The value shown is the body with the schema's defaults filled in.
    shown = json.loads(missing.split("\nValue:\n", 1)[1])
    assert shown == {"read_only": False, "sample_data": False, "storage_namespace": namespace}
    assert message({"name": "abc", "storage_namespace": namespace, "default_branch": None}).startswith(
        f'{prefix}Error at "/default_branch": Value is not nullable\n'
    )


def test_boolean_query_parameters_are_parsed_as_by_lakefs(lakefence_server, lakefence_repo: lakefs.Repository) -> None:
    body = {"name": "never-created", "storage_namespace": f"{lakefence_server.storage_namespace}/never-created"}
    invalid = _raw(lakefence_server, "POST", "/repositories", params={"bare": "yes"}, json=body)
    assert (invalid.status_code, invalid.json()) == (
        400, {"message": 'parameter "bare" in query has an error: value yes: an invalid boolean: invalid syntax'}
    )  # fmt: skip
    # An empty value of a parameter with a default fails in lakeFS's request binding, in plain text.
    empty = _raw(lakefence_server, "GET", f"/repositories/{lakefence_repo.id}/branches", params={"show_hidden": ""})
    assert (empty.status_code, empty.headers["Content-Type"], empty.text) == (
        400, "text/plain; charset=utf-8",
        "Invalid format for parameter show_hidden: multiple values for single value parameter 'show_hidden'\n",
    )  # fmt: skip
    # Without a default it is the validator's "empty value" (JSON); Go's ParseBool spellings pass.
    commits = f"/repositories/{lakefence_repo.id}/refs/main/commits"
    no_default = _raw(lakefence_server, "GET", commits, params={"limit": ""})
    assert no_default.json() == {"message": 'parameter "limit" in query has an error: empty value is not allowed'}
    hidden = _raw(lakefence_server, "GET", f"/repositories/{lakefence_repo.id}/branches", params={"show_hidden": "T"})
    assert [b["id"] for b in hidden.json()["results"]] == ["main"]
