"""The pure core of the fenced publish protocol.

Nothing here imports Airflow or lakeFS: the decision table, naming and commit-metadata encoding are
plain functions over plain values, tested exhaustively on their own. The adapters and operators
turn Airflow and lakeFS state into these values and act on the answers.
"""

from airflow_lakefence.core.fences.publish import Action, FenceDecision, HeadState, decide_publish
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import (
    is_valid_branch_name,
    staging_branch_name,
    staging_branch_prefix,
)
from airflow_lakefence.core.publication.abandonment import Judgement, PublisherScope, PublisherState, Verdict, judge
from airflow_lakefence.core.records.metadata import (
    ROLE_PUBLISH,
    ROLE_STAGE,
    LakeFenceRecord,
    decode_metadata,
    encode_metadata,
)
from airflow_lakefence.core.staging.cleaner import CleanupDecision, evidence_metadata, plan_cleanup

__all__ = [
    "ROLE_PUBLISH",
    "ROLE_STAGE",
    "Action",
    "AttemptId",
    "CleanupDecision",
    "FenceDecision",
    "HeadState",
    "Judgement",
    "LakeFenceRecord",
    "PublicationKey",
    "PublisherScope",
    "PublisherState",
    "Verdict",
    "decide_publish",
    "decode_metadata",
    "encode_metadata",
    "evidence_metadata",
    "is_valid_branch_name",
    "judge",
    "plan_cleanup",
    "staging_branch_name",
    "staging_branch_prefix",
]
