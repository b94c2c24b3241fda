"""Our own Socket Mode client (``socket_mode``), on aiohttp's public WebSocket API.

It keeps the connection and nothing else: ``apps.connections.open``, the WebSocket,
reconnects, pings and the heartbeat; it hands what it read to a consumer in batches and
writes the acks it is given. What an envelope means is the envelope pump's
(``nanoslack.slack.pump``).
"""

from nanoslack.slack.adapter.socket_mode import Frames, OpenUrl, SocketModeClient, SocketOptions

__all__ = ["Frames", "OpenUrl", "SocketModeClient", "SocketOptions"]
