"""Runs and their Slack surface: the supervisor that owns run tasks, the queue of runs
waiting for room, and each run's status message, streamed answer and agent session."""

__all__: list[str] = []
