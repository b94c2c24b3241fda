"""The Slack edge: payload parsing and (elsewhere) the bolt apps."""
