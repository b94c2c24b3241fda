"""The Slack edge, the only package that imports bolt and slack-sdk: the Socket Mode
envelope handler (``socket``), the intake middleware (``intake``), payload parsing
(``parse``), the group commit (``batching``), one instance's runtime (``instance``),
the fleet (``fleet``), posting (``poster``) and sender names (``names``)."""
