"""Settings: what the app reads from the environment and ``.env``, checked at start-up."""

__all__: list[str] = []
