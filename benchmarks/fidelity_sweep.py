"""Differential fidelity sweep: many seeds of random API operations on real lakeFS and the local server.

Not a test: the CI test (tests/fidelity) runs a fixed set of seeds; this runs as many as asked and
groups the first divergence of each seed by operation and answer, so a new class of difference
shows up with one example.

    python benchmarks/fidelity_sweep.py --seeds 0:500 --steps 80
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fidelity._backends import local_server, real_lakefs
from tests.fidelity._harness import Divergence, Server, run_seed


def _category(divergence: Divergence) -> str:
    real, local = divergence.answers["real"], divergence.answers["local"]
    message = str(real["body"].get("message", "") if isinstance(real["body"], dict) else "")[:60]
    message = re.sub(r"[0-9a-f]{6,}", "X", message)
    return f"{divergence.op.split()[0]} real={real['status']} local={local['status']} {message}"


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print a summary; exit 1 when any seed diverged.

    :param argv: command line arguments.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0:200", help="range START:STOP")
    parser.add_argument("--steps", type=int, default=80, help="operations per seed")
    parser.add_argument("--json", help="also write the divergences to this file")
    args = parser.parse_args(argv)
    start, stop = (int(x) for x in args.seeds.split(":"))
    categories: dict[str, list[Divergence]] = collections.defaultdict(list)
    ops = 0
    began = time.monotonic()
    with real_lakefs() as real, local_server() as local:
        servers = [Server(real), Server(local)]
        for seed in range(start, stop):
            divergence, ran = run_seed(seed, servers, args.steps)
            ops += ran
            if divergence is not None:
                categories[_category(divergence)].append(divergence)
    elapsed = time.monotonic() - began
    diverged = sum(len(v) for v in categories.values())
    print(f"seeds {start}:{stop}, {ops} operations, {elapsed:.1f} s, {diverged} seeds diverged")
    for category, found in sorted(categories.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{len(found)} x {category}\n{found[0]}")
    if args.json:
        Path(args.json).write_text(
            json.dumps([d.__dict__ for found in categories.values() for d in found], indent=1, default=str)
        )
    return 1 if diverged else 0


if __name__ == "__main__":
    sys.exit(main())
