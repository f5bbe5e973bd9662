"""Differential fidelity: seeded random API operations answer alike on real lakeFS and the local server.

The CI seeds are fixed; ``benchmarks/fidelity_sweep.py`` runs many more. A failure prints the
first differing answer of each seed and the operations that led to it.
"""

from __future__ import annotations

import pytest

from tests.fidelity._harness import Server, run_seed

pytestmark = pytest.mark.real_lakefs

CI_SEEDS = range(30)
STEPS = 70


def test_random_operations_answer_alike(fidelity_servers: list[Server]) -> None:
    divergences = []
    ops = 0
    for seed in CI_SEEDS:
        divergence, ran = run_seed(seed, fidelity_servers, STEPS)
        ops += ran
        if divergence is not None:
            divergences.append(str(divergence))
    assert not divergences, f"{len(divergences)} of {len(CI_SEEDS)} seeds diverged:\n\n" + "\n\n".join(divergences)
    assert ops == len(CI_SEEDS) * STEPS


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
