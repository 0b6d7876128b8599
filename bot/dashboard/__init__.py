"""What App Home and ``/threadpilot`` list, read from the database, and keeping open
Home tabs current."""

__all__: list[str] = []
