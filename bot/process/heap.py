"""Keep CPython's full garbage collections short, so they do not stall clicks.

A full (generation 2) collection walks every object the collector tracks, with the event
loop stopped. Once started, this process holds about 220,000 such objects that live as
long as it does (modules, classes, functions, the SDKs' schemas), and walking them took
100 to 600 ms on a loaded 2-core machine: a click arriving then waited that long for its
ack. :func:`freeze_start_up_heap` moves them out of the collector's sight
(:func:`gc.freeze`), so a full collection walks only what the runs create since. They
are still freed by reference counting; only a reference cycle among them would never be
collected, and start-up objects are not garbage.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_start_up_heap"]


def freeze_start_up_heap() -> int:
    """Collect what start-up left behind, then freeze the rest; how many were frozen.

    Call it once, when the app has started and before it takes work.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
