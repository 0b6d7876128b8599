"""The process and its transports: settings, start-up and shutdown, the HTTP door,
Socket Mode, health and metrics, and the commands that start nothing (``--check``,
``--forget-user``)."""

__all__: list[str] = []
