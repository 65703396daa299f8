"""OpenTelemetry traces: the SDK's real OTLP/HTTP exporter against a receiver the tests start."""
