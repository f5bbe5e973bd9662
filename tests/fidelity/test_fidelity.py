"""Differential fidelity: seeded random API operations answer alike on real lakeFS and the local server.

The CI seeds are fixed; ``benchmarks/fidelity_sweep.py`` runs many more. A failure prints the
first differing answer of each seed and the operations that led to it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.fidelity._harness import Op, Server, run_seed

pytestmark = pytest.mark.real_lakefs

CI_SEEDS = range(30)
STEPS = 70


def test_random_operations_answer_alike(fidelity_servers: list[Server]) -> None:
    divergences = []
    ops = 0
    answered: list[tuple[Op, dict[str, Any]]] = []
    for seed in CI_SEEDS:
        divergence, ran = run_seed(seed, fidelity_servers, STEPS, answered)
        ops += ran
        if divergence is not None:
            divergences.append(str(divergence))
    assert not divergences, f"{len(divergences)} of {len(CI_SEEDS)} seeds diverged:\n\n" + "\n\n".join(divergences)
    assert ops == len(CI_SEEDS) * STEPS
    # The seeds reach the name collisions between branches, tags and commit ids, both ways.
    seen = {_collision(op, answer) for op, answer in answered} - {None}
    assert seen >= {
        "tag named like a commit id: 409", "tag named like a commit-id prefix: 201",
        "tag named like a branch: 409", "branch named like a commit id: 409", "branch named like a tag: 409",
    }, seen  # fmt: skip


def _collision(op: Op, answer: dict[str, Any]) -> str | None:
    """Which name collision an operation tried, with its status (``None`` if none)."""
    body = op.body if isinstance(op.body, dict) else {}
    message = str(answer["body"].get("message", "")) if isinstance(answer["body"], dict) else ""
    if op.kind == "create_tag":
        name = str(body.get("id", ""))
        if re.fullmatch(r"\{C\d+\}", name):
            return f"tag named like a commit id: {answer['status']}"
        if re.fullmatch(r"\{C\d+:12\}", name):
            return f"tag named like a commit-id prefix: {answer['status']}"
        if message.startswith("branch name "):
            return f"tag named like a branch: {answer['status']}"
    if op.kind == "create_branch":
        if message.startswith("commit ID "):
            return f"branch named like a commit id: {answer['status']}"
        if message.startswith("tag ID "):
            return f"branch named like a tag: {answer['status']}"
    return None


def test_a_divergence_is_detected(fidelity_servers: list[Server]) -> None:
    """The comparison can fail: the same seed against a server whose answers are altered."""
    real, local = fidelity_servers

    class Altered(Server):
        def answer(self, op):  # type: ignore[no-untyped-def]
            answer = super().answer(op)
            if op.kind == "list_objects" and answer["status"] == 200:
                answer["body"]["results"] = answer["body"]["results"][:-1] or [{"path": "invented"}]
            return answer

    altered = Altered(local.endpoint)
    found = [run_seed(seed, [real, altered], STEPS)[0] for seed in range(3)]
    assert any(d is not None and d.op.startswith("list_objects") for d in found)
