"""The process and its transports: the wiring, start-up and shutdown, the HTTP door,
Socket Mode, health, and the commands that start nothing (``--check``,
``--forget-user``)."""

__all__: list[str] = []
