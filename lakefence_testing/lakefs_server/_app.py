"""The WSGI application: lakeFS REST API v1 under ``/api/v1``, the store's internal counters under
``/_lakefence``, and read-only HTML pages at the lakeFS UI's paths (:mod:`._ui`)."""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from lakefence_testing.lakefs_server import _errors as errors
from lakefence_testing.lakefs_server._api_objects import ObjectsApi
from lakefence_testing.lakefs_server._http import (
    LAKEFS_VERSION,
    RAW_HEADERS_KEY,
    UNAUTHENTICATED,
    amount_arg,
    binding_error,
    body_field,
    bool_arg,
    error_response,
    go_status_line,
    json_body,
    json_response,
    listing_args,
    path_arg,
    protection_patterns,
    repository_creation,
    str_map,
    validate_query,
)
from lakefence_testing.lakefs_server._render import diff_list, pagination
from lakefence_testing.lakefs_server._store import Store
from lakefence_testing.lakefs_server._ui import UIPages

__all__ = ["RAW_HEADERS_KEY", "LakeFSApp"]

_R = "/api/v1/repositories/<repository>"
_ROUTES: list[tuple[str, str, str]] = [
    ("/api/v1/healthcheck", "GET", "healthCheck"),
    ("/api/v1/config", "GET", "getConfig"),
    ("/api/v1/config/storage", "GET", "getStorageConfig"),
    ("/api/v1/config/version", "GET", "getLakeFSVersion"),
    ("/api/v1/user", "GET", "getCurrentUser"),
    ("/api/v1/repositories", "GET", "listRepositories"),
    ("/api/v1/repositories", "POST", "createRepository"),
    (_R, "GET", "getRepository"),
    (_R, "DELETE", "deleteRepository"),
    (f"{_R}/metadata", "GET", "getRepositoryMetadata"),
    (f"{_R}/metadata", "POST", "setRepositoryMetadata"),
    (f"{_R}/metadata", "DELETE", "deleteRepositoryMetadata"),
    (f"{_R}/settings/branch_protection", "GET", "getBranchProtectionRules"),
    (f"{_R}/settings/branch_protection", "PUT", "setBranchProtectionRules"),
    (f"{_R}/tags", "GET", "listTags"),
    (f"{_R}/tags", "POST", "createTag"),
    (f"{_R}/tags/<tag>", "GET", "getTag"),
    (f"{_R}/tags/<tag>", "DELETE", "deleteTag"),
    (f"{_R}/branches", "GET", "listBranches"),
    (f"{_R}/branches", "POST", "createBranch"),
    (f"{_R}/branches/<branch>", "GET", "getBranch"),
    (f"{_R}/branches/<branch>", "DELETE", "deleteBranch"),
    (f"{_R}/branches/<branch>", "PUT", "resetBranch"),
    (f"{_R}/branches/<branch>/hard_reset", "PUT", "hardResetBranch"),
    (f"{_R}/branches/<branch>/revert", "POST", "revertBranch"),
    (f"{_R}/branches/<branch>/cherry-pick", "POST", "cherryPick"),
    (f"{_R}/branches/<branch>/commits", "POST", "commit"),
    (f"{_R}/branches/<branch>/diff", "GET", "diffBranch"),
    (f"{_R}/branches/<branch>/objects", "POST", "uploadObject"),
    (f"{_R}/branches/<branch>/objects", "DELETE", "deleteObject"),
    (f"{_R}/branches/<branch>/objects/delete", "POST", "deleteObjects"),
    (f"{_R}/branches/<branch>/objects/copy", "POST", "copyObject"),
    (f"{_R}/branches/<branch>/objects/stage_allowed", "GET", "uploadObjectPreflight"),
    (f"{_R}/branches/<branch>/objects/stat/user_metadata", "PUT", "updateObjectUserMetadata"),
    (f"{_R}/refs/<ref>/commits", "GET", "logCommits"),
    (f"{_R}/refs/<sourceRef>/merge/<destinationBranch>", "POST", "mergeIntoBranch"),
    (f"{_R}/refs/<sourceRef>/merge/<destinationBranch>", "GET", "findMergeBase"),
    (f"{_R}/refs/<leftRef>/diff/<rightRef>", "GET", "diffRefs"),
    (f"{_R}/commits/<commitId>", "GET", "getCommit"),
    # HEAD first: a GET rule would also answer HEAD.
    (f"{_R}/refs/<ref>/objects", "HEAD", "headObject"),
    (f"{_R}/refs/<ref>/objects", "GET", "getObject"),
    (f"{_R}/refs/<ref>/objects/stat", "GET", "statObject"),
    (f"{_R}/refs/<ref>/objects/ls", "GET", "listObjects"),
]



class LakeFSApp(ObjectsApi):
    """WSGI application serving the lakeFS API from a :class:`Store`.

    Request counts, latency and faults are not here: the fault-injecting proxy
    (:class:`lakefence_testing.proxy.FaultProxy`) applies them in front of this server or
    of a real lakeFS. Only what a proxy cannot see is served here, under ``/_lakefence/``: the
    store's internal counters (``GET /_lakefence/stats``; ``DELETE`` zeroes them).

    :param store: the data.
    :param access_key_id: the one accepted access key id.
    :param secret_access_key: its secret.
    """

    def __init__(self, store: Store, access_key_id: str, secret_access_key: str) -> None:
        self.store = store
        self._key = access_key_id
        self._secret = secret_access_key
        self._ui = UIPages(store)
        self.url_map = Map([Rule(path, methods=[method], endpoint=op) for path, method, op in _ROUTES])
        self._handlers: dict[str, Callable[..., Response]] = {
            op: getattr(self, f"op_{op}") for _, _, op in _ROUTES
        }

    # --- dispatch -----------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        if request.path.startswith("/_lakefence/"):
            response = self._control(request)
        elif self._ui.serves(request.path):
            response = self._ui(request)
        else:
            response = self._api(request, environ)
        response.status = go_status_line(response.status_code)
        return response(environ, start_response)

    def _authenticated(self, request: Request) -> bool:
        auth = request.authorization
        if auth is None or auth.type != "basic":
            return False
        return hmac.compare_digest(str(auth.username or ""), self._key) and hmac.compare_digest(
            str(auth.password or ""), self._secret
        )

    def _api(self, request: Request, environ: dict[str, Any]) -> Response:
        adapter = self.url_map.bind_to_environ(environ)
        try:
            operation, args = adapter.match()
        except MethodNotAllowed:
            return json_response(405, {"message": "method not allowed"})
        except NotFound:
            return json_response(404, {"message": "invalid API endpoint"})
        except HTTPException as exc:
            return json_response(exc.code or 400, {"message": str(exc.description)})
        try:
            validate_query(str(operation), request)
            if operation == "createRepository":
                repository_creation(request)  # lakeFS validates request bodies before authenticating
        except errors.ApiError as exc:
            return error_response(exc)
        if operation not in UNAUTHENTICATED and not self._authenticated(request):
            return json_response(401, {"message": "error authenticating request"})
        binding = binding_error(str(operation), request)
        if binding is not None:
            return binding
        try:
            return self._handlers[str(operation)](request, **args)
        except errors.ApiError as exc:
            return error_response(exc)

    def _control(self, request: Request) -> Response:
        name = request.path[len("/_lakefence/"):].strip("/")
        if name == "stats" and request.method == "GET":
            return json_response(200, self.store.stats())
        if name == "stats" and request.method == "DELETE":
            self.store.reset_stats()
            return json_response(204, None)
        return json_response(404, {"message": "unknown control (counts, latency and faults are the proxy's)"})

    # --- config -------------------------------------------------------------------------

    @staticmethod
    def _storage_config() -> dict[str, Any]:
        return {
            "blockstore_type": "local",
            "blockstore_namespace_example": "local://example-bucket/",
            "blockstore_namespace_ValidityRegex": "^local://",
            "default_namespace_prefix": "local://",
            "pre_sign_support": False,
            "pre_sign_support_ui": False,
            "import_support": False,
            "import_validity_regex": "^local://",
            "pre_sign_multipart_upload": False,
            "blockstore_id": "",
            "blockstore_description": "",
        }

    def op_healthCheck(self, request: Request) -> Response:
        return json_response(204, None)

    def op_getConfig(self, request: Request) -> Response:
        return json_response(
            200,
            {
                "version_config": {"version": LAKEFS_VERSION, "version_context": "lakeFS"},
                "storage_config": self._storage_config(),
                "storage_config_list": [],
                "capabilities_config": {},
                "ui_config": {},
            },
        )

    def op_getStorageConfig(self, request: Request) -> Response:
        return json_response(200, self._storage_config())

    def op_getLakeFSVersion(self, request: Request) -> Response:
        return json_response(200, {"version": LAKEFS_VERSION, "version_context": "lakeFS"})

    def op_getCurrentUser(self, request: Request) -> Response:
        user = {"id": self.store.committer, "creation_date": 0, "friendly_name": "", "email": ""}
        return json_response(200, {"user": user})

    # --- repositories -------------------------------------------------------------------

    def op_listRepositories(self, request: Request) -> Response:
        repos, has_more = self.store.list_repositories(
            request.args.get("prefix", ""), request.args.get("after", ""), amount_arg(request)
        )
        results = [r.to_api() for r in repos]
        return json_response(200, {"pagination": pagination(results, has_more, "id"), "results": results})

    def op_createRepository(self, request: Request) -> Response:
        body = repository_creation(request)
        bare = bool_arg(request, "bare")
        repo = self.store.create_repository(
            name=body["name"],
            storage_namespace=body["storage_namespace"],
            default_branch=body.get("default_branch") or "main",
            storage_id=body.get("storage_id") or "",
            read_only=body["read_only"],
            bare=bare,
            sample_data=body["sample_data"],
        )
        answer = repo.to_api()
        if bare:
            answer.pop("read_only")  # lakeFS's answer to a bare creation has no read_only
        return json_response(201, answer)

    def op_getRepository(self, request: Request, repository: str) -> Response:
        return json_response(200, self.store.get_repository(repository).to_api())

    def op_deleteRepository(self, request: Request, repository: str) -> Response:
        self.store.delete_repository(repository, bool_arg(request, "force"))
        return json_response(204, None)

    def op_getRepositoryMetadata(self, request: Request, repository: str) -> Response:
        return json_response(200, self.store.get_repository_metadata(repository))

    def op_setRepositoryMetadata(self, request: Request, repository: str) -> Response:
        metadata = str_map(json_body(request), "metadata")
        if metadata is None:
            raise errors.bad_request("request body has no 'metadata'")
        self.store.update_repository_metadata(repository, metadata, [])
        return json_response(204, None)

    def op_deleteRepositoryMetadata(self, request: Request, repository: str) -> Response:
        keys = body_field(json_body(request), "keys", list, required=True)
        if not all(isinstance(k, str) for k in keys):
            raise errors.bad_request("keys must be strings")
        self.store.update_repository_metadata(repository, {}, keys)
        return json_response(204, None)

    # --- branch protection --------------------------------------------------------------

    def op_getBranchProtectionRules(self, request: Request, repository: str) -> Response:
        patterns, etag = self.store.get_branch_protection(repository)
        response = json_response(200, [{"pattern": p} for p in patterns])
        response.headers["ETag"] = etag
        return response

    def op_setBranchProtectionRules(self, request: Request, repository: str) -> Response:
        if_match = request.headers.get("If-Match")
        if if_match == "":
            # lakeFS's generated router refuses an empty If-Match before its handler (plain text).
            return Response(
                "Invalid format for parameter If-Match: parameter 'If-Match' is empty, can't bind its value\n",
                status=400,
                content_type="text/plain; charset=utf-8",
            )
        rules = request.get_json(force=True, silent=True)
        self.store.set_branch_protection(repository, protection_patterns(rules), if_match)
        return json_response(204, None)

    # --- tags and branches --------------------------------------------------------------

    def _ref_list(self, request: Request, repository: str, table: str, show_hidden: bool) -> Response:
        refs, has_more = self.store.list_refs(
            repository,
            table,
            request.args.get("prefix", ""),
            request.args.get("after", ""),
            amount_arg(request),
            show_hidden,
        )
        results = [{"id": name, "commit_id": commit_id} for name, commit_id in refs]
        return json_response(200, {"pagination": pagination(results, has_more, "id"), "results": results})

    def op_listTags(self, request: Request, repository: str) -> Response:
        return self._ref_list(request, repository, "tags", True)

    def op_createTag(self, request: Request, repository: str) -> Response:
        body = json_body(request)
        tag = body_field(body, "id", str, required=True)
        commit_id = self.store.create_tag(
            repository, tag, body_field(body, "ref", str, required=True), body_field(body, "force", bool, default=False)
        )
        return json_response(201, {"id": tag, "commit_id": commit_id})

    def op_getTag(self, request: Request, repository: str, tag: str) -> Response:
        return json_response(200, {"id": tag, "commit_id": self.store.get_tag(repository, tag)})

    def op_deleteTag(self, request: Request, repository: str, tag: str) -> Response:
        self.store.delete_tag(repository, tag, bool_arg(request, "force"))
        return json_response(204, None)

    def op_listBranches(self, request: Request, repository: str) -> Response:
        return self._ref_list(request, repository, "branches", bool_arg(request, "show_hidden"))

    def op_createBranch(self, request: Request, repository: str) -> Response:
        body = json_body(request)
        commit_id = self.store.create_branch(
            repository,
            body_field(body, "name", str, required=True),
            body_field(body, "source", str, required=True),
            hidden=body_field(body, "hidden", bool, default=False),
            force=body_field(body, "force", bool, default=False),
        )
        return Response(commit_id, status=201, content_type="text/plain; charset=utf-8")

    def op_getBranch(self, request: Request, repository: str, branch: str) -> Response:
        return json_response(200, {"id": branch, "commit_id": self.store.get_branch(repository, branch)})

    def op_deleteBranch(self, request: Request, repository: str, branch: str) -> Response:
        self.store.delete_branch(repository, branch, bool_arg(request, "force"))
        return json_response(204, None)

    def op_resetBranch(self, request: Request, repository: str, branch: str) -> Response:
        body = json_body(request)
        self.store.reset_branch(
            repository,
            branch,
            body_field(body, "type", str, required=True),
            body_field(body, "path", str, default=""),
            body_field(body, "force", bool, default=False),
        )
        return json_response(204, None)

    def op_hardResetBranch(self, request: Request, repository: str, branch: str) -> Response:
        self.store.hard_reset(repository, branch, path_arg(request, "ref"), bool_arg(request, "force"))
        return json_response(204, None)

    def op_revertBranch(self, request: Request, repository: str, branch: str) -> Response:
        body = json_body(request)
        overrides = body_field(body, "commit_overrides", dict, default={})
        self.store.revert(
            repository,
            branch,
            body_field(body, "ref", str, required=True),
            body_field(body, "parent_number", int, required=True),
            message=body_field(overrides, "message", str),
            metadata=str_map(overrides, "metadata"),
            allow_empty=body_field(body, "allow_empty", bool, default=False),
            force=body_field(body, "force", bool, default=False),
        )
        return json_response(204, None)

    def op_cherryPick(self, request: Request, repository: str, branch: str) -> Response:
        body = json_body(request)
        overrides = body_field(body, "commit_overrides", dict, default={})
        created = self.store.cherry_pick(
            repository,
            branch,
            body_field(body, "ref", str, required=True),
            body_field(body, "parent_number", int),
            message=body_field(overrides, "message", str),
            metadata=str_map(overrides, "metadata"),
            force=body_field(body, "force", bool, default=False),
        )
        return json_response(201, created.to_api())

    # --- commits ------------------------------------------------------------------------

    def op_commit(self, request: Request, repository: str, branch: str) -> Response:
        body = json_body(request)
        date = body.get("date")
        if isinstance(date, float) or (date is not None and not isinstance(date, int)) or isinstance(date, bool):
            schema = {
                "description": "set date to override creation date in the commit (Unix Epoch in seconds)",
                "format": "int64",
                "type": "integer",
            }
            raise errors.bad_request(
                "request body has an error: doesn't match schema #/components/schemas/CommitCreation:"
                ' Error at "/date": value must be an integer\nSchema:\n'
                + "\n".join("  " + line for line in json.dumps(schema, indent=2, sort_keys=True).splitlines())
                + f"\n\nValue:\n  {json.dumps(date)}\n"
            )
        if date is not None and not -(2**63) <= date < 2**63:
            # Go's JSON decoder cannot fit it in an int64: lakeFS answers in plain text.
            return Response("Error unmarshalling body 'Commit' as JSON\n", status=400, content_type="text/plain")
        created = self.store.commit(
            repository,
            branch,
            body_field(body, "message", str, required=True),
            metadata=str_map(body, "metadata"),
            date=body_field(body, "date", int),
            allow_empty=body_field(body, "allow_empty", bool, default=False),
            force=body_field(body, "force", bool, default=False),
            source_metarange=request.args.get("source_metarange") or None,
        )
        return json_response(201, created.to_api())

    def op_getCommit(self, request: Request, repository: str, commitId: str) -> Response:
        return json_response(200, self.store.get_commit(repository, commitId).to_api())

    def op_logCommits(self, request: Request, repository: str, ref: str) -> Response:
        since_raw = request.args.get("since")
        since = None
        if since_raw:
            try:
                parsed = datetime.fromisoformat(since_raw)
            except ValueError as exc:
                raise errors.bad_request(f"invalid since: {since_raw!r}") from exc
            # lakeFS compares creation times to the nanosecond: keep the sub-second part.
            since = int(parsed.timestamp()) * 1_000_000_000 + parsed.microsecond * 1000
        commits, has_more = self.store.log(
            repository,
            ref,
            after=request.args.get("after", ""),
            limit=amount_arg(request),
            objects=request.args.getlist("objects"),
            prefixes=request.args.getlist("prefixes"),
            stop_on_limit=bool_arg(request, "limit"),
            first_parent=bool_arg(request, "first_parent"),
            since_ns=since,
            stop_at=request.args.get("stop_at", ""),
        )
        results = [c.to_api() for c in commits]
        return json_response(200, {"pagination": pagination(results, has_more, "id"), "results": results})

    # --- diff and merge -----------------------------------------------------------------

    def op_diffRefs(self, request: Request, repository: str, leftRef: str, rightRef: str) -> Response:
        diff_type = request.args.get("type", "three_dot")
        page = self.store.diff_refs(
            repository,
            leftRef,
            rightRef,
            diff_type="two_dot" if diff_type == "two_dot" else "three_dot",
            **listing_args(request),
        )
        return json_response(200, diff_list(page, bool_arg(request, "include_right_stats")))

    def op_diffBranch(self, request: Request, repository: str, branch: str) -> Response:
        page = self.store.diff_branch(repository, branch, **listing_args(request))
        return json_response(200, diff_list(page))

    def op_mergeIntoBranch(
        self, request: Request, repository: str, sourceRef: str, destinationBranch: str
    ) -> Response:
        body = request.get_json(force=True, silent=True) or {}
        if not isinstance(body, dict):
            raise errors.bad_request("request body must be a JSON object")
        created = self.store.merge(
            repository,
            sourceRef,
            destinationBranch,
            message=body_field(body, "message", str, default=""),
            metadata=str_map(body, "metadata"),
            strategy=body_field(body, "strategy", str, default=""),
            force=body_field(body, "force", bool, default=False),
            allow_empty=body_field(body, "allow_empty", bool, default=False),
            squash=body_field(body, "squash_merge", bool, default=False),
        )
        return json_response(200, {"reference": created.id})

    def op_findMergeBase(
        self, request: Request, repository: str, sourceRef: str, destinationBranch: str
    ) -> Response:
        source, dest, base = self.store.find_merge_base(repository, sourceRef, destinationBranch)
        return json_response(
            200, {"source_commit_id": source, "destination_commit_id": dest, "base_commit_id": base}
        )
