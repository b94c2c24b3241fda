"""Operator tools (docs/operations.md): open an A2A room, query the store, inspect and steer the
fleet's data, render app manifests.

``q`` alone is kept to the standard library: ``scripts/q.py`` imports
``nanoslack.ops.q`` under a plain ``python3`` with nothing installed. The others use
the project's dependencies (slack-sdk, the store).
"""
