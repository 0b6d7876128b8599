"""Approvals: where a held tool call waits for Approve or Deny, and the clicks that
decide it (docs/tools.md, Approvals)."""

__all__: list[str] = []
