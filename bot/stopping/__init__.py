"""Ending runs: the one stop service, what became of a request before its ack, and the
resume controls."""

__all__: list[str] = []
