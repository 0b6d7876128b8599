"""The Slack Web API as the app uses it: one rate budget per workspace, the optional
features a workspace has, and a click's answer through its ``response_url``."""

__all__: list[str] = []
