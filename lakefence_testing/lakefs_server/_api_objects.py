"""The object operations of the lakeFS API: upload, delete, copy, stat, list, HEAD and GET."""

from __future__ import annotations

from email.utils import formatdate

from werkzeug.http import parse_range_header
from werkzeug.wrappers import Request, Response

from lakefence_testing.lakefs_server import _errors as errors
from lakefence_testing.lakefs_server._http import (
    INTERNAL_HEADER_PREFIX,
    INTERNAL_METADATA_PREFIX,
    META_HEADER_PREFIX,
    NO_PRESIGN,
    RAW_HEADERS_KEY,
    body_field,
    bool_arg,
    error_response,
    file_chunks,
    json_body,
    json_response,
    listing_args,
    path_arg,
    str_map,
)
from lakefence_testing.lakefs_server._render import object_stats_list
from lakefence_testing.lakefs_server._store import DEFAULT_CONTENT_TYPE, DELETE_OBJECTS_MAX, Entry, Store


class ObjectsApi:
    """The object operations of :class:`~._app.LakeFSApp` (a mixin: it serves ``self.store``)."""

    store: Store

    def op_uploadObjectPreflight(self, request: Request, repository: str, branch: str) -> Response:
        self.store.get_branch(repository, branch)
        return json_response(204, None)

    def op_uploadObject(self, request: Request, repository: str, branch: str) -> Response:
        path = path_arg(request)
        if_match = request.headers.get("If-Match")
        if_none_match = request.headers.get("If-None-Match")
        if if_match is not None or (if_none_match is not None and if_none_match != "*"):
            raise errors.not_implemented()
        exclusive = if_none_match == "*"
        force = bool_arg(request, "force")
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
        self.store.delete_objects(repository, branch, [path_arg(request)], bool_arg(request, "force"))
        return json_response(204, None)

    def op_deleteObjects(self, request: Request, repository: str, branch: str) -> Response:
        paths = body_field(json_body(request), "paths", list, required=True)
        if not all(isinstance(p, str) for p in paths):
            raise errors.bad_request("paths must be strings")
        if len(paths) > DELETE_OBJECTS_MAX:
            raise errors.bad_request(f"request size exceeded, max paths is set to {DELETE_OBJECTS_MAX}")
        # lakeFS skips empty paths (Spark deletes "branch/") and treats "not found" (of a path,
        # or of the branch itself) as deleted: no per-path errors.
        wanted = [p for p in paths if p]
        try:
            self.store.delete_objects(repository, branch, wanted, bool_arg(request, "force"))
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
        body = json_body(request)
        if body_field(body, "shallow", bool, default=False):
            raise errors.not_implemented()
        dest_path = path_arg(request, "dest_path")
        entry = self.store.copy_object(
            repository,
            branch,
            dest_path,
            body_field(body, "src_ref", str, default=""),
            body_field(body, "src_path", str, required=True),
            body_field(body, "force", bool, default=False),
        )
        return json_response(201, entry.stats(dest_path))

    def op_updateObjectUserMetadata(self, request: Request, repository: str, branch: str) -> Response:
        metadata = str_map(json_body(request), "set")
        if metadata is None:
            raise errors.bad_request("request body has no 'set'")
        self.store.update_object_metadata(repository, branch, path_arg(request), metadata)
        return json_response(204, None)

    def op_statObject(self, request: Request, repository: str, ref: str) -> Response:
        path = path_arg(request)
        entry = self.store.stat_object(repository, ref, path)
        if bool_arg(request, "presign"):
            raise errors.bad_request(NO_PRESIGN)
        return json_response(200, entry.stats(path, bool_arg(request, "user_metadata", True)))

    def op_listObjects(self, request: Request, repository: str, ref: str) -> Response:
        with_metadata = bool_arg(request, "user_metadata", True)
        page = self.store.list_objects(repository, ref, **listing_args(request))
        if bool_arg(request, "presign") and any(entry is not None for _, entry in page.items):
            raise errors.bad_request(NO_PRESIGN)  # lakeFS pre-signs each object of the page (not common prefixes)
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
            entry = self.store.stat_object(repository, ref, path_arg(request))
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
        entry = self.store.stat_object(repository, ref, path_arg(request))
        headers = self._object_headers(entry)
        if request.headers.get("If-None-Match") == headers["ETag"]:
            return Response(status=304)
        if bool_arg(request, "presign"):
            raise errors.bad_request(NO_PRESIGN)
        try:
            bounds = self._range(request, entry.size)
        except errors.ApiError as exc:
            response = error_response(exc)
            response.headers["Content-Range"] = f"bytes */{entry.size}"
            return response
        handle = open(self.store.blob_path(entry.blob), "rb")
        headers["Content-Disposition"] = "attachment"
        headers["X-Content-Type-Options"] = "nosniff"
        if bounds is None:
            response = Response(file_chunks(handle, entry.size), status=200, headers=headers)
            response.headers["Content-Length"] = str(entry.size)
            return response
        start, stop = bounds
        handle.seek(start)
        response = Response(file_chunks(handle, stop - start), status=206, headers=headers)
        response.headers["Content-Range"] = f"bytes {start}-{stop - 1}/{entry.size}"
        response.headers["Content-Length"] = str(stop - start)
        return response
