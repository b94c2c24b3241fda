"""Operator tools (DESIGN §6): open an A2A room, query the store, render app manifests.

Kept free of third-party imports: ``scripts/q.py`` imports ``nanoslack.ops.q`` under a
plain ``python3`` with nothing installed.
"""
