"""``LakeFSResolveRefOperator``: resolve a branch, tag or ref expression to a commit id, once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.common.compat.sdk import BaseOperator

from airflow_lakefence.exceptions import InputRefError, LakeFSNotFoundError
from airflow_lakefence.hooks.lakefs import LakeFSHook, LakeFSHookMixin


class LakeFSResolveRefOperator(LakeFSHookMixin, BaseOperator):
    """Resolve ``ref`` to the commit id it points at now and return it (XCom ``return_value``).

    The usual upstream of ``FencedSparkPublishOperator(input_ref=...)``: the run pins its input
    once, so every retry of the downstream task reads and builds on the same commit.

    :param repository: the lakeFS repository (templated).
    :param ref: a branch, tag, commit id or ref expression such as ``main~1`` (templated).
    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :raises InputRefError: at run time, if the ref does not exist.
    """

    template_fields: Sequence[str] = ("repository", "ref")
    ui_color = "#b2ebf2"

    def __init__(
        self, *, repository: str, ref: str, lakefs_conn_id: str = LakeFSHook.default_conn_name, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.repository = repository
        self.ref = ref
        self.lakefs_conn_id = lakefs_conn_id

    def execute(self, context: Any) -> str:
        """Resolve the ref.

        :param context: the Airflow context.
        :raises InputRefError: if the repository or ref does not exist.
        """
        try:
            commit = self.client.get_commit(self.repository, self.ref)
        except LakeFSNotFoundError as exc:
            raise InputRefError(f"ref {self.ref!r} not found in repository {self.repository!r}") from exc
        self.log.info("Resolved %s@%s to commit %s", self.repository, self.ref, commit.id)
        return commit.id
