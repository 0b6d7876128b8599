"""The Slack Web API as the app uses it: one rate budget per workspace, the optional
features a workspace has, a click's answer through its ``response_url``, who the app is
(``auth.test``), and which channels are public."""

__all__: list[str] = []
