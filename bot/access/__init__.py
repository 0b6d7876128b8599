"""Who may do what: the trust gate (who may use the app at all) and the stop policy (who may
stop, abort or steer a run)."""

__all__: list[str] = []
