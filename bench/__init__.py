"""Benchmarks for the performance targets in bench/README.md, run by hand.

Run one with ``python -m bench.<name>``, or all with ``python -m bench``.

Not part of the pytest suite (targets are measured by benchmarks, never by
timed unit tests). See ``bench/README.md`` for what each one measures and how.
"""
