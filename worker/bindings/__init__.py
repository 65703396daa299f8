"""Bindings: what a handler is called with and what its outputs become.

:mod:`.encoding` (message encoding), :mod:`.types` (parameter annotations),
:mod:`.expressions` (``{queueTrigger}``, ``%Setting%``), :mod:`.blobs` (blob
inputs and outputs), :mod:`.outputs` (``Out``, queue outputs) and
:mod:`.errors` (``Unusable``: what no attempt of a message could use, poisoned
at once). May import :mod:`worker.backends`, :mod:`worker.settings` and
:mod:`worker.observability`; never the runtime.
"""
