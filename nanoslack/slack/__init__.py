"""The Slack edge: Socket Mode and the Web API for the fleet's instances.

In the order an envelope meets them: ``adapter`` (our Socket Mode client: the
connection, its reconnects and heartbeat), ``pump`` (the envelope pump: every frame
answered), ``intake`` (screening for the pump, owners' clicks), ``parse``
(payload → ``Inbound``), then the instance's core (``nanoslack.core``) decides, and
``poster`` sends what it queued, rendering owners' questions with ``blocks`` (a DM's
reply streamed by ``streams``). ``connection`` holds one instance's client and pump,
``instance`` wires a connection, a poster, the assistant pane (``pane``) and the turns'
signals (``surface``: the status line, ``status``, and the working reaction,
``reaction``) to the instance's core; ``fleet`` runs them all (leases: ``lease``);
``names`` asks Slack who people are; ``client`` and ``pacing`` are how the edge calls
the Web API. slack-sdk is not the edge's alone: the operator commands
(``nanoslack.ops.doctor``, ``nanoslack.ops.open_room``) and ``nanoslack.demo`` call the
Web API with it directly; nothing else in the package imports it.
"""
