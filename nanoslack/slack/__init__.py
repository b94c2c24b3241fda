"""The Slack edge, the only package that imports slack-sdk and talks Socket Mode.

In the order an envelope meets them: ``adapter`` (our Socket Mode client: the
connection, its reconnects and heartbeat), ``socket`` (the envelope pump: every frame
answered), ``intake`` (screening for the pump, owners' clicks), ``parse``
(payload → ``Inbound``), then the instance's core (``nanoslack.core``) decides, and
``poster`` sends what it queued, rendering owners' questions with ``blocks``.
``connection`` holds one instance's client and pump, ``instance`` wires a connection,
a poster and the working reaction (``presence``) to the instance's core; ``fleet`` runs
them all (leases: ``lease``); ``names`` asks Slack who people are; ``client`` and
``pacing`` are how the edge calls the Web API.
"""
