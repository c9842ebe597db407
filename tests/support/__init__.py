"""What the tests (and bench/) share, each written once.

- ``net``: free loopback ports, and waiting for a condition.
- ``scrape``: one /metrics scrape as samples, and a sample's value.
- ``commands``: the real ``copilot-otel`` command line in a subprocess, with a clean environment.
- ``daemon``: the one harness that runs ``copilot-otel run`` as a subprocess.
- ``files``: session folders and appends, as the CLI writes them.
- ``otlp_json``: reading the OTLP JSON lines files the daemon and ``replay`` write.
- ``spans``: comparable keys of spans, and waiting for what a replay says must be exported.
- ``events``: session events written by hand, in the real CLI's shapes (``Event`` records or
  JSONL lines) for unit tests, and single lines to plant into real logs.
- ``model``: feeding a SessionModel in a unit test, and reading what came out.
- ``contract``: the metric contract, read from docs/metrics.md.
- ``deploy``: the dashboard, the alert rules and the external checkers of deploy/.
"""
