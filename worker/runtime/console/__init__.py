"""The web console at ``/`` of the endpoints server: functions, leases, recent failures, poison, start-up facts.

It draws on what the host knows: counters, held leases, sampled history, a cached look at each queue.
The page is a static shell, served without the token; its script polls ``/console/api/`` behind the token.
Rows are built with DOM calls only, so message text is never parsed as HTML. Poison actions need the token.
Modules: :mod:`.recorder`, :mod:`.history`, :mod:`.actions`, :mod:`.poison`, :mod:`.state`, :mod:`.web`,
and :mod:`.merge` (several processes as one).
"""
