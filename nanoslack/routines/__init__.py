"""Routines (docs/routines.md): turns an agent takes on a schedule, each due time once.

``spec`` reads ``teammates/<name>/routines.toml``; ``clock`` claims each due time in the
store (the process that holds the instance's lease) and queues the runs; ``runner``
gives a queued run to the instance's turn scheduler, which runs it as a turn tagged
``[Routine "<name>"]``; ``gate`` runs a routine's gate before its model call.
"""
