"""One poke of each lakeFS sensor: the code both poke mode and the triggers run.

Each probe is synchronous and bounded (at most two lakeFS calls, whatever the history depth); the
sensors call it in the worker, the triggers call it in a thread of the triggerer (``asyncio.to_thread``), so both modes
share every decision. Airflow is asked through an :class:`~airflow_lakefence.airflow_adapter.task_instances.AirflowView`
(:class:`~airflow_lakefence.airflow_adapter.task_instances.TaskSdkView`: Task SDK calls that work in both places).
"""

from __future__ import annotations

from airflow_lakefence.airflow_adapter.task_instances import AirflowView, state_from_task_states
from airflow_lakefence.core.fences.publish import HeadState
from airflow_lakefence.core.fences.scope import is_race_revert, surviving
from airflow_lakefence.core.names.staging_names import staging_branch_prefix
from airflow_lakefence.core.publication.abandonment import (
    Judgement,
    PublisherScope,
    PublisherState,
    judge,
    needs_output_ref,
    needs_staging_listing,
    needs_supersedes,
    newest_try,
    nothing_written,
    output_stands_behind,
    publication_of,
)
from airflow_lakefence.exceptions import InputRefError, LakeFSNotFoundError
from airflow_lakefence.lakefs_adapter.client import LakeFSClient

#: How many commits under the write set the scoped probe reads when the newest is a race loser's revert.
PAST_RACES = 20


def probe_abandoned(
    client: LakeFSClient,
    airflow: AirflowView,
    *,
    repository: str,
    branch: str,
    scope: PublisherScope | None,
    staging_prefix: str,
    output_prefixes: tuple[str, ...] = (),
) -> Judgement:
    """Judge the HEAD of ``branch`` (or, with ``output_prefixes``, the latest publication touching them).

    lakeFS calls: one ``get_commit`` of the branch; with ``output_prefixes`` one ``log`` of the branch
    restricted to them (``amount=1``) instead, plus one ``get_commit`` of the task instance's
    ``output_ref`` when it has one (to tie it to the judged staged commit). Plus one staging-branch
    listing only when the publishing task instance is live (to tell its own try from a newer one).

    Airflow calls: one ``get_task_states`` for a publication, plus one XCom read when the task
    instance succeeded or is pending (``output_ref``), or when a newer try is running (``supersedes``).

    :param client: the lakeFS adapter.
    :param airflow: how to ask Airflow.
    :param repository: the repository.
    :param branch: the watched branch.
    :param scope: restrict to one publisher, or ``None``.
    :param staging_prefix: the publisher's staging branch prefix.
    :param output_prefixes: the scoped publisher's write set (normalised), empty to judge HEAD.
    :raises InputRefError: if the repository or branch does not exist.
    :raises LakeFSError: for another lakeFS failure.
    """
    try:
        if output_prefixes:
            found = client.log_commits(repository, branch, prefixes=output_prefixes, amount=1)
            if found and is_race_revert(found[0]):
                # A race loser took its merge back: the publication the write set holds lies further
                # down (one more call, only then).
                found = surviving(client.log_commits(repository, branch, prefixes=output_prefixes, amount=PAST_RACES))
            if not found:
                return nothing_written(output_prefixes)
            commit = found[0]
        else:
            commit = client.get_commit(repository, branch)
    except LakeFSNotFoundError as exc:
        raise InputRefError(f"branch {branch!r} not found in repository {repository!r}") from exc
    head = HeadState.of(commit)
    first = publication_of(head, scope, output_prefixes)
    if isinstance(first, Judgement):
        return first
    key = first.attempt.key
    state = state_from_task_states(airflow.task_states(key.dag_id, [key.task_id], [key.run_id]), key)
    output_ref = None
    matches = None
    if needs_output_ref(state):
        value = airflow.output_ref(key)
        output_ref = value if isinstance(value, str) else None
        if output_prefixes:
            matches = output_ref is not None and (
                output_ref == head.commit_id
                or output_stands_behind(first, _metadata_or_none(client, repository, output_ref))
            )
    newest = None
    if needs_staging_listing(state):
        own = staging_branch_prefix(key, staging_prefix)
        names = [name for name, _ in client.list_branches(repository, own, show_hidden=True)]
        newest = newest_try(names, key, staging_prefix)
    supersedes = None
    if needs_supersedes(state, first, newest):
        value = airflow.supersedes(key)
        supersedes = value if isinstance(value, dict) else None
    return judge(head, first, PublisherState(state, output_ref, newest, supersedes, matches), output_prefixes)


def _metadata_or_none(client: LakeFSClient, repository: str, ref: str) -> dict[str, str] | None:
    """A commit's metadata, ``None`` when it does not exist (an ``output_ref`` from another repository)."""
    try:
        return dict(client.get_commit(repository, ref).metadata)
    except LakeFSNotFoundError:
        return None


def probe_new_commit(
    client: LakeFSClient, *, repository: str, branch: str, since_ref: str, prefix: str | None
) -> str | None:
    """Return ``branch``'s HEAD when it moved away from ``since_ref`` (and, with ``prefix``, the
    content under ``prefix`` differs), else ``None``. At most two lakeFS calls.

    :param client: the lakeFS adapter.
    :param repository: the repository.
    :param branch: the watched branch.
    :param since_ref: the commit (or ref) to compare with.
    :param prefix: only changes under this path prefix count.
    :raises InputRefError: if the repository, branch or ``since_ref`` does not exist.
    """
    try:
        head = client.get_commit(repository, branch).id
        if head == since_ref:
            return None
        if prefix:
            changed = client.diff_refs(repository, since_ref, head, prefix=prefix, diff_type="two_dot", limit=1)
            return head if changed else None
        since = client.get_commit(repository, since_ref).id
    except LakeFSNotFoundError as exc:
        raise InputRefError(f"branch {branch!r} or ref {since_ref!r} not found in repository {repository!r}") from exc
    return head if since != head else None


def probe_object(
    client: LakeFSClient,
    *,
    repository: str,
    ref: str,
    path: str | None,
    prefix: str | None,
    uncommitted: bool = False,
) -> str | None:
    """Return the commit ``ref`` points at when ``path`` (or anything under ``prefix``) exists there,
    else ``None``. Two lakeFS calls: the ref is resolved first, so the object is looked up in the
    very commit that is reported.

    :param client: the lakeFS adapter.
    :param repository: the repository.
    :param ref: a branch, tag or commit.
    :param path: an object path; or
    :param prefix: a path prefix.
    :param uncommitted: look ``path`` up on the branch itself, uncommitted objects included (as
        airflow-provider-lakefs's sensor does); the commit reported is then the branch's HEAD after
        the object was found, which need not hold it yet.
    :raises InputRefError: if the repository or ref does not exist.
    """
    if uncommitted and path:
        try:
            client.stat_object(repository, ref, path)
        except LakeFSNotFoundError:
            return None
        try:
            return client.get_commit(repository, ref).id
        except LakeFSNotFoundError as exc:
            raise InputRefError(f"ref {ref!r} not found in repository {repository!r}") from exc
    try:
        commit = client.get_commit(repository, ref).id
    except LakeFSNotFoundError as exc:
        raise InputRefError(f"ref {ref!r} not found in repository {repository!r}") from exc
    if path:
        try:
            client.stat_object(repository, commit, path)
        except LakeFSNotFoundError:
            return None
        return commit
    return commit if client.list_objects_page(repository, commit, prefix or "", amount=1) else None
