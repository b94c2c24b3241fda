"""What the test suite and the benchmarks share (product code never imports it, as it
never imports the Slack emulator, ``nanoslack.emulator``): a scripted model server on
127.0.0.1 (``llm_server``), a throwaway PostgreSQL server (``pg``), and a test fleet's
``.env`` with reads of its SQLite store (``fleet_env``)."""
