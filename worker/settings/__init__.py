"""Settings: host.yaml / host.json read into typed options, connection settings resolved, retry policies.

``config`` holds the schema and the loader (every error names file and line);
``connections`` resolves a binding's ``connection`` as Azure Functions does;
``retry`` parses ``retry:`` policies. May import ``worker.backends`` (to read
connection strings) and nothing else of the host.
"""
