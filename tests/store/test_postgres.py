"""The PostgreSQL store's own promises: no password in any message, a clear error when the
database cannot be used, a newer schema refused, and a lost connection replaced."""

from __future__ import annotations

import pytest

from afm_struct.store import StoredResponse, StoreError, migrations, open_store
from afm_struct.store.postgres import describe
from tests.postgres_server import PostgresServer

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'afm-struct[postgres]')")
import psycopg

PASSWORD = "s3cret-pw-91c2"


def test_the_description_never_holds_the_password() -> None:
    text = describe(f"postgresql://alice:{PASSWORD}@db.example:6543/afm")
    assert text == "PostgreSQL database afm on db.example:6543 as alice"
    assert "unparsable" in describe("postgresql://[bad")


def test_an_unreachable_database_is_a_clear_error_without_the_password(postgres: PostgresServer) -> None:
    from afm_struct.cli.cluster_ports import free_port

    port = free_port()
    with pytest.raises(StoreError) as err:
        open_store(f"postgresql://afm:{PASSWORD}@127.0.0.1:{port}/nodb")
    message = err.value.message
    assert f"PostgreSQL database nodb on 127.0.0.1:{port} as afm" in message
    assert "refused" in message.lower() and PASSWORD not in message
    with pytest.raises(StoreError) as err:  # a server that is there, a database that is not
        open_store(f"postgresql://afm:{PASSWORD}@127.0.0.1:{postgres.port}/nodb")
    assert "nodb" in err.value.message and PASSWORD not in err.value.message


def test_a_database_from_a_newer_afm_struct_is_refused(pg_spec: str) -> None:
    open_store(pg_spec).close()
    with psycopg.connect(pg_spec, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (%s, 'from the future', 0)",
                     (migrations.LATEST + 1,))
    with pytest.raises(StoreError) as err:
        open_store(pg_spec)
    assert "newer afm-struct" in err.value.message


def test_a_lost_connection_fails_one_call_with_503_and_is_replaced(pg_spec: str) -> None:
    store = open_store(pg_spec)
    try:
        store.put(StoredResponse(id="r", owner="o", status="completed", created_at=0, model="m"))
        with psycopg.connect(pg_spec, autocommit=True) as admin:
            killed = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                   "WHERE pid <> pg_backend_pid() AND datname = current_database()"
                                   ).fetchall()
        assert killed
        with pytest.raises(StoreError) as err:
            store.get("o", "r")
        assert err.value.status == 503 and "unavailable" in err.value.message
        assert store.get("o", "r").id == "r"
    finally:
        store.close()
