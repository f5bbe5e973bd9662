"""A test job: writes what a JSON spec says into the attempt's output location.

Spec keys: ``files`` ({path: text}); ``first_try_files`` (only on try 1); ``stamp_path`` (a file
whose content is the attempt's staging branch name); ``generate`` ({"prefix", "count", "size"});
``dump_argv`` (write argv and whether the secret is in the environment); ``sleep`` (seconds);
``fail`` (exit 3); ``print_env`` (print the LAKEFENCE_* environment).
In direct mode the files go straight into the staging branch through the lakefs SDK, with the
credentials the operator put in the environment; in workspace mode into the local workspace.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from airflow_lakefence.spark import lakefence_locations


def main() -> None:
    spec = json.loads(sys.argv[1].removeprefix("spec=")) if len(sys.argv) > 1 else {}
    loc = lakefence_locations()
    if spec.get("print_env"):
        print("JOB-ENV", json.dumps({k: v for k, v in os.environ.items() if k.startswith("LAKEFENCE_")}))
        print("JOB-ARGV", json.dumps(sys.argv))
    time.sleep(float(spec.get("sleep", 0)))
    if spec.get("fail"):
        print("job failing on purpose", file=sys.stderr)
        sys.exit(3)
    files = dict(spec.get("files", {}))
    if loc.staging_branch and "-t1-" in loc.staging_branch:
        files.update(spec.get("first_try_files", {}))
    if spec.get("dump_argv"):  # what the job was started with, for the secret tests
        files["debug/argv.json"] = json.dumps(sys.argv)
        files["debug/has_secret.txt"] = str(bool(os.environ.get("LAKEFS_SECRET_ACCESS_KEY")))
    stamp = spec.get("stamp_path")
    if stamp:  # content unique to this attempt: its staging branch name
        files[stamp] = loc.staging_branch or "read-only"
    gen = spec.get("generate")
    if gen:
        body = "x" * int(gen.get("size", 10))
        for n in range(int(gen["count"])):
            files[f"{gen['prefix']}part-{n:05d}.txt"] = body
    write_output(loc, files)
    print("JOB-DONE", loc.write_mode, len(files))


def write_output(loc: Any, files: dict[str, str]) -> None:
    """Write ``files`` where the attempt's output goes: the workspace, or (direct mode) the staging
    branch through the lakefs SDK with the credentials the operator put in the environment."""
    if loc.write_mode == "workspace":
        for path, text in files.items():
            target = loc.output_path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    elif loc.write_mode == "direct":
        import lakefs

        client = lakefs.Client(
            host=loc.endpoint,
            username=os.environ["LAKEFS_ACCESS_KEY_ID"],
            password=os.environ["LAKEFS_SECRET_ACCESS_KEY"],
        )
        branch = lakefs.Repository(loc.repository, client=client).branch(loc.staging_branch)
        for path, text in files.items():
            branch.object(path).upload(text.encode(), pre_sign=False)


if __name__ == "__main__":
    main()
