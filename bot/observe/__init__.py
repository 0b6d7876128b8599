"""What an operator sees of a process: its metrics and how busy its event loop is."""

__all__: list[str] = []
