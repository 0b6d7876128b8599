"""The terminal runner (``python -m agent_core run "TASK"``): the agent without Slack, with
approvals answered y/N at the terminal.
"""
