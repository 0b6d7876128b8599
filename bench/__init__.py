"""Benchmarks for the SPEC.md section 5 targets, run by hand: ``python -m bench.<name>``.

Not part of the pytest suite (SPEC.md: targets are measured by benchmarks, never by
timed unit tests). See ``bench/README.md`` for what each one measures and how.
"""
