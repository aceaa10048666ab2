"""Q20.1/Q20.2 with the real frameworks: a producer inside Django's ``transaction.atomic()``
(its psycopg 3 backend) and inside a SQLAlchemy ``Session`` (the psycopg dialect).

The how-to guides' programs run as they are in ``tests/acceptance`` (every python block of
a how-to is a program that runs); these tests add what a guide only states: a savepoint
(a nested ``atomic()``, ``begin_nested()``) that rolls back takes its jobs and its wake
with it while the outer transaction's stay, and outside a transaction each call commits
on its own. Notifications are counted up to a sentinel (``_wakes``), never waited for.
"""

from __future__ import annotations

import pytest
import trio
from _wakes import listen, notifications
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict

from alkstore_trio import postgres
from alkstore_trio.postgres import Producer

django = pytest.importorskip("django", reason="the Django producer tests need Django")
sqlalchemy = pytest.importorskip("sqlalchemy", reason="the SQLAlchemy tests need SQLAlchemy")


class Boom(Exception):
    pass


@pytest.fixture
def shop(pg_dsn, schema) -> str:
    """A migrated schema with an ``orders`` table."""
    trio.run(lambda: postgres.migrate(pg_dsn, schema=schema))
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            pgsql.SQL("CREATE TABLE {} (order_no text PRIMARY KEY)").format(
                pgsql.Identifier(schema, "orders")
            )
        )
    return schema


def rows(dsn: str, schema: str) -> tuple[list[str], list[bytes]]:
    """The orders and the payloads of the ``emails`` jobs, committed."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        orders = conn.execute(
            pgsql.SQL("SELECT order_no FROM {} ORDER BY 1").format(
                pgsql.Identifier(schema, "orders")
            )
        ).fetchall()
        jobs = conn.execute(
            pgsql.SQL("SELECT payload FROM {} WHERE queue = 'emails' ORDER BY id").format(
                pgsql.Identifier(schema, "jobs")
            )
        ).fetchall()
    return [o for (o,) in orders], [bytes(p) for (p,) in jobs]


# -- Django ------------------------------------------------------------------------------


@pytest.fixture
def django_connection(pg_dsn):
    from django.conf import settings

    if not settings.configured:
        db = conninfo_to_dict(pg_dsn)
        settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": db.get("dbname", ""),
                    "USER": db.get("user", ""),
                    "PASSWORD": db.get("password", ""),
                    "HOST": db.get("host", ""),
                    "PORT": db.get("port", ""),
                }
            },
            INSTALLED_APPS=[],
        )
        django.setup()
    from django.db import connection

    try:
        yield connection
    finally:
        connection.close()


def test_q20_2_django_atomic_commits_and_rolls_back_with_the_jobs(pg_dsn, shop, django_connection):
    from django.db import transaction

    producer = Producer(shop)
    insert = pgsql.SQL("INSERT INTO {} VALUES (%s)").format(pgsql.Identifier(shop, "orders"))
    connection = django_connection

    def place(order_no: str, *, fail: bool = False, **options) -> None:
        with connection.cursor() as cursor:
            cursor.execute(insert.as_string(None), [order_no])
        producer.enqueue(connection.connection, "emails", order_no.encode(), **options)
        if fail:
            raise Boom(order_no)

    with listen(pg_dsn, shop, "emails") as listener:
        with transaction.atomic():
            place("A")
        assert notifications(listener, pg_dsn, shop, "emails") == [""]

        with pytest.raises(Boom), transaction.atomic():
            place("B", fail=True)
        assert notifications(listener, pg_dsn, shop, "emails") == []

        # A savepoint that rolls back takes its job and its wake (a distinct payload,
        # 77 s, would show) with it; the outer block's job commits.
        with transaction.atomic():
            place("C")
            with pytest.raises(Boom), transaction.atomic():
                place("D", fail=True, delay_s=77)
        assert notifications(listener, pg_dsn, shop, "emails") == [""]

        # Outside atomic(), Django is in autocommit mode: each enqueue commits on its own,
        # a keyed one (two statements) too.
        connection.ensure_connection()
        producer.enqueue(connection.connection, "emails", b"E", unique_key="e")
        assert connection.connection.info.transaction_status.name == "IDLE"
        assert notifications(listener, pg_dsn, shop, "emails") == [""]

    assert rows(pg_dsn, shop) == (["A", "C"], [b"A", b"C", b"E"])


# -- SQLAlchemy --------------------------------------------------------------------------


def test_q20_2_sqlalchemy_session_commits_and_rolls_back_with_the_jobs(pg_dsn, shop):
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    producer = Producer(shop)
    engine = create_engine(pg_dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    insert = text(f'INSERT INTO "{shop}".orders VALUES (:n)')

    def place(session: Session, order_no: str, *, fail: bool = False, **options) -> None:
        session.execute(insert, {"n": order_no})
        conn = session.connection().connection.driver_connection
        producer.enqueue(conn, "emails", order_no.encode(), **options)
        if fail:
            raise Boom(order_no)

    try:
        with listen(pg_dsn, shop, "emails") as listener:
            with Session(engine) as session, session.begin():
                place(session, "A")
            assert notifications(listener, pg_dsn, shop, "emails") == [""]

            with pytest.raises(Boom), Session(engine) as session, session.begin():
                place(session, "B", fail=True)
            assert notifications(listener, pg_dsn, shop, "emails") == []

            with Session(engine) as session, session.begin():
                place(session, "C")
                with pytest.raises(Boom), session.begin_nested():
                    place(session, "D", fail=True, delay_s=77)
            assert notifications(listener, pg_dsn, shop, "emails") == [""]

            # enqueue_many in a session committed by hand.
            with Session(engine) as session:
                conn = session.connection().connection.driver_connection
                ids = producer.enqueue_many(conn, "emails", [b"E", b"F"])
                session.commit()
            assert ids == sorted(ids)
            assert notifications(listener, pg_dsn, shop, "emails") == [""]
    finally:
        engine.dispose()

    assert rows(pg_dsn, shop) == (["A", "C"], [b"A", b"C", b"E", b"F"])
