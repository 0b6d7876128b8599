"""The app installed by OAuth in many workspaces (OAuth mode): the install link and its
redirect, the installations kept in the database (sealed with ``SLACK_TOKEN_KEY``), each
request authorised from its team's installation, and tokens refreshed before they
expire."""

__all__: list[str] = []
