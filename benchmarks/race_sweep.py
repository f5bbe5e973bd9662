"""The long randomized race sweep: seeded interleavings of a zombie try, a new try and a
foreign writer, each in its own process against one lakeFS (the project's local server, or real
lakeFS with ``--lakefs-backend real``), checked for the reliability invariants.

With ``--family scoped``, the scoped fence's sweep instead: three or four writers (publication keys)
of disjoint and overlapping prefixes on one branch, with read sets, crashes after publishing, zombie
tries and lost merge answers (tests/reliability/scoped_race.py). With ``--family simultaneous``,
three writers of one date partition released at the same instant (per-run file names, so only the
fence stands between them): exactly one run's output must end in the partition, the others failing
closed with their evidence kept (docs/performance.md records both fences' figures).

Not part of CI (CI runs a fixed set of 12 seeds in tests/reliability/test_racing_attempts.py, and 10
scoped seeds per fence in tests/reliability/test_scoped_sweep.py). The latest results are recorded in
docs/reliability.md.

Run from the repository root::

    python benchmarks/race_sweep.py --seeds 200 [--first 0] [--workers 3] [--json sweep.json]
        [--family branch|scoped|simultaneous] [--fence soft|hard|both] [--lakefs-backend local|real]
        [--real-kv postgres|local]

(the same as ``python -m tests.reliability.sweep``). Exit code 1 when an invariant was violated;
rerun one scenario with ``--first SEED --seeds 1 --keep`` to keep its logs and timeline.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
    from tests.reliability.sweep import main

    sys.exit(main())
