"""The run-state cleaner's rules (airflow_lakefence.core.staging.cleaner.plan_run_state_cleanup)."""

from __future__ import annotations

from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.staging.cleaner import RunRecords, plan_run_state_cleanup

DAY = 86400.0
NOW = 1_000 * DAY


def key(run: str) -> PublicationKey:
    return PublicationKey("dag", run, "publish", -1)


def run(name: str, age_days: float, *, named: bool = True, evidence: tuple[str, ...] = ()) -> RunRecords:
    return RunRecords(f"runs/{name}/", (f"runs/{name}/published/00000001",), key(name) if named else None,
                      NOW - age_days * DAY, evidence)  # fmt: skip


def decide(runs: list[RunRecords], states: dict[PublicationKey, str | None], **kwargs: object) -> dict[str, str]:
    decisions = plan_run_state_cleanup(runs, states=states, branches={"kept-evidence"}, now=NOW, retention=7 * DAY,
                                       **kwargs)  # type: ignore[arg-type]  # fmt: skip
    return {d.prefix.split("/")[1]: ("delete" if d.delete else "keep") for d in decisions}


def test_only_runs_no_try_can_come_to_are_removed_after_the_retention() -> None:
    runs = [
        run("young", 1),
        run("success", 8),
        run("failed", 8),
        run("gone", 8),
        run("running", 8),
        run("retrying", 8),
        run("cleared", 8),
        run("unknown_state", 8),
        run("not_looked_up", 8),
        run("unnamed", 8, named=False),
    ]
    states = {
        key("young"): "success",
        key("success"): "success",
        key("failed"): "failed",
        key("gone"): None,
        key("running"): "running",
        key("retrying"): "up_for_retry",
        key("cleared"): "none",
        key("unknown_state"): "a_new_state",
    }
    assert decide(runs, states) == {
        "young": "keep",
        "success": "delete",
        "failed": "delete",
        "gone": "delete",
        "running": "keep",
        "retrying": "keep",
        "cleared": "keep",
        "unknown_state": "keep",
        "not_looked_up": "keep",
        "unnamed": "delete",
    }


def test_a_run_whose_evidence_branch_still_exists_is_kept_unless_told() -> None:
    runs = [run("kept", 30, evidence=("kept-evidence",)), run("gone_branch", 30, evidence=("deleted-branch",))]
    states = {key("kept"): "failed", key("gone_branch"): "failed"}
    assert decide(runs, states) == {"kept": "keep", "gone_branch": "delete"}
    assert decide(runs, states, delete_evidence=True) == {"kept": "delete", "gone_branch": "delete"}
