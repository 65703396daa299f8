"""What the host tells operators.

- :mod:`.redaction`: the one redaction every channel passes (log lines, spans,
  HTTP answers, CLI messages): secrets known by their shape, and the process's
  own (the endpoint token) by their value;
- :mod:`.logs`: one log stream, JSON off a terminal, secrets redacted, levels
  by Functions' log categories (``always``: the ``host started`` line, written
  whatever the levels); a line the stream refuses is dropped and counted, never
  raised, and ``worker run`` writes to its own copy of stderr; the SDKs' own
  loggers held at WARNING unless the settings name them;
- :mod:`.compact`: the log's lines on a terminal: one per invocation, a
  message's traceback once with the app's frames only, routine lines left out;
- :mod:`.metrics`: the counters and gauges behind the run summary and ``/metrics``;
- :mod:`.tracing`: whether the ``OTEL_*`` variables ask for traces and why they
  cannot be had; never imports OpenTelemetry;
- :mod:`.otel`: the ``otel`` extra's SDK, imported only when traces are asked
  for: the ``Telemetry`` a host or ``worker send`` makes at start, and
  ``TracedQueues``, a backend whose calls are spans and whose puts carry
  their trace context in message properties; every span is redacted as it is
  exported.

Imports nothing of the host's but :mod:`worker.backends`: every layer above may use it.
"""
