"""Example: a pandas aggregate published into lakeFS by a fenced TaskFlow task (no Spark).

``@task.lakefs_publish`` function (pandas; its input: main, pinned once per run) -> a task reading the commit.

The function reads the pinned input commit and writes parquet files into its workspace; the
operator uploads them into a private staging branch and publishes them into ``main`` with the same
fences and decisions as the Spark operator (a crashed try's publication is replaced, a foreign
commit on ``main`` fails closed). The repository name comes from ``LAKEFENCE_EXAMPLE_REPOSITORY``;
``dags_examples/run_demo.py`` seeds its ``events/`` table.
"""

from __future__ import annotations

# [START lakefence_python_example]
import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG, Asset, task

REPOSITORY = os.environ.get("LAKEFENCE_EXAMPLE_REPOSITORY", "example-repo")
TARGET = "main"
OUTPUT_PREFIX = "tables/users_per_day/"
USERS_PER_DAY = Asset(f"lakefs://{REPOSITORY}/{TARGET}/{OUTPUT_PREFIX}")

with DAG(
    "lakefence_example_users_per_day",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["lakefence", "example"],
) as dag:
    @task.lakefs_publish(
        repository=REPOSITORY,
        target_branch=TARGET,  # also the input: main's HEAD, pinned by the run's first try
        output_prefixes=[OUTPUT_PREFIX],
        commit_message="users per day, run {{ run_id }}",
        commit_metadata={"pipeline": "users_per_day"},
        outlets=[USERS_PER_DAY],
        # One writer per target branch: every DAG that publishes into main shares this 1-slot pool.
        pool=f"lakefs_{REPOSITORY}_{TARGET}",
        retries=2,
        retry_delay=timedelta(seconds=10),
    )
    def users_per_day(lakefence: Any) -> None:
        """Count distinct users per day; ``lakefence`` says where to read and write."""
        import io

        import pandas as pd

        client, repo, commit = lakefence.client, lakefence.repository, lakefence.input_commit
        parts = [
            pd.read_parquet(io.BytesIO(client.read_object(repo, commit, path)))
            for path in client.list_objects(repo, commit, "events/")
        ]
        users = pd.concat(parts).groupby("day")["user"].nunique().rename("users").reset_index()
        out = lakefence.workspace / OUTPUT_PREFIX
        out.mkdir(parents=True)
        users.to_parquet(out / "part-00000.parquet", index=False)

    publish = users_per_day()

    @task
    def report(output_ref: str) -> dict[str, int]:
        """Read the published table at the exact commit the fenced task reported."""
        import io

        import pandas as pd

        from airflow_lakefence.hooks.lakefs import LakeFSHook

        client = LakeFSHook().client
        data = client.read_object(REPOSITORY, output_ref, f"{OUTPUT_PREFIX}part-00000.parquet")
        table = pd.read_parquet(io.BytesIO(data))
        return {str(row.day): int(row.users) for row in table.itertuples()}

    report(publish)
# [END lakefence_python_example]
