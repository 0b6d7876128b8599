"""Ending runs: the one stop service, the policy of who may press what, the resume
controls, and guidance's rules."""

__all__: list[str] = []
