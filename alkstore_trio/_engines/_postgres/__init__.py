"""The PostgreSQL engine's building blocks (needs the ``postgres`` extra: psycopg 3.3).

Layers, each using only the ones below it:

- ``_driver``: :class:`Connection`, psycopg 3 connections driven by trio (the native
  driver, or the thread driver as a fallback), and :class:`ConnectionBroken`, the one
  exception that means "discard this connection". The only module that touches psycopg
  internals.
- ``_pool``: :func:`open_pool`, a bounded trio-native pool, generic over the driver.
"""

from ._driver import Connection as Connection
from ._driver import ConnectionBroken as ConnectionBroken
from ._driver import Notify as Notify
from ._driver import connect as connect
from ._pool import Pool as Pool
from ._pool import PoolClosed as PoolClosed
from ._pool import PoolStatistics as PoolStatistics
from ._pool import open_pool as open_pool
