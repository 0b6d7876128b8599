"""The stores' tunable defaults (connections per worker, the migration deadline): numbers
only, so that the settings can name them without importing the database drivers or
alembic (``python -m bot`` reads its settings before anything heavy is imported)."""

from __future__ import annotations

__all__ = ["ANSWERING_POOL_SIZE", "MIGRATION_TIMEOUT_S", "POOL_SIZE"]

POOL_SIZE = 4
"""Default connections a store's pool opens for the runs' work (``DATABASE_POOL_SIZE``).

Few on purpose. A worker is one event loop: a handful of statements in flight keep it
busy, and each further one is a server process competing for the database's cores. Every
worker's pool adds to that, and a click's statements (:data:`ANSWERING_POOL_SIZE`) wait
behind all of them for a core: measured on 2 cores with 4 workers draining the queue, a
pool of 10 put a click's p99 at 148 ms, one of 4 at 74-91 ms (bench/README.md). Work beyond
the pool waits in the worker, where it costs nothing."""

ANSWERING_POOL_SIZE = 3
"""Connections kept open for the calls a person waits on (a click before its ack), beside
the pool the runs' work shares: a click never queues for a connection behind that work,
nor waits for one to be opened (tens of milliseconds on a busy server)."""

MIGRATION_TIMEOUT_S = 900.0
"""The default deadline of a whole schema upgrade, waiting for another worker's included
(``MIGRATION_TIMEOUT``)."""
