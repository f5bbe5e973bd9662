"""``[core] hostname_callable`` of the Celery tier's workers: each worker reports its own name.

Both workers run on one machine, so the default (the FQDN) would be the same for both; the tier
needs to tell from a task instance's ``hostname`` (and its history's) which worker ran which try.
"""

from __future__ import annotations

import os

#: Set by tests/stack/celery.py in each worker's environment.
WORKER_NAME_ENV = "LAKEFENCE_CELERY_WORKER"


def worker_hostname() -> str:
    """The worker's name (``worker-1``...); the FQDN-like fallback outside a tier worker."""
    return os.environ.get(WORKER_NAME_ENV) or "unknown-worker"
