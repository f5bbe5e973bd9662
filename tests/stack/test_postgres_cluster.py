"""The throw-away PostgreSQL cluster the Airflow stacks and real lakeFS (``postgres`` KV) run on."""

from __future__ import annotations

import pytest

from tests.tools.postgres import PostgresCluster, PostgresError, postgres_bindir

pytestmark = pytest.mark.skipif(postgres_bindir() is None, reason="PostgreSQL's server binaries are not installed")


def test_a_cluster_on_loopback_serves_its_databases_and_leaves_nothing_behind() -> None:
    import psycopg2

    with PostgresCluster() as cluster:
        directory = cluster.directory
        assert directory is not None
        assert cluster.create_database("lakefence_a") == "lakefence_a"
        assert cluster.create_database("lakefence_a") == "lakefence_a"  # once
        with psycopg2.connect(cluster.url("lakefence_a")) as conn, conn.cursor() as cursor:
            cursor.execute("SHOW listen_addresses")
            assert cursor.fetchone() == ("127.0.0.1",)
            cursor.execute("SELECT current_database()")
            assert cursor.fetchone() == ("lakefence_a",)
        assert "ready to accept connections" in cluster.log_tail()
        with pytest.raises(PostgresError, match="letters, digits and underscores"):
            cluster.create_database("bad-name; DROP")
    assert not cluster.running
    assert not directory.exists()
