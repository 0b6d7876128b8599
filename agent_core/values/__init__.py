"""The bottom floor: values and the rules over them (stop requests, states, outcomes, why a run
ended, budgets, events, approval values, records, errors, the clock, redaction).

Nothing here imports from a floor above; tests/test_layers.py holds the order.
"""
