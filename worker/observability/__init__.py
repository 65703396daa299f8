"""What the host tells operators: logs, metrics and traces, every channel redacted.

- :mod:`.redaction`: the one redaction every channel passes;
- :mod:`.logs`: one log stream, JSON off a terminal; a refused line is dropped and counted;
- :mod:`.compact`: the log on a terminal: a line per invocation, one traceback with the app's frames only;
- :mod:`.metrics`: the counters and gauges behind the run summary and ``/metrics``;
- :mod:`.tracing`: whether ``OTEL_*`` asks for traces; never imports OpenTelemetry;
- :mod:`.otel`: the ``otel`` extra's SDK, imported only when traces are asked for.
It imports only :mod:`worker.backends` of the host; every layer above may use it.
"""
