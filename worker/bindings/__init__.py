"""Bindings: what a handler is called with and what its outputs become.

:mod:`.encoding` is message encoding. :mod:`.types` reads parameter annotations.
:mod:`.expressions` resolves ``{queueTrigger}`` and ``%Setting%``. :mod:`.blobs` holds blob inputs and outputs.
:mod:`.outputs` holds ``Out`` and queue outputs. :mod:`.errors` holds ``Unusable``, poisoned at once.
May import :mod:`worker.backends`, :mod:`worker.settings` and :mod:`worker.observability`; never the runtime.
"""
