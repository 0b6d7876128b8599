"""The ids a click carries back to the app: the action and block ids of its messages.

One place, so that the views that draw a control and the listeners that take its click
(:mod:`bot.handlers`) name it alike.
"""

from __future__ import annotations

__all__ = [
    "ACTION_ABORT",
    "ACTION_CONTINUE",
    "ACTION_DONT_RESUME",
    "ACTION_FEEDBACK",
    "ACTION_RESUME_NOW",
    "ACTION_STOP",
    "ACTION_SUB_AGENT",
    "CONTROLS_BLOCK_ID",
    "RESUME_BLOCK_ID",
    "SUB_AGENT_ABORT",
    "SUB_AGENT_BLOCK_PREFIX",
    "SUB_AGENT_STEER",
    "SUB_AGENT_STOP",
]

ACTION_STOP = "threadpilot_stop"
ACTION_ABORT = "threadpilot_abort"
ACTION_SUB_AGENT = "threadpilot_sub_agent"
"""A live sub-agent's ``overflow`` menu; each option's ``value`` is
``<stop|abort|steer>:<the sub-agent's run id>`` (:func:`sub_agent_choice`)."""
SUB_AGENT_BLOCK_PREFIX = "threadpilot_sub_agent:"
"""A live sub-agent's section is ``SUB_AGENT_BLOCK_PREFIX + <its run id>``."""
SUB_AGENT_STOP = "stop"
SUB_AGENT_ABORT = "abort"
SUB_AGENT_STEER = "steer"
ACTION_FEEDBACK = "threadpilot_feedback"
"""The terminal message's feedback buttons; ``value`` is ``positive:<run id>`` or
``negative:<run id>``."""
CONTROLS_BLOCK_ID = "threadpilot_controls"
"""Stable across updates, so a click's ``block_id`` is the same whichever render it hit."""
ACTION_RESUME_NOW = "threadpilot_resume_now"
ACTION_DONT_RESUME = "threadpilot_dont_resume"
ACTION_CONTINUE = "threadpilot_continue"
"""A run that spent its budget: one more budget of the same size (``value``: the run id)."""
RESUME_BLOCK_ID = "threadpilot_resume"
"""The ended run's ``Resume now`` / ``Don't resume`` buttons, or its ``Continue``
(``value``: the run id)."""
