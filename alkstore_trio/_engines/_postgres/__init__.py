"""The PostgreSQL engine (needs the ``postgres`` extra: psycopg 3.3).

Layers, each using only the ones below it:

- ``_backend``: :class:`~._backend.PostgresEngine`, the contract as one SQL statement per
  operation, and the LISTEN task (``open_store`` makes one from a PostgreSQL URL).
- ``_schema``: schema versions and migrations (advisory lock, ``SchemaError``).
- ``_sql``: the ``.sql`` files (schema, migrations, named queries) and identifier checks.
- ``_pool``: :func:`open_pool`, a bounded trio-native pool, generic over the driver.
- ``_dsn``: DSN redaction and checks, and connect errors sorted into permanent and
  transient ones and turned into ``EngineError``/``InvalidArgument`` naming the cause.
- ``_driver``: :func:`connect` with the driver chosen at import: ``_native`` (psycopg's
  AsyncConnection driven by trio; the only module that touches psycopg internals) or
  ``_threaded`` (the sync API in worker threads), both implementing ``_connection``'s
  :class:`Connection` and :class:`ConnectionBroken`, the one exception that means
  "discard this connection".
"""

from ._driver import Connection as Connection
from ._driver import ConnectionBroken as ConnectionBroken
from ._driver import Notify as Notify
from ._driver import connect as connect
from ._pool import Pool as Pool
from ._pool import PoolClosed as PoolClosed
from ._pool import PoolStatistics as PoolStatistics
from ._pool import open_pool as open_pool
