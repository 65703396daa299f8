"""The web console at ``/`` of the endpoints server: functions, leases in flight, recent failures, poison, start-up facts.

What an operator of Flower, Hangfire or the Functions portal looks at first, drawn from what the host already knows:
its counters, the lease scheduler's held leases (which Azure's API cannot list), a bounded history sampled every
ten seconds, and a cached look at each trigger and poison queue that costs storage at most one call per queue every
few seconds while someone looks. The page is a static shell (no data in it, so it is served without the token) with
a small script that polls the JSON under ``/console/api/`` (behind the token, as ``/leases`` is) and builds rows with
DOM calls only, so message text is never parsed as HTML. Poison actions are POST-only and need the token: with none
set, the console is read-only.

- :mod:`.recorder`: the middleware that keeps handler times and recent failures, bounded;
- :mod:`.history`: the ring of ten-second samples the charts draw (fixed size, whatever the traffic);
- :mod:`.actions`: requeue all and purge, run beside the request that starts them, one at a time per function;
- :mod:`.poison`: each function's poison, cached, and the requeue / purge actions (the poison tools' code);
- :mod:`.state`: the views as JSON, from the host's parts;
- :mod:`.web`: the routes, the shell and its static files;
- :mod:`.merge`: the views of several worker processes as one, for the supervisor.
"""
