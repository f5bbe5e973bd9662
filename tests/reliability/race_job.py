"""The reliability tests' Spark application (run by the fake spark-submit, no JVM).

Spec keys (JSON in ``argv[1]`` after ``spec=``):

* ``files``: ``{path: text}`` written as they are; ``first_try_files``: the same, on try 1 only;
* ``stamp_path``: a file whose content is this attempt's staging branch name (same path on every
  try, so two tries' outputs conflict, like a table rewritten in place);
* ``part_prefix``: a file ``<prefix>part-<staging branch>.txt`` (a name unique to the attempt, like
  Spark's ``part-<uuid>`` files: two tries' outputs do *not* conflict and would add up);
* ``stamp_paths``, ``part_prefixes``: the same for several paths / prefixes (one per write prefix);
* ``sleep``: seconds to sleep before writing; ``fail``: exit 3;
* ``dump_argv``: write ``debug/argv.json`` (this process's argv) and ``debug/env_has_secret.txt``;
* ``print_secret``: print the secret from the environment (a canary: shows whether a log is masked).

Workspace mode writes under the workspace directory; direct mode uploads into the staging branch
through the lakefs SDK with the credentials the operator put in the environment.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from airflow_lakefence.spark import lakefence_locations

# Run as a script; the writer is tests/jobs/write_job.py's.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))
from write_job import write_output


def main() -> None:
    spec = json.loads(sys.argv[1].removeprefix("spec=")) if len(sys.argv) > 1 else {}
    loc = lakefence_locations()
    time.sleep(float(spec.get("sleep", 0)))
    if spec.get("print_secret"):
        print("CANARY", os.environ.get("LAKEFS_SECRET_ACCESS_KEY"))
    if spec.get("fail"):
        print("race_job failing on purpose", file=sys.stderr)
        sys.exit(3)
    files = dict(spec.get("files", {}))
    staging = loc.staging_branch or "read-only"
    if "-t1-" in staging:
        files.update(spec.get("first_try_files", {}))
    if spec.get("stamp_path"):
        files[spec["stamp_path"]] = staging
    if spec.get("part_prefix"):
        files[f"{spec['part_prefix']}part-{staging}.txt"] = staging
    for path in spec.get("stamp_paths", []):
        files[path] = staging
    for prefix in spec.get("part_prefixes", []):
        files[f"{prefix}part-{staging}.txt"] = staging
    if spec.get("dump_argv"):
        files["debug/argv.json"] = json.dumps(sys.argv)
        files["debug/env_has_secret.txt"] = str(bool(os.environ.get("LAKEFS_SECRET_ACCESS_KEY")))
    write_output(loc, files)
    print("RACE-JOB-DONE", loc.write_mode, len(files))


if __name__ == "__main__":
    main()
