"""Bolt listeners, one module per kind of Slack input: mentions and messages, button
clicks, and Slack's own events (``agent_session_stopped``)."""
