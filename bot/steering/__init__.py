"""Steering a live run from its thread: guidance's rules and the marks it leaves."""

__all__: list[str] = []
