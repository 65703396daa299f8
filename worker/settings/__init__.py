"""Settings: host.yaml / host.json read into typed options, connection settings resolved, retry policies.

- :mod:`.config`: the host's schema and the loader (every error names file and line):
  ``HostConfig``, the host's settings, and ``FunctionOptions``, one function's
  (its ``functions:`` section over the global values);
- :mod:`.function_settings`: the settings a function may have of its own, one
  table from which the loader, ``HostConfig``, ``FunctionOptions``, the host's
  "function loaded" line and the settings reference are made;
- :mod:`.schema`: how one setting is read and checked (parsers, ranges, the
  errors' wording), for the host's schema and every section's alike;
- :mod:`.sections`: top-level sections the host does not read (``spark:``),
  kept as given with where each value came from, for the part that declares
  and reads them (Spark's middleware); one nothing declares is refused at start;
- :mod:`.functions_json`: host.json and local.settings.json read as Functions
  reads JSON (comments, trailing commas);
- :mod:`.local_settings`: local.settings.json into the environment, as Core Tools does;
- :mod:`.http_token`: the bearer token that guards the endpoints' data, from
  ``WORKER_HTTP_TOKEN`` or ``worker.httpTokenFile`` (never host.yaml), compared
  in constant time;
- :mod:`.connections`: a binding's ``connection`` resolved as Azure Functions does;
- :mod:`.retry`: ``retry:`` policies.

May import :mod:`worker.backends` and :mod:`worker.observability`, nothing else of the host.
"""
