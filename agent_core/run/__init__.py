"""The run itself: the :class:`~agent_core.run.agent.Agent` that makes runs, the loop
(:class:`~agent_core.run.loop.Run`), its steps and their checkpoint, sub-agents, what a run
records and tallies, and compaction (continuing a run whose context filled up).
"""
