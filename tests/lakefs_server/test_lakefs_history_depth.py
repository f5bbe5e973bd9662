"""Server-internal: head, commit, merge and diff(amount=1) do not walk history.

The server counts commit records and tree rows it reads. Those counts per call must be the
same with 10 and with 1,000 commits of history: deterministic, not timed.
"""

from __future__ import annotations

from collections.abc import Callable

import lakefs
import pytest

from lakefence_testing.controls import Controls

pytestmark = pytest.mark.lakefs_local_only


def _grow(branch: lakefs.Branch, depth: int) -> None:
    for _ in range(depth - len(list(branch.log(max_amount=depth)))):
        branch.commit("filler", allow_empty=True)
    assert len(list(branch.log(max_amount=depth + 1))) >= depth


def _reads_per_call(
    repo: lakefs.Repository, client: lakefs.Client, controls: Controls, round_id: int
) -> dict[str, dict[str, int]]:
    # The high-level SDK's max_amount does not reach the server (it trims a 100-item page):
    # page sizes go through lakefs_sdk.
    refs = client.sdk_client.refs_api
    main = repo.branch("main")
    feature = repo.branch(f"feature-{round_id}").create("main")
    for i in range(3):
        feature.object(f"data/{i}").upload(f"{round_id}-{i}")

    def measure(call: Callable[[], object]) -> dict[str, int]:
        controls.reset_counts()
        call()
        return controls.stats()

    results = {
        "head": measure(lambda: main.head),
        "get_commit": measure(main.get_commit),
        "log_1": measure(lambda: refs.log_commits(repo.id, "main", amount=1)),
        "commit": measure(lambda: feature.commit(f"work {round_id}")),
        "diff_two_dot_1": measure(lambda: refs.diff_refs(repo.id, "main", feature.id, type="two_dot", amount=1)),
        "diff_three_dot_1": measure(lambda: refs.diff_refs(repo.id, "main", feature.id, amount=1)),
        "merge": measure(lambda: feature.merge_into(main)),
    }
    assert [o.path for o in main.objects(prefix="data/")] == ["data/0", "data/1", "data/2"]
    return results


def test_per_call_reads_do_not_grow_with_history(
    lakefence_repo: lakefs.Repository, lakefence_client: lakefs.Client, lakefence_controls: Controls
) -> None:
    main = lakefence_repo.branch("main")
    for i in range(3):
        main.object(f"data/{i}").upload("initial")
    main.commit("initial data")
    _grow(main, 10)
    shallow = _reads_per_call(lakefence_repo, lakefence_client, lakefence_controls, 1)
    _grow(main, 1000)
    deep = _reads_per_call(lakefence_repo, lakefence_client, lakefence_controls, 2)
    assert deep == shallow
    assert all(stats.get("commit_reads", 0) <= 6 for stats in deep.values()), deep
