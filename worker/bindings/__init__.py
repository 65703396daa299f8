"""Bindings: what a handler is called with and what its outputs become.

Message encoding, parameter types, binding expressions (``{queueTrigger}``,
``%Setting%``), blob inputs and outputs, queue outputs. May import
``worker.backends``, ``worker.settings`` and the shared types (``worker.model``,
``worker.message``, ``worker.context``); never the runtime.
"""
