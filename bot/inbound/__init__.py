"""What comes in from Slack, before a listener acts on it: who the app is, who the person
is (trust), which deliveries were already taken, and a thread read as history."""

__all__: list[str] = []
