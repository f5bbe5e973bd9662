"""Example: a daily partition published into lakeFS with the scoped fence, so dates run in parallel.

``@task.lakefs_publish`` (input: main, pinned per run) writes ``tables/events_per_day/date=<ds>/`` -> the
settled gate on that partition -> a task reading the partition at the published commit.

Each run declares what it writes (its date's partition, ``output_prefixes``) and what it reads
(``input_prefixes``). The publish fence then accepts a ``main`` that other runs moved meanwhile, as
long as nothing under those prefixes changed: a backfill of many dates runs them side by side, each
publishing its own partition, with no 1-slot pool and no ``depends_on_past``. Two runs writing one
partition still serialise: the second finds its partition changed and fails closed, keeping its
staging branch (see docs/howto/many-writers.md). The repository name comes from
``LAKEFENCE_EXAMPLE_REPOSITORY``; ``dags_examples/run_demo.py`` seeds its ``events/`` table.
"""

from __future__ import annotations

# [START lakefence_partitioned_example]
import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG, Asset, task

from airflow_lakefence.sensors import AbandonedPublicationSensor

REPOSITORY = os.environ.get("LAKEFENCE_EXAMPLE_REPOSITORY", "example-repo")
TARGET = "main"
TABLE = "tables/events_per_day/"
# The write set: this run's date partition only (rendered per run).
PARTITION = TABLE + "date={{ ds }}/"
# The read set: what the job reads from the input commit.
EVENTS = "events/"
EVENTS_PER_DAY = Asset(f"lakefs://{REPOSITORY}/{TARGET}/{TABLE}")

with DAG(
    "lakefence_example_partitioned_counts",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    # How many dates of a backfill run at once: the scoped fence needs no serialisation.
    max_active_runs=8,
    tags=["lakefence", "example"],
) as dag:
    # No depends_on_past: each date builds on whatever main holds when its first try starts (the
    # input, by default: main's HEAD, pinned for the run's retries).
    @task.lakefs_publish(
        repository=REPOSITORY,
        target_branch=TARGET,
        fence_scope="prefixes",
        output_prefixes=[PARTITION],
        input_prefixes=[EVENTS],
        commit_message="events per day, {{ ds }}",
        commit_metadata={"pipeline": "events_per_day"},
        outlets=[EVENTS_PER_DAY],
        # No pool shared by the branch's writers. To bound the load, give the table its own pool
        # (pool="tables_events_per_day", as many slots as dates to write at once).
        retries=2,
        retry_delay=timedelta(seconds=10),
    )
    def events_per_day(lakefence: Any, ds: str | None = None) -> int:
        """Count the input's events of the run's date into its partition; return the count."""
        import io

        import pandas as pd

        client, repo, commit = lakefence.client, lakefence.repository, lakefence.input_commit
        events = pd.concat(
            pd.read_parquet(io.BytesIO(client.read_object(repo, commit, path)))
            for path in client.list_objects(repo, commit, EVENTS)
        )
        day = events[events["day"] == ds]
        out = lakefence.workspace / TABLE / f"date={ds}"
        out.mkdir(parents=True)
        pd.DataFrame({"day": [ds], "events": [len(day)], "users": [day["user"].nunique()]}).to_parquet(
            out / "part-00000.parquet", index=False
        )
        return len(day)

    publish = events_per_day()

    # Readers of the partition wait until the latest publication touching it is settled, whatever
    # other dates publish on top of it meanwhile.
    partition_settled = AbandonedPublicationSensor(
        task_id="partition_settled",
        repository=REPOSITORY,
        branch=TARGET,
        condition="settled",
        output_prefixes=[PARTITION],
        mode="reschedule",
        poke_interval=30,
        timeout=timedelta(hours=1),
    )

    @task
    def report(output_ref: str, ds: str | None = None) -> dict[str, int]:
        """Read the date's partition at the exact commit the fenced task reported."""
        import io

        import pandas as pd

        from airflow_lakefence.hooks.lakefs import LakeFSHook

        client = LakeFSHook().client
        data = client.read_object(REPOSITORY, output_ref, f"{TABLE}date={ds}/part-00000.parquet")
        row = pd.read_parquet(io.BytesIO(data)).iloc[0]
        return {"events": int(row["events"]), "users": int(row["users"])}

    publish >> partition_settled >> report(publish)
# [END lakefence_partitioned_example]
