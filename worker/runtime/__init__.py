"""The runtime: the host's lifecycle and the path of a message through it.

- :mod:`.host`: starts and stops everything, in order; :mod:`.faults`: its own tasks,
  one that fails reported at once and the host stopped;
- :mod:`.listener`: when to receive (``Capacity`` bounds what is held);
- :mod:`.dispatcher`: decodes, runs handlers with the middleware's hooks;
  :mod:`.threads`: sync handlers' threads, their timeout and grace;
- :mod:`.verdict`: the one place that decides what an attempt comes to, poison included;
- :mod:`.completion`: carries the verdict out (delete, retry, release, poison);
- :mod:`.poison`: where poison goes (one policy per kind of backend) and what
  the poison tools may ask of it;
- :mod:`.lease`: the one scheduler that renews every held message and applies
  checkpoints;
- :mod:`.backpressure`: while completions on a backend fail for storage, its
  listeners receive nothing;
- :mod:`.recycle`: a sync handler past functionTimeout: the process hands its
  message to the next one and exits; :mod:`.handover`: the file it hands them
  over in, which the supervisor reads;
- :mod:`.inflight`: what a worker process holds, written for its supervisor;
- :mod:`.signals`: stop signals read per sender, so that a signal to the process group drains once;
- :mod:`.endpoints`: probes, ``/metrics``, ``/leases``; :mod:`.guard`: who may
  read what (the token, loopback, the ``Host`` header); :mod:`.connections`:
  how many connections stay open and for how long, and a quiet accept loop;
- :mod:`.console`: the web console at ``/``.

May import every layer below it (backends, settings, observability, the
shared types, bindings, middleware, the app); never :mod:`worker.compat` or
:mod:`worker.ops`.
"""
