"""Delta Lake tables as declared outputs: the pure checks (docs/delta.md).

A Delta table is a directory (its *root*) holding data files and a ``_delta_log/`` directory of
numbered commits (``00000000000000000007.json`` is version 7). Version ``v`` may exist once; a
reader builds version ``v`` from the commits up to ``v`` (or a checkpoint and the commits after
it). So a change a fenced attempt may publish under a table root is exactly: new commits
``N+1, N+2, ...`` on from the input's latest version ``N``, the data files they reference, and
Delta's own bookkeeping (checkpoints, ``_last_checkpoint``, checksums). Everything here works on
plain values: the paths changed between the input commit and the staged commit (lakeFS's diff)
and the paths of the input's log. Nothing imports Airflow or lakeFS.

Log file names (Delta transaction protocol, "Delta Log Entries", "Checkpoints", "Version
Checksum File", "Log Compaction Files"):

- ``<v:020d>.json``: the commit of version ``v``;
- ``<v:020d>.checkpoint.parquet``, ``<v:020d>.checkpoint.<part:010d>.<parts:010d>.parquet``,
  ``<v:020d>.checkpoint.<uuid>.json|parquet``: checkpoints (classic, multi-part, V2);
- ``_last_checkpoint``: a pointer to the latest checkpoint (rewritten in place: a *changed* path);
- ``<v:020d>.crc``: the version checksum;
- ``<v:020d>.<w:020d>.compacted.json``: log compaction;
- ``_sidecars/<uuid>.parquet``: V2 checkpoint sidecars.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from airflow_lakefence.core.ports import LakeFSPort
from airflow_lakefence.exceptions import DeltaLogError, DeltaOutputModeError, InvalidInputError

__all__ = [
    "CHANGE_TYPES",
    "DELTA_LOG_DIR",
    "DeltaTableChange",
    "DeltaTableOutput",
    "LogEntry",
    "PathChange",
    "check_delta_changes",
    "check_output_mode",
    "check_staged_tables",
    "classify_log_entry",
    "find_table_roots",
    "latest_version",
    "normalise_table_roots",
    "refuse_undeclared_tables",
]

#: The log directory of a Delta table, relative to its root.
DELTA_LOG_DIR = "_delta_log/"
#: The change types of a lakeFS diff entry the checks understand.
CHANGE_TYPES = ("added", "removed", "changed")
#: The one table format supported.
FORMATS = ("delta",)

_V = r"(?P<version>\d{20})"
_LOG_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("commit", re.compile(rf"{_V}\.json")),
    ("checkpoint", re.compile(rf"{_V}\.checkpoint\.parquet")),
    ("checkpoint", re.compile(rf"{_V}\.checkpoint\.\d{{10}}\.\d{{10}}\.parquet")),
    ("checkpoint", re.compile(rf"{_V}\.checkpoint\.[0-9a-fA-F-]{{36}}\.(json|parquet)")),
    ("checksum", re.compile(rf"{_V}\.crc")),
    ("compaction", re.compile(rf"{_V}\.\d{{20}}\.compacted\.json")),
    ("last_checkpoint", re.compile(r"_last_checkpoint")),
    ("sidecar", re.compile(r"_sidecars/[^/]+\.parquet")),
)
#: Kinds of log entry Delta itself rewrites or adds alongside commits (never a version of its own).
_BOOKKEEPING = ("checkpoint", "checksum", "compaction", "last_checkpoint", "sidecar")


@dataclass(frozen=True)
class DeltaTableOutput:
    """A Delta Lake table declared as an output of a fenced task.

    The table's root is where the job writes through Delta (append, overwrite, ``replaceWhere``,
    ``MERGE INTO``) on the staging branch. Before publishing, the staged change under the root
    must be Delta commits numbered on from the input's latest version (:func:`check_delta_changes`);
    file-level ``output_mode="replace"`` never applies to it (:func:`check_output_mode`).

    :param root: the table's directory in the repository, e.g. ``tables/events``.
    :param format: the table format; only ``delta``.
    :param allow_removed_data_files: accept data files removed under the root (``VACUUM`` in the
        job). Off by default: a vacuumed file breaks time travel to the versions that referenced
        it, at the published commit.
    """

    root: str
    format: str = "delta"
    allow_removed_data_files: bool = False

    @property
    def prefix(self) -> str:
        """The root as a path prefix: ``tables/events/``."""
        return self.root.strip("/") + "/"

    @property
    def log_prefix(self) -> str:
        """The log directory's prefix: ``tables/events/_delta_log/``."""
        return self.prefix + DELTA_LOG_DIR


@dataclass(frozen=True)
class PathChange:
    """One entry of lakeFS's diff between the input commit and the staged commit.

    :param path: the object's path in the repository.
    :param type: ``added``, ``removed`` or ``changed``.
    """

    path: str
    type: str


@dataclass(frozen=True)
class LogEntry:
    """What a path inside ``_delta_log/`` is.

    :param kind: ``commit``, ``checkpoint``, ``checksum``, ``compaction``, ``last_checkpoint``,
        ``sidecar`` or ``unknown``.
    :param version: the version the name carries (``None`` for ``_last_checkpoint``, sidecars and
        unknown names).
    """

    kind: str
    version: int | None = None


@dataclass(frozen=True)
class DeltaTableChange:
    """The checked change of one declared table.

    :param root: the table root (``tables/events/``).
    :param input_version: the table's latest version at the input commit (``None``: no table there).
    :param new_versions: the versions the staged change adds, ascending and contiguous.
    :param data_files_added: how many data files (outside ``_delta_log/``) were added.
    :param bookkeeping: the checkpoints, checksums and other log files Delta added or rewrote.
    :param directory_markers: S3A directory markers (``<dir>/`` objects) added or removed under the root.
    """

    root: str
    input_version: int | None
    new_versions: tuple[int, ...]
    data_files_added: int = 0
    bookkeeping: tuple[str, ...] = field(default=(), compare=False)
    directory_markers: tuple[str, ...] = field(default=(), compare=False)

    @property
    def published_version(self) -> int | None:
        """The table's latest version once published (the input's when nothing was added)."""
        return self.new_versions[-1] if self.new_versions else self.input_version


def _as_output(table: DeltaTableOutput | str) -> DeltaTableOutput:
    if isinstance(table, DeltaTableOutput):
        return table
    if isinstance(table, str):
        return DeltaTableOutput(table)
    raise InvalidInputError(f"a table output must be a DeltaTableOutput or a path, got {table!r}")


def normalise_table_roots(tables: Sequence[DeltaTableOutput | str] | None) -> tuple[DeltaTableOutput, ...]:
    """The declared tables, validated: non-empty roots, format ``delta``, no root inside another.

    :param tables: ``DeltaTableOutput`` objects or root paths; ``None`` for none.
    :raises InvalidInputError: for a string instead of a list, an empty root, another format, a
        root given twice or one root inside another (a table cannot contain a table).
    """
    if tables is None:
        return ()
    if isinstance(tables, str):
        raise InvalidInputError("output_tables must be a list of tables, not a string")
    result: list[DeltaTableOutput] = []
    for table in (_as_output(t) for t in tables):
        if not isinstance(table.root, str) or not table.root.strip("/"):
            raise InvalidInputError(f"output_tables entry {table.root!r} must be a non-empty path")
        if table.format not in FORMATS:
            raise InvalidInputError(f"table {table.root!r}: format must be one of {FORMATS}, got {table.format!r}")
        if "_delta_log" in table.prefix.split("/"):
            raise InvalidInputError(f"table root {table.root!r} names a _delta_log directory: give the table's root")
        for other in result:
            if table.prefix.startswith(other.prefix) or other.prefix.startswith(table.prefix):
                raise InvalidInputError(
                    f"output_tables entries {other.root!r} and {table.root!r} overlap: a Delta table cannot contain "
                    "another"
                )
        result.append(table)
    return tuple(result)


def check_output_mode(
    output_mode: str, output_prefixes: Iterable[str] | None, tables: Sequence[DeltaTableOutput | str] | None
) -> None:
    """Refuse file-level replacement of a declared table root, before the job.

    ``output_mode="replace"`` deletes, in the staging branch, every object under a declared
    prefix that the attempt did not write. Under a Delta table root that deletes the earlier log
    entries and the data files the new version still references: the published table would be
    unreadable or lose rows. A table's own writes (``mode("overwrite")``, ``replaceWhere``) already
    replace what they should, inside Delta.

    :param output_mode: the attempt's ``output_mode``.
    :param output_prefixes: the declared file prefixes.
    :param tables: the declared Delta tables.
    :raises DeltaOutputModeError: when a replaced prefix is at, above or inside a table root.
    """
    if output_mode != "replace":
        return
    roots = normalise_table_roots(tables)
    for prefix in output_prefixes or ():
        norm = prefix.strip("/") + "/"
        for table in roots:
            if table.prefix.startswith(norm) or norm.startswith(table.prefix):
                where = "is the table's root" if norm == table.prefix else (
                    "contains the table" if table.prefix.startswith(norm) else "lies inside the table"
                )
                raise DeltaOutputModeError(
                    f"output_prefixes entry {prefix!r} {where} {table.root!r}, and output_mode='replace' would "
                    "delete every object there the job did not write: the Delta log's earlier commits and the "
                    "data files the new version still references. Nothing was written. Declare the table only in "
                    "output_tables (Delta's own overwrite/replaceWhere replace rows), and keep file prefixes "
                    "that do not overlap it, or use output_mode='upsert'."
                )


def find_table_roots(paths: Iterable[str]) -> set[str]:
    """The Delta table roots among object paths: every directory holding a ``_delta_log/``.

    For refusing ``output_mode="replace"`` on a prefix that holds an undeclared Delta table.

    :param paths: object paths (for example, the input's objects under the replaced prefixes).
    """
    roots = set()
    for path in paths:
        head, sep, _ = path.partition("/" + DELTA_LOG_DIR)
        if sep:
            roots.add(head + "/")
        elif path.startswith(DELTA_LOG_DIR):
            roots.add("")
    return roots


def refuse_undeclared_tables(replaced: Mapping[str, Iterable[str]]) -> None:
    """Refuse ``output_mode="replace"`` on a prefix that holds a Delta table at the input.

    Declared tables never overlap a replaced prefix (:func:`check_output_mode`), so every table
    found under one is undeclared, and replacing its files would wreck it.

    :param replaced: each replaced prefix and the input's object paths under it.
    :raises DeltaOutputModeError: naming the prefix and the table roots found under it.
    """
    for prefix, paths in replaced.items():
        roots = sorted(find_table_roots(paths))
        if roots:
            raise DeltaOutputModeError(
                f"output_prefixes entry {prefix!r} holds Delta table(s) {roots} at the input commit, and "
                "output_mode='replace' would delete every object there the job did not write: the tables' earlier "
                "log commits and the data files their next version still references. Nothing was written. Declare "
                "the tables in output_tables and keep them out of output_prefixes, or use output_mode='upsert'."
            )


def check_staged_tables(
    lakefs: LakeFSPort,
    repository: str,
    input_commit: str,
    staged_commit: str,
    tables: Sequence[DeltaTableOutput],
    *,
    output_prefixes: Iterable[str] = (),
    staging_branch: str | None = None,
) -> list[DeltaTableChange]:
    """The pre-publish Delta check against lakeFS: one two-dot diff, one log listing per table.

    The diff compares the input commit with the staged commit (both committed: it sees what a
    direct-mode job committed on the staging branch itself as well as what the stage commit
    holds), paged by the port. Each table's latest version at the input comes from listing its
    ``_delta_log/`` there. Nothing changed (staged commit = input): no diff, the input's versions.

    :param lakefs: the lakeFS port.
    :param repository: the repository.
    :param input_commit: the attempt's input commit.
    :param staged_commit: the staged commit.
    :param tables: the declared tables (normalised).
    :param output_prefixes: the declared file prefixes (changes there are not the tables').
    :param staging_branch: named in the messages as the evidence kept.
    :return: each table's checked change, in declaration order.
    :raises DeltaLogError: when the staged change is not Delta commits on from the input.
    """
    input_versions = {
        t.prefix: latest_version(lakefs.list_objects(repository, input_commit, t.log_prefix), t) for t in tables
    }
    if staged_commit == input_commit:
        return [DeltaTableChange(t.prefix, input_versions[t.prefix], ()) for t in tables]
    changes = [
        PathChange(c.path, c.type)
        for c in lakefs.diff_refs(repository, input_commit, staged_commit, limit=10**9)
    ]
    return check_delta_changes(
        changes, tables, input_versions, output_prefixes=output_prefixes, staging_branch=staging_branch
    )


def classify_log_entry(name: str) -> LogEntry:
    """What a path relative to ``_delta_log/`` is.

    :param name: e.g. ``00000000000000000003.json`` or ``_last_checkpoint``.
    """
    for kind, pattern in _LOG_PATTERNS:
        match = pattern.fullmatch(name)
        if match:
            version = match.groupdict().get("version")
            return LogEntry(kind, int(version) if version is not None else None)
    return LogEntry("unknown")


def latest_version(log_paths: Iterable[str], table: DeltaTableOutput | str | None = None) -> int | None:
    """The latest version of a table: the highest ``_delta_log/<v>.json``.

    Checkpoints, checksums and ``_last_checkpoint`` carry no version of their own (a checkpoint of
    version ``v`` follows the commit ``v``); they count only when no commit file is left (a log
    whose older commits were cleaned up after a checkpoint still has its latest commit).

    :param log_paths: paths of the log's objects (``tables/t/_delta_log/...`` when ``table`` is
        given, else names relative to ``_delta_log/`` or full paths containing it).
    :param table: the table whose log the paths belong to (filters other paths out).
    :return: the version, or ``None`` when there is no Delta table (no commit, no checkpoint).
    """
    prefix = _as_output(table).log_prefix if table is not None else None
    commits: list[int] = []
    checkpoints: list[int] = []
    for path in log_paths:
        if prefix is not None:
            if not path.startswith(prefix):
                continue
            name = path[len(prefix) :]
        else:
            name = path.rpartition("/" + DELTA_LOG_DIR)[2] if "/" + DELTA_LOG_DIR in path else path
            name = name.removeprefix(DELTA_LOG_DIR)
        entry = classify_log_entry(name)
        if entry.kind == "commit" and entry.version is not None:
            commits.append(entry.version)
        elif entry.kind == "checkpoint" and entry.version is not None:
            checkpoints.append(entry.version)
    if commits:
        return max(commits)
    return max(checkpoints) if checkpoints else None


def _where(staging_branch: str | None) -> str:
    if staging_branch:
        return f"nothing was published; the staged output is kept in staging branch {staging_branch!r}"
    return "nothing was published"


def check_delta_changes(
    changes: Iterable[PathChange | tuple[str, str]],
    tables: Sequence[DeltaTableOutput | str],
    input_versions: Mapping[str, int | None],
    *,
    output_prefixes: Iterable[str] = (),
    staging_branch: str | None = None,
) -> list[DeltaTableChange]:
    """Check the staged change against the declared tables; return each table's new versions.

    Accepted under a table root: commits ``N+1, N+2, ...`` (contiguous, on from the input's latest
    version ``N``; from 0 for a table the input does not have), data files added, and Delta's
    bookkeeping (checkpoints, checksums, compaction files, sidecars added; ``_last_checkpoint``
    added or changed). Refused: an earlier commit changed or removed, a gap, a version at or below
    ``N``, a data file changed (Delta never rewrites a file in place), a data file removed (unless
    the table allows it), bookkeeping removed, an unknown file in the log, files written under a
    root without any new commit, and any change outside every declared root and prefix.

    The same check holds whether the publish merges or replaces an abandoned publication: both
    compare the staged commit with the attempt's input, so a replacement publishes one ``N+1`` —
    the new try's — never two, never a gap.

    :param changes: the diff between the input commit and the staged commit (``PathChange`` or
        ``(path, type)``).
    :param tables: the declared tables.
    :param input_versions: each table root's (``DeltaTableOutput.prefix`` or ``root``) latest
        version at the input commit, from :func:`latest_version`; a missing root means "no table".
    :param output_prefixes: other declared (file) prefixes; changes under them are not checked here.
    :param staging_branch: named in the messages as the evidence kept.
    :raises DeltaLogError: naming the table, the path and what to do.
    :raises InvalidInputError: for invalid declarations or an unknown change type.
    """
    roots = normalise_table_roots(tables)
    prefixes = tuple(p.strip("/") + "/" for p in output_prefixes)
    versions = {_as_output(k).prefix: v for k, v in input_versions.items()}
    by_table: dict[str, list[PathChange]] = {t.prefix: [] for t in roots}
    outside: list[str] = []
    for raw in changes:
        change = raw if isinstance(raw, PathChange) else PathChange(*raw)
        if change.type not in CHANGE_TYPES:
            raise DeltaLogError(
                f"unexpected diff entry {change.type!r} for {change.path!r}; {_where(staging_branch)}",
                staging_branch=staging_branch,
            )
        table = next((t for t in roots if change.path.startswith(t.prefix)), None)
        if table is not None:
            by_table[table.prefix].append(change)
        elif not (prefixes and change.path.startswith(prefixes)):
            outside.append(change.path)
    if outside:
        declared = [t.root for t in roots] + list(prefixes)
        raise DeltaLogError(
            f"the job changed paths outside the declared tables and prefixes {declared}: {sorted(outside)[:10]}; "
            f"{_where(staging_branch)}. Fix the job's output paths or declare the table or prefix, then clear "
            "the task.",
            staging_branch=staging_branch,
        )
    return [
        _check_table(table, by_table[table.prefix], versions.get(table.prefix), staging_branch) for table in roots
    ]


def _check_table(
    table: DeltaTableOutput, changes: list[PathChange], input_version: int | None, staging_branch: str | None
) -> DeltaTableChange:
    def fail(what: str, todo: str) -> DeltaLogError:
        return DeltaLogError(
            f"Delta table {table.root!r} (version {input_version} at the input commit): {what}; "
            f"{_where(staging_branch)}. {todo}",
            staging_branch=staging_branch,
            table_root=table.root,
        )

    new_versions: list[int] = []
    data_added = 0
    bookkeeping: list[str] = []
    markers: list[str] = []
    for change in sorted(changes, key=lambda c: c.path):
        rel = change.path[len(table.prefix) :]
        if change.path.endswith("/"):
            # An S3A directory marker (a zero-byte "<dir>/" object: Delta creates _delta_log/ and,
            # from 4.x, _delta_log/_staged_commits/ with mkdirs). Nothing reads it as table content.
            markers.append(change.path)
            continue
        if not rel.startswith(DELTA_LOG_DIR):
            if change.type == "added":
                data_added += 1
            elif change.type == "changed":
                raise fail(
                    f"data file {change.path!r} was rewritten in place (Delta never does)",
                    "Write the table only through Delta, then clear the task.",
                )
            elif not table.allow_removed_data_files:
                raise fail(
                    f"data file {change.path!r} was removed (VACUUM or a file-level delete)",
                    "Readers of the published commit could not time-travel to the versions that reference it. "
                    "Run VACUUM in a task whose table declares allow_removed_data_files=True, then clear the task.",
                )
            continue
        entry = classify_log_entry(rel[len(DELTA_LOG_DIR) :])
        if entry.kind == "commit":
            assert entry.version is not None
            if change.type != "added":
                raise fail(
                    f"log entry {change.path!r} (version {entry.version}) was {change.type}; a Delta version "
                    "may exist once and is never rewritten or deleted",
                    "If Delta's log clean-up removed it, set the table property "
                    "delta.enableExpiredLogCleanup=false (lakeFS commits keep the history); otherwise find what "
                    "rewrote the log, then clear the task.",
                )
            if input_version is not None and entry.version <= input_version:
                raise fail(
                    f"log entry {change.path!r} adds version {entry.version}, which the input already has",
                    "The job must append to the table as it is at the input commit; clear the task.",
                )
            new_versions.append(entry.version)
        elif entry.kind in _BOOKKEEPING:
            if change.type == "removed":
                raise fail(
                    f"log file {change.path!r} ({entry.kind}) was removed",
                    "If Delta's log clean-up removed it, set the table property delta.enableExpiredLogCleanup="
                    "false (lakeFS commits keep the history), then clear the task.",
                )
            if change.type == "changed" and entry.kind != "last_checkpoint":
                raise fail(
                    f"log file {change.path!r} ({entry.kind}) was rewritten",
                    "Find what rewrote the log, then clear the task.",
                )
            bookkeeping.append(change.path)
        else:
            raise fail(
                f"{change.path!r} is not a file of Delta's log this check knows (commit, checkpoint, checksum, "
                "_last_checkpoint, compaction, sidecar)",
                "Coordinated or catalog-managed commits are not supported by the fence; write the table with "
                "filesystem commits, then clear the task.",
            )
    new_versions.sort()
    first = 0 if input_version is None else input_version + 1
    expected = list(range(first, first + len(new_versions)))
    if new_versions != expected:
        raise fail(
            f"the staged log adds versions {new_versions}, not contiguous on from {first} ({expected})",
            "A version is missing or was written twice: write the table only through Delta from the input "
            "commit, then clear the task.",
        )
    if not new_versions and (data_added or bookkeeping):
        raise fail(
            f"{data_added} data file(s) and {len(bookkeeping)} log file(s) were written but no Delta commit was",
            "A Delta write failed after writing its files, or files were written beside Delta: fix the job, "
            "then clear the task.",
        )
    return DeltaTableChange(
        table.prefix, input_version, tuple(new_versions), data_added, tuple(bookkeeping), tuple(markers)
    )
