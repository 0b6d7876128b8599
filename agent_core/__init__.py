"""threadpilot's agent core: a framework-free LLM agent loop with Stop, Abort and Shutdown.

The Slack app imports the core only through the names below.
"""
