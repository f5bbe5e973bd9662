"""The JSON lakeFS answers listings with, shared by the HTTP app and the Lua ``lakefs`` module."""

from __future__ import annotations

from typing import Any

from lakefence_testing.lakefs_server._model import Page

MAX_PER_PAGE = 1000


def pagination(page_results: list[dict[str, Any]], has_more: bool, token_field: str) -> dict[str, Any]:
    """Return the swagger ``Pagination`` of one page.

    :param page_results: the page's items.
    :param has_more: whether more items follow.
    :param token_field: the item field that is the next page's ``after``.
    """
    return {
        "has_more": has_more,
        "next_offset": page_results[-1][token_field] if has_more and page_results else "",
        "results": len(page_results),
        "max_per_page": MAX_PER_PAGE,
    }


def diff_list(page: Page, right_stats: bool = False) -> dict[str, Any]:
    """Return the swagger ``DiffList`` of a diff page.

    :param page: items ``(path, (type, entry))`` or ``(path, None)`` for a common prefix.
    :param right_stats: include the right side's object stats.
    """
    results = []
    for path, item in page.items:
        if item is None:
            results.append({"type": "prefix_changed", "path": path, "path_type": "common_prefix"})
            continue
        kind, entry = item
        result = {"type": kind, "path": path, "path_type": "object", "size_bytes": entry.size}
        if right_stats:
            result["right"] = {
                "checksum": entry.checksum,
                "content_type": entry.content_type,
                "mtime": entry.mtime,
                "metadata": dict(entry.metadata),
            }
        results.append(result)
    return {"pagination": pagination(results, page.has_more, "path"), "results": results}


def object_stats_list(page: Page, user_metadata: bool = True) -> dict[str, Any]:
    """Return the swagger ``ObjectStatsList`` of a listing page.

    :param page: items ``(path, entry)`` or ``(path, None)`` for a common prefix.
    :param user_metadata: include user metadata.
    """
    results: list[dict[str, Any]] = []
    for path, entry in page.items:
        if entry is None:
            prefix = {"path": path, "path_type": "common_prefix", "physical_address": "", "checksum": "", "mtime": 0}
            results.append(prefix)
            continue
        stats = entry.stats(path, user_metadata)
        # lakeFS leaves out empty metadata in listings (omitempty).
        if not stats["metadata"]:
            del stats["metadata"]
        results.append(stats)
    return {"pagination": pagination(results, page.has_more, "path"), "results": results}
