"""What comes in from Slack, before a listener acts on it: which deliveries were already
taken, and a thread read as history."""

__all__: list[str] = []
