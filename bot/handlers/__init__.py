"""Bolt listeners, one module per kind of Slack input: mentions and messages, button
clicks, and Slack's own events (``agent_session_stopped``); and what every handler needs
(:mod:`bot.handlers.context`)."""
