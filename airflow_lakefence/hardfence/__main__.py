"""``python -m airflow_lakefence.hardfence``: install, check, probe or print the hard fence.

Credentials come from an Airflow connection (``--conn-id``) or from the environment lakectl reads
(``LAKECTL_SERVER_ENDPOINT_URL``, ``LAKECTL_CREDENTIALS_ACCESS_KEY_ID``,
``LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY``), never from the command line.

Exit status: 0 when the current fence is installed (and enforced, branch-wide and scoped, with
``--probe``), 1 when it is not (an older version that fences only branch-wide merges included), 2
when lakeFS or the arguments failed. ``install`` upgrades an older version.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from airflow_lakefence.core.fences.hard import ACTION_PATH, HARD_FENCE_VERSION, render_action
from airflow_lakefence.exceptions import InvalidInputError, LakeFenceError
from airflow_lakefence.hardfence import check_hard_fence, install_hard_fence, probe_hard_fence
from airflow_lakefence.lakefs_adapter.client import LakeFSClient

ENDPOINT_ENV = "LAKECTL_SERVER_ENDPOINT_URL"
ACCESS_KEY_ENV = "LAKECTL_CREDENTIALS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_lakefence.hardfence",
        description="The lakefence hard fence: a lakeFS pre-merge hook making every lakefence merge a "
        "compare-and-swap on the target branch.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("install", "merge the action file into the branch (nothing is done when it is current)"),
        ("check", "tell whether the branch's head carries the current action file"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("--repository", required=True, help="the lakeFS repository")
        cmd.add_argument("--branch", required=True, help="the target branch publications merge into")
        source = cmd.add_mutually_exclusive_group()
        source.add_argument("--conn-id", help="an Airflow connection of type lakefs (default: lakefs_default)")
        source.add_argument(
            "--from-env",
            action="store_true",
            help=f"read the endpoint and credentials from {ENDPOINT_ENV}, {ACCESS_KEY_ENV}, {SECRET_KEY_ENV}",
        )
        cmd.add_argument(
            "--probe", action="store_true", help="also prove lakeFS runs it (a throw-away merge on hidden branches)"
        )
        cmd.add_argument("--json", action="store_true", help="print the outcome as JSON")
        if name == "install":
            cmd.add_argument("--force", action="store_true", help="overwrite a foreign file at the action's path")
    sub.add_parser("print", help=f"print the action file ({ACTION_PATH}, version {HARD_FENCE_VERSION})")
    return parser


def _client(args: argparse.Namespace) -> LakeFSClient:
    use_env = args.from_env or (args.conn_id is None and os.environ.get(ENDPOINT_ENV))
    if use_env:
        endpoint = os.environ.get(ENDPOINT_ENV, "")
        key = os.environ.get(ACCESS_KEY_ENV, "")
        secret = os.environ.get(SECRET_KEY_ENV, "")
        if not (endpoint and key and secret):
            raise InvalidInputError(f"set {ENDPOINT_ENV}, {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}")
        return LakeFSClient(endpoint, key, secret)
    # Airflow is imported only for a connection: the environment path works without its config.
    from airflow_lakefence.hooks.lakefs import LakeFSHook

    return LakeFSHook(args.conn_id or LakeFSHook.default_conn_name).get_conn()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    :param argv: the arguments (default: ``sys.argv[1:]``).
    :return: the exit status.
    """
    args = _parser().parse_args(argv)
    if args.command == "print":
        sys.stdout.write(render_action())
        return 0
    outcome: dict[str, object] = {"repository": args.repository, "branch": args.branch}
    try:
        client = _client(args)
        if args.command == "install":
            result = install_hard_fence(client, args.repository, args.branch, force=args.force)
            outcome.update(
                status_before=str(result.before.status),
                installed=result.installed,
                merge_commit=result.merge_commit,
                head=result.head,
            )
            ok = True
            text = (
                f"installed the hard fence v{HARD_FENCE_VERSION} on {args.branch!r}: merge {result.merge_commit}"
                if result.installed
                else result.before.message
            )
        else:
            client.get_commit(args.repository, args.branch)  # a missing repository/branch is an error, not "missing"
            check = check_hard_fence(client, args.repository, args.branch)
            outcome.update(
                status=str(check.status),
                installed_version=check.installed_version,
                branch_wide=check.enforced,
                scoped=check.scoped,
            )
            # The current version (or newer) only: an older one still fences branch-wide merges
            # (said in the message) but refuses scoped ones.
            ok = check.scoped
            text = check.message
            if check.enforced and not check.scoped:
                text = check.refusal(scoped=True) or text
        if args.probe and ok:
            probe = probe_hard_fence(client, args.repository, args.branch)
            outcome.update(probe_enforced=probe.enforced, probe_scoped=probe.scoped)
            ok = probe.enforced and probe.scoped
            text += "; probe: " + probe.message
    except LakeFenceError as exc:
        outcome.update(error=str(exc), error_class=type(exc).__name__)
        _emit(args, outcome, f"error: {exc}", err=True)
        return 2
    outcome.update(ok=ok)
    _emit(args, outcome, text, err=not ok)
    return 0 if ok else 1


def _emit(args: argparse.Namespace, outcome: dict[str, object], text: str, *, err: bool) -> None:
    if args.json:
        print(json.dumps(outcome, sort_keys=True))
    else:
        print(text, file=sys.stderr if err else sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
