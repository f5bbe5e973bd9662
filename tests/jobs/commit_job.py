"""A direct-mode test job that commits its own output on the staging branch (the engine must
still publish exactly what the branch holds).

Spec keys: ``files`` ({path: text}) uploaded into the staging branch and committed there by the
job itself; ``uncommitted`` ({path: text}) uploaded after that commit and left uncommitted.
"""

from __future__ import annotations

import json
import os
import sys

import lakefs

from airflow_lakefence.spark import lakefence_locations


def main() -> None:
    spec = json.loads(sys.argv[1].removeprefix("spec=")) if len(sys.argv) > 1 else {}
    loc = lakefence_locations()
    client = lakefs.Client(
        host=loc.endpoint,
        username=os.environ["LAKEFS_ACCESS_KEY_ID"],
        password=os.environ["LAKEFS_SECRET_ACCESS_KEY"],
    )
    branch = lakefs.Repository(loc.repository, client=client).branch(loc.staging_branch)
    for path, text in spec.get("files", {}).items():
        branch.object(path).upload(text.encode(), pre_sign=False)
    branch.commit("the job's own commit")
    for path, text in spec.get("uncommitted", {}).items():
        branch.object(path).upload(text.encode(), pre_sign=False)
    print("JOB-DONE committed", len(spec.get("files", {})))


if __name__ == "__main__":
    main()
