"""Store adapters behind :mod:`agent_core.ports`: ``memory`` (in-process), and the
durable ones for several workers. All pass the same contract suite in ``tests/``."""
