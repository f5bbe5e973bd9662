"""The local server's state: one :class:`Store` combining its parts by concern.

* :mod:`._base` — the database (connections, read and write transactions) and object bytes on disk;
* :mod:`._tx` — the SQLite schema and the queries inside one transaction (:class:`~._tx.Tx`);
* :mod:`._refs` — repositories, branches, tags, branch protection;
* :mod:`._history` — commits, log, diff, merge, revert, cherry-pick;
* :mod:`._objects` — objects on a branch or ref;
* :mod:`._model` — names, records and the sorted-tree algorithms they share;
* :mod:`._actions` — pre-merge Lua hooks; :mod:`._render` — the JSON of listings.
"""

from __future__ import annotations

from lakefence_testing.lakefs_server._history import HistoryMixin
from lakefence_testing.lakefs_server._model import (
    DEFAULT_CONTENT_TYPE,
    DELETE_OBJECTS_MAX,
    Blob,
    Commit,
    Entry,
    Page,
    Repository,
)
from lakefence_testing.lakefs_server._objects import ObjectsMixin
from lakefence_testing.lakefs_server._refs import RefsMixin

__all__ = ["DEFAULT_CONTENT_TYPE", "DELETE_OBJECTS_MAX", "Blob", "Commit", "Entry", "Page", "Repository", "Store"]


class Store(RefsMixin, HistoryMixin, ObjectsMixin):
    """The server's state on disk.

    :param data_dir: directory holding ``lakefs.sqlite3`` and the ``blobs/`` tree.
    :param committer: the name recorded as committer (lakeFS records the user name).
    """
