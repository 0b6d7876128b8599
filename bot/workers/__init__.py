"""Several workers on one database: this process's durable side (leases, heartbeat,
purge), the stop watcher, the reconciler and the resume schedule."""

__all__: list[str] = []
