"""Settings: host.yaml / host.json read into typed options, connection settings resolved, retry policies.

Loading: :mod:`.config` (``HostConfig``, ``FunctionOptions``), :mod:`.schema` (one setting read and checked),
:mod:`.function_settings` (the per-function settings, one table every consumer reads).
:mod:`.sections` keeps sections others declare (``spark:``); :mod:`.functions_json` reads Functions' JSON.
From the environment: :mod:`.local_settings`, :mod:`.http_token` (never host.yaml), :mod:`.connections`.
Policies: :mod:`.retry`.
It may import :mod:`worker.backends` and :mod:`worker.observability`, nothing else of the host.
"""
