"""The Slack edge, the only package that imports bolt and slack-sdk.

In the order an envelope meets them: ``socket`` (the envelope pump and handler, the
watchdog), ``intake`` (screening for the pump, owners' clicks for bolt), ``parse``
(payload → ``Inbound``), then the instance's core (``nanoslack.core``) decides, and
``poster`` sends what it queued, rendering owners' questions with ``blocks``.
``connection`` holds one instance's bolt app, handler, pump and watchdog (on the socket
loop), ``instance`` wires a connection, a poster and the working reaction
(``presence``) to the instance's core; ``fleet`` runs them all
(leases: ``lease``); ``names`` asks Slack who people are; ``client`` and ``pacing``
are how the edge calls the Web API.
"""
