"""``python -m lakefence_testing.lakefs_server``: run a server until SIGTERM/SIGINT.

The server runs behind the fault-injecting proxy (test controls under ``/_lakefence/``); the first
line on stdout is the proxy's URL (``http://HOST:PORT``), the one clients use.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from lakefence_testing.lakefs_server._server import (
    DEFAULT_ACCESS_KEY_ID,
    DEFAULT_SECRET_ACCESS_KEY,
    run_server,
)


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run the server.

    :param argv: command line arguments (default ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(
        prog="python -m lakefence_testing.lakefs_server",
        description="Run a local lakeFS-compatible server for tests, behind the fault-injecting proxy.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--data-dir", help="data directory (default: a new temporary directory)")
    parser.add_argument("--access-key-id", default=os.environ.get("LAKEFENCE_ACCESS_KEY_ID", DEFAULT_ACCESS_KEY_ID))
    parser.add_argument(
        "--secret-access-key", default=os.environ.get("LAKEFENCE_SECRET_ACCESS_KEY", DEFAULT_SECRET_ACCESS_KEY)
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds the proxy adds to every API request")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="lakefence-lakefs-")
    run_server(
        data_dir,
        host=args.host,
        port=args.port,
        access_key_id=args.access_key_id,
        secret_access_key=args.secret_access_key,
        latency=args.latency,
    )


if __name__ == "__main__":
    main()
