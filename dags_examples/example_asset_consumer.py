"""Example: a downstream DAG scheduled on the Asset the fenced publication emits.

Each event carries the exact commit that was published (``output_ref``) in its extra, so the
consumer reads that commit, not whatever the branch points at when it runs.
"""

from __future__ import annotations

# [START lakefence_asset_consumer]
import os

import pendulum
from airflow.providers.common.compat.sdk import DAG, Asset, task

REPOSITORY = os.environ.get("LAKEFENCE_EXAMPLE_REPOSITORY", "example-repo")
DAILY_COUNTS = Asset(f"lakefs://{REPOSITORY}/main/tables/daily_counts/")

with DAG(
    "lakefence_example_daily_counts_consumer",
    schedule=[DAILY_COUNTS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["lakefence", "example"],
) as dag:

    @task
    def published_commits(**context: object) -> list[str]:
        """The commits the triggering publications made, oldest first."""
        events = context["triggering_asset_events"][DAILY_COUNTS]  # type: ignore[index]
        commits = [event.extra["output_ref"] for event in events]
        for event in events:
            print(f"{event.extra['decision']} of {event.extra['commit_uri']} (input {event.extra['input_ref']})")
        return commits

    published_commits()
# [END lakefence_asset_consumer]
