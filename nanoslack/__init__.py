"""nanoslack: a fleet of Slack bots whose agents share group DMs (A2A rooms)."""

__version__ = "0.1.0"
