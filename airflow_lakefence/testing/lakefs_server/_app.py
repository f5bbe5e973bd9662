"""The WSGI application: lakeFS REST API v1 under ``/api/v1``, the store's internal counters under ``/_lakefence``."""

from __future__ import annotations

import hmac
import http
import json
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from email.utils import formatdate
from typing import Any, BinaryIO

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.http import parse_range_header
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from airflow_lakefence.testing.lakefs_server import _errors as errors
from airflow_lakefence.testing.lakefs_server._render import MAX_PER_PAGE, diff_list, object_stats_list, pagination
from airflow_lakefence.testing.lakefs_server._store import (
    DEFAULT_CONTENT_TYPE,
    DELETE_OBJECTS_MAX,
    Entry,
    Store,
)

LAKEFS_VERSION = "1.86.0"  # the release the local server answers as (real_lakefs.DEFAULT_LAKEFS_VERSION)
DEFAULT_PER_PAGE = 100
META_HEADER_PREFIX = "x-lakefs-meta-"
INTERNAL_HEADER_PREFIX = "x-lakefs-internal-"
INTERNAL_METADATA_PREFIX = "::lakefs::"
_UNAUTHENTICATED = {"healthCheck"}
RAW_HEADERS_KEY = "lakefence.raw_headers"
# Query parameters lakeFS's OpenAPI validator checks before anything else (even authentication):
# name -> schema, as in api/swagger.yml.
_AMOUNT_SCHEMA = {"default": 100, "maximum": 1000, "minimum": -1, "type": "integer"}
_DIFF_TYPE_SCHEMA = {"default": "three_dot", "enum": ["two_dot", "three_dot"], "type": "string"}
_REQUIRED_QUERY = {
    "statObject": ("path",),
    "getObject": ("path",),
    "headObject": ("path",),
    "uploadObject": ("path",),
    "deleteObject": ("path",),
    "updateObjectUserMetadata": ("path",),
    "copyObject": ("dest_path",),
    "hardResetBranch": ("ref",),
}
# Query parameters of api/swagger.yml without ``allowEmptyValue``, per operation: name -> (type, has a
# default). An empty value of one without a default is refused by the OpenAPI validator (before
# authentication); one with a default passes it and fails later, in the generated request binding.
_QUERY_PARAMS: dict[str, dict[str, tuple[str, bool]]] = {
    "listRepositories": {"amount": ("integer", True)},
    "createRepository": {"bare": ("boolean", True)},
    "deleteRepository": {"force": ("boolean", True)},
    "listTags": {"amount": ("integer", True)},
    "deleteTag": {"force": ("boolean", False)},
    "listBranches": {"amount": ("integer", True), "show_hidden": ("boolean", True)},
    "logCommits": {
        "amount": ("integer", True), "objects": ("array", False), "prefixes": ("array", False),
        "limit": ("boolean", False), "first_parent": ("boolean", False),
    },
    "commit": {"source_metarange": ("string", False)},
    "deleteBranch": {"force": ("boolean", True)},
    "hardResetBranch": {"ref": ("string", False), "force": ("boolean", True)},
    "diffBranch": {"amount": ("integer", True)},
    "diffRefs": {"amount": ("integer", True), "type": ("string", True), "include_right_stats": ("boolean", True)},
    "getObject": {"path": ("string", False), "presign": ("boolean", False)},
    "headObject": {"path": ("string", False)},
    "uploadObjectPreflight": {"path": ("string", False)},
    "uploadObject": {"path": ("string", False), "storageClass": ("string", False), "force": ("boolean", True)},
    "deleteObject": {"path": ("string", False), "force": ("boolean", True), "no_tombstone": ("boolean", True)},
    "deleteObjects": {"force": ("boolean", True), "no_tombstone": ("boolean", True)},
    "copyObject": {"dest_path": ("string", False)},
    "statObject": {"path": ("string", False), "user_metadata": ("boolean", True), "presign": ("boolean", False)},
    "updateObjectUserMetadata": {"path": ("string", False)},
    "listObjects": {"user_metadata": ("boolean", True), "presign": ("boolean", False), "amount": ("integer", True)},
}  # fmt: skip
_NO_PRESIGN = "local adapter presigned URL: operation not supported"  # presign=true of an object, as lakeFS
# What Go's strconv.ParseBool accepts.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})

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


# Where Go's http.StatusText differs from Python's phrases (lakeFS answers with Go's).
_GO_REASONS = {203: "Non-Authoritative Info", 414: "Request URI Too Long"}


def go_status_line(code: int) -> str:
    """Return ``"<code> <reason>"`` as Go's net/http writes it (``409 Conflict``, not ``409 CONFLICT``).

    :param code: HTTP status code.
    """
    try:
        reason = _GO_REASONS.get(code) or http.HTTPStatus(code).phrase
    except ValueError:
        reason = ""
    return f"{code} {reason}".rstrip()


def json_response(status: int, body: Any) -> Response:
    """Return a JSON response.

    :param status: HTTP status.
    :param body: JSON-serializable body; ``None`` sends no body.
    """
    if body is None:
        response = Response(status=status)
        del response.headers["Content-Type"]  # Go sends none without a body
        return response
    # As Go's json.Encoder writes it: compact, one trailing newline.
    return Response(json.dumps(body, separators=(",", ":")) + "\n", status=status, content_type="application/json")


def _error(exc: errors.ApiError) -> Response:
    return json_response(exc.status, exc.body)


def _bool(request: Request, name: str, default: bool = False) -> bool:
    # Values were checked by _validate_query (as Go's strconv.ParseBool parses them).
    value = request.args.get(name)
    if value is None or value == "":
        return default
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise errors.bad_request(
        f'parameter "{name}" in query has an error: value {value}: an invalid boolean: invalid syntax'
    )


def _amount(request: Request) -> int:
    raw = request.args.get("amount")
    if raw is None or raw == "":
        return DEFAULT_PER_PAGE
    try:
        value = int(raw)
    except ValueError as exc:
        raise errors.bad_request(f"invalid amount: {raw!r}") from exc
    if value <= 0:
        return DEFAULT_PER_PAGE
    return min(value, MAX_PER_PAGE)


def _schema_error(name: str, problem: str, schema: dict[str, Any], value: Any) -> errors.ApiError:
    # The text kin-openapi (lakeFS's request validator) writes, schema and value included.
    def indent(text: str) -> str:
        return "\n".join("  " + line for line in text.splitlines())

    return errors.bad_request(
        f'parameter "{name}" in query has an error: {problem}\nSchema:\n'
        f"{indent(json.dumps(schema, indent=2, sort_keys=True))}\n\nValue:\n{indent(json.dumps(value))}\n"
    )


def _validate_query(operation: str, request: Request) -> None:
    """Check query parameters as lakeFS's OpenAPI middleware does, before authentication."""
    for name in _REQUIRED_QUERY.get(operation, ()):
        if request.args.get(name) is None:
            raise errors.bad_request(f'parameter "{name}" in query has an error: value is required but missing')
    params = _QUERY_PARAMS.get(operation, {})
    for name, value in request.args.items(multi=True):
        # Only prefix, after, delimiter, since, stop_at (and a few others) may be empty.
        kind, has_default = params.get(name, ("", True))
        if value == "" and not has_default:
            raise errors.bad_request(f'parameter "{name}" in query has an error: empty value is not allowed')
        if kind == "boolean" and value != "" and value not in _GO_TRUE and value not in _GO_FALSE:
            raise errors.bad_request(
                f'parameter "{name}" in query has an error: value {value}: an invalid boolean: invalid syntax'
            )
    raw = request.args.get("amount")
    if raw and "amount" in params:
        try:
            amount = int(raw)
        except ValueError:
            raise errors.bad_request(
                f'parameter "amount" in query has an error: value {raw}: an invalid integer: invalid syntax'
            ) from None
        high, low = int(str(_AMOUNT_SCHEMA["maximum"])), int(str(_AMOUNT_SCHEMA["minimum"]))
        if amount > high:
            raise _schema_error("amount", f"number must be at most {high}", _AMOUNT_SCHEMA, amount)
        if amount < low:
            raise _schema_error("amount", f"number must be at least {low}", _AMOUNT_SCHEMA, amount)
    diff_type = request.args.get("type")
    if operation == "diffRefs" and diff_type and diff_type not in _DIFF_TYPE_SCHEMA["enum"]:
        allowed = json.dumps(_DIFF_TYPE_SCHEMA["enum"], separators=(",", ":"))
        raise _schema_error("type", f"value is not one of the allowed values {allowed}", _DIFF_TYPE_SCHEMA, diff_type)


_PATTERN_SCHEMA = {
    "description": "fnmatch pattern for the branch name, supporting * and ? wildcards",
    "example": "stable_*",
    "minLength": 1,
    "type": "string",
}
_RULE_SCHEMA = {"properties": {"pattern": _PATTERN_SCHEMA}, "required": ["pattern"], "type": "object"}


def _binding_error(operation: str, request: Request) -> Response | None:
    """The plain-text 400 of lakeFS's generated request binding: an empty parameter that has a default."""
    params = _QUERY_PARAMS.get(operation, {})
    for name, value in request.args.items(multi=True):
        if value == "" and params.get(name, ("", False))[1]:
            return Response(
                f"Invalid format for parameter {name}: multiple values for single value parameter '{name}'\n",
                status=400,
                content_type="text/plain; charset=utf-8",
            )
    return None


def _body_schema_error(problem: str, schema: dict[str, Any], value: Any) -> errors.ApiError:
    def indent(text: str) -> str:
        return "\n".join("  " + line for line in text.splitlines())

    return errors.bad_request(
        f"request body has an error: doesn't match schema: {problem}\nSchema:\n"
        f"{indent(json.dumps(schema, indent=2, sort_keys=True))}\n\nValue:\n"
        f"{indent(json.dumps(value, indent=2, sort_keys=True))}\n"
    )


def _go_json(value: Any, indent: int | None = None) -> str:
    # As Go's json.MarshalIndent writes it: UTF-8 as is, <, > and & escaped.
    text = json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_REPOSITORY_CREATION_SCHEMA: dict[str, Any] = {
    "properties": {
        "default_branch": {"example": "main", "type": "string"},
        "name": {"pattern": "^[a-z0-9][a-z0-9-]{2,62}$", "type": "string"},
        "read_only": {"default": False, "example": True, "type": "boolean"},
        "sample_data": {"default": False, "example": True, "type": "boolean"},
        "storage_id": {
            "description": "Unique identifier of the underlying data store. *EXPERIMENTAL*",
            "type": "string",
        },
        "storage_namespace": {
            "description": 'Filesystem URI to store the underlying data in (e.g. "s3://my-bucket/some/path/")',
            "example": "s3://example-bucket/",
            "pattern": "^(s3|gs|https?|mem|local|transient)://.*$",
            "type": "string",
        },
    },
    "required": ["name", "storage_namespace"],
    "type": "object",
}


def _repository_creation(request: Request) -> dict[str, Any]:
    """The ``RepositoryCreation`` body, validated as lakeFS's OpenAPI validator (kin-openapi) does it.

    Defaults are filled in first (also for ``null``), then properties are checked in name order,
    then the required ones; the first problem is the answer, with kin-openapi's text.
    """
    schema = _REPOSITORY_CREATION_SCHEMA

    def error(problem: str, part: dict[str, Any], value: Any) -> errors.ApiError:
        def indent(text: str) -> str:
            return "\n".join("  " + line for line in text.splitlines())

        return errors.bad_request(
            "request body has an error: doesn't match schema #/components/schemas/RepositoryCreation: "
            f"{problem}\nSchema:\n{indent(_go_json(part, 2))}\n\nValue:\n{indent(_go_json(value, 2))}\n"
        )

    body = request.get_json(force=True, silent=True)
    if body is None:
        raise errors.bad_request("request body must be a JSON object")
    if not isinstance(body, dict):
        raise error("value must be an object", schema, body)
    for name, prop in schema["properties"].items():
        if body.get(name) is None and "default" in prop:
            body[name] = prop["default"]
    for name in sorted(body):
        prop = schema["properties"].get(name)
        value = body[name]
        if prop is None:
            continue  # additional properties are allowed
        kind = prop["type"]
        if value is None:
            raise error(f'Error at "/{name}": Value is not nullable', prop, value)
        if kind == "boolean" and not isinstance(value, bool):
            raise error(f'Error at "/{name}": value must be a boolean', prop, value)
        if kind == "string" and not isinstance(value, str):
            raise error(f'Error at "/{name}": value must be a string', prop, value)
        if "pattern" in prop and not re.search(prop["pattern"], value):
            pattern = prop["pattern"]
            raise error(f'Error at "/{name}": string doesn\'t match the regular expression "{pattern}"', prop, value)
    for name in schema["required"]:
        if name not in body:
            raise error(f'Error at "/{name}": property "{name}" is missing', schema, body)
    return body


def _protection_patterns(rules: Any) -> list[str]:
    """Validate a ``BranchProtectionRule`` array as lakeFS's OpenAPI middleware does."""
    if not isinstance(rules, list):
        schema = {"items": {"$ref": "#/components/schemas/BranchProtectionRule"}, "type": "array"}
        raise _body_schema_error("value must be an array", schema, rules)
    patterns = []
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict):
            raise _body_schema_error(f'Error at "/{i}": value must be an object', _RULE_SCHEMA, rule)
        if "pattern" not in rule:
            raise _body_schema_error(f'Error at "/{i}/pattern": property "pattern" is missing', _RULE_SCHEMA, rule)
        pattern = rule["pattern"]
        if not isinstance(pattern, str):
            raise _body_schema_error(f'Error at "/{i}/pattern": value must be a string', _PATTERN_SCHEMA, pattern)
        if not pattern:
            raise _body_schema_error(
                f'Error at "/{i}/pattern": minimum string length is 1', _PATTERN_SCHEMA, pattern
            )
        patterns.append(pattern)
    return patterns


def _body(request: Request) -> dict[str, Any]:
    body = request.get_json(force=True, silent=True)
    if not isinstance(body, dict):
        raise errors.bad_request("request body must be a JSON object")
    return body


def _field(body: dict[str, Any], name: str, kind: type, required: bool = False, default: Any = None) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise errors.bad_request(f"request body has no {name!r}")
        return default
    if kind is int and isinstance(value, bool):
        raise errors.bad_request(f"{name} must be {kind.__name__}")
    if not isinstance(value, kind):
        raise errors.bad_request(f"{name} must be {kind.__name__}")
    return value


def _str_map(body: dict[str, Any], name: str) -> dict[str, str] | None:
    value = _field(body, name, dict)
    if value is None:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise errors.bad_request(f"{name} must map strings to strings")
    return dict(value)


def _path(request: Request, name: str = "path") -> str:
    value = request.args.get(name)
    if value is None:
        raise errors.bad_request(f"query parameter {name} is required")
    return value


def _file_chunks(handle: BinaryIO, remaining: int) -> Iterator[bytes]:
    try:
        while remaining > 0:
            chunk = handle.read(min(remaining, 1 << 20))
            if not chunk:
                return
            remaining -= len(chunk)
            yield chunk
    finally:
        handle.close()


class LakeFSApp:
    """WSGI application serving the lakeFS API from a :class:`Store`.

    Request counts, latency and faults are not here: the fault-injecting proxy
    (:class:`airflow_lakefence.testing.proxy.FaultProxy`) applies them in front of this server or
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
        self.url_map = Map([Rule(path, methods=[method], endpoint=op) for path, method, op in _ROUTES])
        self._handlers: dict[str, Callable[..., Response]] = {
            op: getattr(self, f"op_{op}") for _, _, op in _ROUTES
        }

    # --- dispatch -----------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        if request.path.startswith("/_lakefence/"):
            response = self._control(request)
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
            _validate_query(str(operation), request)
            if operation == "createRepository":
                _repository_creation(request)  # lakeFS validates request bodies before authenticating
        except errors.ApiError as exc:
            return _error(exc)
        if operation not in _UNAUTHENTICATED and not self._authenticated(request):
            return json_response(401, {"message": "error authenticating request"})
        binding = _binding_error(str(operation), request)
        if binding is not None:
            return binding
        try:
            return self._handlers[str(operation)](request, **args)
        except errors.ApiError as exc:
            return _error(exc)

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
            request.args.get("prefix", ""), request.args.get("after", ""), _amount(request)
        )
        results = [r.to_api() for r in repos]
        return json_response(200, {"pagination": pagination(results, has_more, "id"), "results": results})

    def op_createRepository(self, request: Request) -> Response:
        body = _repository_creation(request)
        bare = _bool(request, "bare")
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
        self.store.delete_repository(repository, _bool(request, "force"))
        return json_response(204, None)

    def op_getRepositoryMetadata(self, request: Request, repository: str) -> Response:
        return json_response(200, self.store.get_repository_metadata(repository))

    def op_setRepositoryMetadata(self, request: Request, repository: str) -> Response:
        metadata = _str_map(_body(request), "metadata")
        if metadata is None:
            raise errors.bad_request("request body has no 'metadata'")
        self.store.update_repository_metadata(repository, metadata, [])
        return json_response(204, None)

    def op_deleteRepositoryMetadata(self, request: Request, repository: str) -> Response:
        keys = _field(_body(request), "keys", list, required=True)
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
        self.store.set_branch_protection(repository, _protection_patterns(rules), if_match)
        return json_response(204, None)

    # --- tags and branches --------------------------------------------------------------

    def _ref_list(self, request: Request, repository: str, table: str, show_hidden: bool) -> Response:
        refs, has_more = self.store.list_refs(
            repository,
            table,
            request.args.get("prefix", ""),
            request.args.get("after", ""),
            _amount(request),
            show_hidden,
        )
        results = [{"id": name, "commit_id": commit_id} for name, commit_id in refs]
        return json_response(200, {"pagination": pagination(results, has_more, "id"), "results": results})

    def op_listTags(self, request: Request, repository: str) -> Response:
        return self._ref_list(request, repository, "tags", True)

    def op_createTag(self, request: Request, repository: str) -> Response:
        body = _body(request)
        tag = _field(body, "id", str, required=True)
        commit_id = self.store.create_tag(
            repository, tag, _field(body, "ref", str, required=True), _field(body, "force", bool, default=False)
        )
        return json_response(201, {"id": tag, "commit_id": commit_id})

    def op_getTag(self, request: Request, repository: str, tag: str) -> Response:
        return json_response(200, {"id": tag, "commit_id": self.store.get_tag(repository, tag)})

    def op_deleteTag(self, request: Request, repository: str, tag: str) -> Response:
        self.store.delete_tag(repository, tag, _bool(request, "force"))
        return json_response(204, None)

    def op_listBranches(self, request: Request, repository: str) -> Response:
        return self._ref_list(request, repository, "branches", _bool(request, "show_hidden"))

    def op_createBranch(self, request: Request, repository: str) -> Response:
        body = _body(request)
        commit_id = self.store.create_branch(
            repository,
            _field(body, "name", str, required=True),
            _field(body, "source", str, required=True),
            hidden=_field(body, "hidden", bool, default=False),
            force=_field(body, "force", bool, default=False),
        )
        return Response(commit_id, status=201, content_type="text/plain; charset=utf-8")

    def op_getBranch(self, request: Request, repository: str, branch: str) -> Response:
        return json_response(200, {"id": branch, "commit_id": self.store.get_branch(repository, branch)})

    def op_deleteBranch(self, request: Request, repository: str, branch: str) -> Response:
        self.store.delete_branch(repository, branch, _bool(request, "force"))
        return json_response(204, None)

    def op_resetBranch(self, request: Request, repository: str, branch: str) -> Response:
        body = _body(request)
        self.store.reset_branch(
            repository,
            branch,
            _field(body, "type", str, required=True),
            _field(body, "path", str, default=""),
            _field(body, "force", bool, default=False),
        )
        return json_response(204, None)

    def op_hardResetBranch(self, request: Request, repository: str, branch: str) -> Response:
        self.store.hard_reset(repository, branch, _path(request, "ref"), _bool(request, "force"))
        return json_response(204, None)

    def op_revertBranch(self, request: Request, repository: str, branch: str) -> Response:
        body = _body(request)
        overrides = _field(body, "commit_overrides", dict, default={})
        self.store.revert(
            repository,
            branch,
            _field(body, "ref", str, required=True),
            _field(body, "parent_number", int, required=True),
            message=_field(overrides, "message", str),
            metadata=_str_map(overrides, "metadata"),
            allow_empty=_field(body, "allow_empty", bool, default=False),
            force=_field(body, "force", bool, default=False),
        )
        return json_response(204, None)

    def op_cherryPick(self, request: Request, repository: str, branch: str) -> Response:
        body = _body(request)
        overrides = _field(body, "commit_overrides", dict, default={})
        created = self.store.cherry_pick(
            repository,
            branch,
            _field(body, "ref", str, required=True),
            _field(body, "parent_number", int),
            message=_field(overrides, "message", str),
            metadata=_str_map(overrides, "metadata"),
            force=_field(body, "force", bool, default=False),
        )
        return json_response(201, created.to_api())

    # --- commits ------------------------------------------------------------------------

    def op_commit(self, request: Request, repository: str, branch: str) -> Response:
        body = _body(request)
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
            _field(body, "message", str, required=True),
            metadata=_str_map(body, "metadata"),
            date=_field(body, "date", int),
            allow_empty=_field(body, "allow_empty", bool, default=False),
            force=_field(body, "force", bool, default=False),
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
            limit=_amount(request),
            objects=request.args.getlist("objects"),
            prefixes=request.args.getlist("prefixes"),
            stop_on_limit=_bool(request, "limit"),
            first_parent=_bool(request, "first_parent"),
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
            prefix=request.args.get("prefix", ""),
            after=request.args.get("after", ""),
            delimiter=request.args.get("delimiter", ""),
            limit=_amount(request),
        )
        return json_response(200, diff_list(page, _bool(request, "include_right_stats")))

    def op_diffBranch(self, request: Request, repository: str, branch: str) -> Response:
        page = self.store.diff_branch(
            repository,
            branch,
            prefix=request.args.get("prefix", ""),
            after=request.args.get("after", ""),
            delimiter=request.args.get("delimiter", ""),
            limit=_amount(request),
        )
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
            message=_field(body, "message", str, default=""),
            metadata=_str_map(body, "metadata"),
            strategy=_field(body, "strategy", str, default=""),
            force=_field(body, "force", bool, default=False),
            allow_empty=_field(body, "allow_empty", bool, default=False),
            squash=_field(body, "squash_merge", bool, default=False),
        )
        return json_response(200, {"reference": created.id})

    def op_findMergeBase(
        self, request: Request, repository: str, sourceRef: str, destinationBranch: str
    ) -> Response:
        source, dest, base = self.store.find_merge_base(repository, sourceRef, destinationBranch)
        return json_response(
            200, {"source_commit_id": source, "destination_commit_id": dest, "base_commit_id": base}
        )

    # --- objects ------------------------------------------------------------------------

    def op_uploadObjectPreflight(self, request: Request, repository: str, branch: str) -> Response:
        self.store.get_branch(repository, branch)
        return json_response(204, None)

    def op_uploadObject(self, request: Request, repository: str, branch: str) -> Response:
        path = _path(request)
        if_match = request.headers.get("If-Match")
        if_none_match = request.headers.get("If-None-Match")
        if if_match is not None or (if_none_match is not None and if_none_match != "*"):
            raise errors.not_implemented()
        exclusive = if_none_match == "*"
        force = _bool(request, "force")
        self.store.check_upload(repository, branch, path, exclusive)
        content_type = request.headers.get("Content-Type") or DEFAULT_CONTENT_TYPE
        if request.mimetype == "multipart/form-data":
            part = request.files.get("content")
            if part is None:
                raise errors.ApiError(500, "multipart upload missing key 'content': http: no such file")
            content_type = part.content_type or DEFAULT_CONTENT_TYPE
            blob = self.store.put_blob(part.stream)
        else:
            blob = self.store.put_blob(request.stream)
        metadata = {}
        for key, value in request.environ.get(RAW_HEADERS_KEY) or request.headers.items():
            lowered = key.lower()
            if lowered.startswith(META_HEADER_PREFIX):
                metadata[lowered[len(META_HEADER_PREFIX):]] = value
            elif lowered.startswith(INTERNAL_HEADER_PREFIX):
                metadata[INTERNAL_METADATA_PREFIX + lowered[len(INTERNAL_HEADER_PREFIX):]] = value
        entry = self.store.stage_object(
            repository,
            branch,
            path,
            blob,
            content_type=content_type,
            metadata=metadata,
            if_none_match=exclusive,
            force=force,
        )
        return json_response(201, entry.stats(path))

    def op_deleteObject(self, request: Request, repository: str, branch: str) -> Response:
        self.store.delete_objects(repository, branch, [_path(request)], _bool(request, "force"))
        return json_response(204, None)

    def op_deleteObjects(self, request: Request, repository: str, branch: str) -> Response:
        paths = _field(_body(request), "paths", list, required=True)
        if not all(isinstance(p, str) for p in paths):
            raise errors.bad_request("paths must be strings")
        if len(paths) > DELETE_OBJECTS_MAX:
            raise errors.bad_request(f"request size exceeded, max paths is set to {DELETE_OBJECTS_MAX}")
        # lakeFS skips empty paths (Spark deletes "branch/") and treats "not found" (of a path,
        # or of the branch itself) as deleted: no per-path errors.
        wanted = [p for p in paths if p]
        try:
            self.store.delete_objects(repository, branch, wanted, _bool(request, "force"))
        except errors.ApiError as exc:
            if exc.status == 403 and exc.message == "cannot write to protected branch":
                # lakeFS reports a protected branch per path, in a 200.
                failed = [{"message": exc.message, "path": p, "status_code": 403} for p in wanted]
                return json_response(200, {"errors": failed})
            if exc.status != 404:
                raise
            self.store.get_repository(repository)
        return json_response(200, {"errors": []})

    def op_copyObject(self, request: Request, repository: str, branch: str) -> Response:
        body = _body(request)
        if _field(body, "shallow", bool, default=False):
            raise errors.not_implemented()
        dest_path = _path(request, "dest_path")
        entry = self.store.copy_object(
            repository,
            branch,
            dest_path,
            _field(body, "src_ref", str, default=""),
            _field(body, "src_path", str, required=True),
            _field(body, "force", bool, default=False),
        )
        return json_response(201, entry.stats(dest_path))

    def op_updateObjectUserMetadata(self, request: Request, repository: str, branch: str) -> Response:
        metadata = _str_map(_body(request), "set")
        if metadata is None:
            raise errors.bad_request("request body has no 'set'")
        self.store.update_object_metadata(repository, branch, _path(request), metadata)
        return json_response(204, None)

    def op_statObject(self, request: Request, repository: str, ref: str) -> Response:
        path = _path(request)
        entry = self.store.stat_object(repository, ref, path)
        if _bool(request, "presign"):
            raise errors.bad_request(_NO_PRESIGN)
        return json_response(200, entry.stats(path, _bool(request, "user_metadata", True)))

    def op_listObjects(self, request: Request, repository: str, ref: str) -> Response:
        with_metadata = _bool(request, "user_metadata", True)
        page = self.store.list_objects(
            repository,
            ref,
            prefix=request.args.get("prefix", ""),
            after=request.args.get("after", ""),
            delimiter=request.args.get("delimiter", ""),
            limit=_amount(request),
        )
        if _bool(request, "presign") and any(entry is not None for _, entry in page.items):
            raise errors.bad_request(_NO_PRESIGN)  # lakeFS pre-signs each object of the page (not common prefixes)
        return json_response(200, object_stats_list(page, with_metadata))

    def _object_headers(self, entry: Entry) -> dict[str, str]:
        return {
            "ETag": f'"{entry.checksum}"',
            "Last-Modified": formatdate(entry.mtime, usegmt=True),
            "Content-Type": entry.content_type,
            "Accept-Ranges": "bytes",
            "Cache-Control": "no-store, must-revalidate",
            "Expires": "0",
        }

    def _range(self, request: Request, size: int) -> tuple[int, int] | None:
        header = request.headers.get("Range")
        if header is None:
            return None
        parsed = parse_range_header(header)
        bounds = parsed.range_for_length(size) if parsed is not None and len(parsed.ranges) == 1 else None
        if bounds is None:
            raise errors.ApiError(416, "Requested Range Not Satisfiable")
        return bounds

    def op_headObject(self, request: Request, repository: str, ref: str) -> Response:
        try:
            entry = self.store.stat_object(repository, ref, _path(request))
            headers = self._object_headers(entry)
            bounds = self._range(request, entry.size)
        except errors.ApiError as exc:
            # HEAD answers carry no body.
            return Response(status=exc.status)
        if bounds is None:
            response = Response(status=200, headers=headers)
            response.headers["Content-Length"] = str(entry.size)
            return response
        start, stop = bounds
        response = Response(status=206, headers=headers)
        response.headers["Content-Range"] = f"bytes {start}-{stop - 1}/{entry.size}"
        response.headers["Content-Length"] = str(stop - start)
        return response

    def op_getObject(self, request: Request, repository: str, ref: str) -> Response:
        entry = self.store.stat_object(repository, ref, _path(request))
        headers = self._object_headers(entry)
        if request.headers.get("If-None-Match") == headers["ETag"]:
            return Response(status=304)
        if _bool(request, "presign"):
            raise errors.bad_request(_NO_PRESIGN)
        try:
            bounds = self._range(request, entry.size)
        except errors.ApiError as exc:
            response = _error(exc)
            response.headers["Content-Range"] = f"bytes */{entry.size}"
            return response
        handle = open(self.store.blob_path(entry.blob), "rb")
        headers["Content-Disposition"] = "attachment"
        headers["X-Content-Type-Options"] = "nosniff"
        if bounds is None:
            response = Response(_file_chunks(handle, entry.size), status=200, headers=headers)
            response.headers["Content-Length"] = str(entry.size)
            return response
        start, stop = bounds
        handle.seek(start)
        response = Response(_file_chunks(handle, stop - start), status=206, headers=headers)
        response.headers["Content-Range"] = f"bytes {start}-{stop - 1}/{entry.size}"
        response.headers["Content-Length"] = str(stop - start)
        return response
