"""The HTTP side lakeFS's API shares across its operations: Go's status lines and JSON, query and body checks.

lakeFS validates a request in a fixed order (the OpenAPI query schema, authentication, the request
binding, the handler); the helpers here answer each step as lakeFS does.
"""

from __future__ import annotations

import http
import json
import re
from collections.abc import Iterator
from typing import Any, BinaryIO, TypedDict

from werkzeug.wrappers import Request, Response

from lakefence_testing.lakefs_server import _errors as errors
from lakefence_testing.lakefs_server._render import MAX_PER_PAGE

LAKEFS_VERSION = "1.86.0"  # the release the local server answers as (real_lakefs.DEFAULT_LAKEFS_VERSION)
DEFAULT_PER_PAGE = 100
META_HEADER_PREFIX = "x-lakefs-meta-"
INTERNAL_HEADER_PREFIX = "x-lakefs-internal-"
INTERNAL_METADATA_PREFIX = "::lakefs::"
UNAUTHENTICATED = {"healthCheck"}
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
NO_PRESIGN = "local adapter presigned URL: operation not supported"  # presign=true of an object, as lakeFS
# What Go's strconv.ParseBool accepts.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})

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


def error_response(exc: errors.ApiError) -> Response:
    return json_response(exc.status, exc.body)


def bool_arg(request: Request, name: str, default: bool = False) -> bool:
    # Values were checked by validate_query (as Go's strconv.ParseBool parses them).
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


class ListingArgs(TypedDict):
    """The paging arguments of a listing that groups common prefixes (objects, diffs)."""

    prefix: str
    after: str
    delimiter: str
    limit: int


def listing_args(request: Request) -> ListingArgs:
    """Read ``prefix``, ``after``, ``delimiter`` and ``amount`` (as ``limit``) from the query."""
    return ListingArgs(
        prefix=request.args.get("prefix", ""),
        after=request.args.get("after", ""),
        delimiter=request.args.get("delimiter", ""),
        limit=amount_arg(request),
    )


def amount_arg(request: Request) -> int:
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


def validate_query(operation: str, request: Request) -> None:
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


def binding_error(operation: str, request: Request) -> Response | None:
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


def repository_creation(request: Request) -> dict[str, Any]:
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


def protection_patterns(rules: Any) -> list[str]:
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


def json_body(request: Request) -> dict[str, Any]:
    body = request.get_json(force=True, silent=True)
    if not isinstance(body, dict):
        raise errors.bad_request("request body must be a JSON object")
    return body


def body_field(body: dict[str, Any], name: str, kind: type, required: bool = False, default: Any = None) -> Any:
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


def str_map(body: dict[str, Any], name: str) -> dict[str, str] | None:
    value = body_field(body, name, dict)
    if value is None:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise errors.bad_request(f"{name} must map strings to strings")
    return dict(value)


def path_arg(request: Request, name: str = "path") -> str:
    value = request.args.get(name)
    if value is None:
        raise errors.bad_request(f"query parameter {name} is required")
    return value


def file_chunks(handle: BinaryIO, remaining: int) -> Iterator[bytes]:
    try:
        while remaining > 0:
            chunk = handle.read(min(remaining, 1 << 20))
            if not chunk:
                return
            remaining -= len(chunk)
            yield chunk
    finally:
        handle.close()
