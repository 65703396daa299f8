"""The runtime: the host's lifecycle and the path of a message through it.

``host`` starts and stops everything; ``listener`` receives (with
``Capacity`` bounding what is held); ``dispatcher`` runs handlers (sync ones
on ``threads``); ``completion`` deletes, retries or poisons; ``lease``
renews every held message from one scheduler; ``poison`` is the strategy
for where poison goes; ``endpoints`` serves the probes and ``/metrics``.
May import every layer below it (backends, settings, observability, the
shared types, bindings, middleware, the app); never ``worker.compat`` or
``worker.ops``.
"""
