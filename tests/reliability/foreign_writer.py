"""A foreign writer: another process writing to the target branch at chosen moments.

``python -m tests.reliability.foreign_writer SPEC.json`` (or forked by the fork server). The spec:
``registry`` (path), ``url``, ``access_key_id``, ``secret_access_key``, ``repository``, ``target``
and either

* ``schedule`` (seconds after try 1, or ``epoch_who``, starts executing) with one ``style`` for every write, or
* ``steps``: ``[{"after": [who, what, point], "action": ...}]``, each run once the timeline shows
  that event (an interleaving chosen exactly).

Actions (styles):

* ``commit``: upload an object straight onto the target and commit it (the target is briefly
  dirty, as with any writer that uses the branch's staging area);
* ``merge``: write on a private branch created from the target, commit, merge into the target
  (how a well-behaved pipeline writes);
* ``upload``: upload onto the target without committing (leave it dirty); ``commit_staged``:
  commit what is staged there.

Writes go to ``foreign/<n>.txt`` unless ``paths`` (schedule: one per write; steps: a step's ``path``)
names another path (e.g. inside a publication's read set).

Each acknowledged commit is recorded on the registry's timeline as ``foreign_commit`` with its id
and first parent; a refused write as ``foreign_failed``; an upload as ``foreign_upload``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import lakefs

from tests.reliability.registry import AttemptRegistry


def _act(
    registry: AttemptRegistry, repo: lakefs.Repository, target_id: str, n: int, action: str, path: str | None = None
) -> None:
    target = repo.branch(target_id)
    path = path or f"foreign/{n}.txt"
    try:
        if action == "upload":
            target.object(path).upload(f"foreign {n}".encode(), pre_sign=False)
            registry.record("foreign", "foreign_upload", {"n": n, "path": path})
            return
        if action in ("commit", "commit_staged"):
            if action == "commit":
                target.object(path).upload(f"foreign {n}".encode(), pre_sign=False)
            commit = target.commit(f"foreign commit {n}", metadata={"writer": "foreign"}).get_commit()
        else:
            side = repo.branch(f"foreign-{n}").create(target_id)
            side.object(path).upload(f"foreign {n}".encode(), pre_sign=False)
            side.commit(f"foreign change {n}", metadata={"writer": "foreign"})
            merged = side.merge_into(target, message=f"foreign merge {n}", metadata={"writer": "foreign"})
            commit = repo.commit(merged).get_commit()
            side.delete()
    except Exception as exc:  # a refused write is part of the scenario, not a harness failure
        registry.record("foreign", "foreign_failed", {"n": n, "error": f"{type(exc).__name__}: {exc}"})
        return
    registry.record("foreign", "foreign_commit", {"n": n, "id": commit.id, "parent": commit.parents[0], "path": path})


def run(spec: dict[str, Any]) -> None:
    """Write as the spec says."""
    registry = AttemptRegistry(spec["registry"])
    client = lakefs.Client(host=spec["url"], username=spec["access_key_id"], password=spec["secret_access_key"])
    repo = lakefs.Repository(spec["repository"], client=client)
    if "steps" in spec:
        for n, step in enumerate(spec["steps"]):
            registry.wait_for(*step["after"])
            _act(registry, repo, spec["target"], n, step["action"], step.get("path"))
        return
    epoch = registry.wait_for(spec.get("epoch_who", "try1"), "start")
    paths = spec.get("paths") or []
    for n, offset in enumerate(spec["schedule"]):
        time.sleep(max(0.0, epoch + offset - time.time()))
        _act(registry, repo, spec["target"], n, spec.get("style", "commit"), paths[n] if n < len(paths) else None)


def main() -> None:
    with open(sys.argv[1]) as fd:
        run(json.load(fd))


if __name__ == "__main__":
    main()
