"""The runtime: the host's lifecycle and the path of a message through it.

The path: :mod:`.host`, :mod:`.listener`, :mod:`.dispatcher` (with :mod:`.threads`), :mod:`.verdict`,
:mod:`.completion`. Beside it: :mod:`.lease`, :mod:`.poison`, :mod:`.backpressure`, :mod:`.faults`,
:mod:`.signals`. Recycling: :mod:`.recycle`, :mod:`.handover`, :mod:`.inflight`.
The endpoints: :mod:`.endpoints`, :mod:`.guard`, :mod:`.connections`, :mod:`.console`.
It may import every layer below it; never :mod:`worker.compat` or :mod:`worker.ops`.
"""
