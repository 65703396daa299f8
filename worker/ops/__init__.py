"""Operating the host: the ``worker`` command, start-up checks, the supervisor, poison tools.

- :mod:`.cli`: the ``worker`` command; it loads what a command needs, so that
  ``worker run``'s supervisor loads neither the app nor the host;
- :mod:`.host_process`: the process that runs the host (``worker run
  --no-supervisor``, which the supervisor starts): the app loaded and checked,
  the host run, its exit code;
- :mod:`.scaffold`: ``worker init``, an app folder that runs at once;
- :mod:`.completion`: ``worker completion``, shell completion written from the
  command's parser;
- :mod:`.terminal`: what it prints for people (control characters from queue
  data written out, never obeyed);
- :mod:`.locate`: the one search every command makes for host.yaml / host.json
  and local.settings.json, up to the project's root;
- :mod:`.preflight`: start-up checks, every problem listed at once (exit 2);
- :mod:`.supervisor`: the process, or ``--processes N`` of them, that runs the
  host; replaces a recycled one at once and logs one that died unasked; never
  imports the app;
- :mod:`.open_files`: the soft limit on open files raised to the hard one at start;
- :mod:`.front`: the endpoints of ``--processes N`` on one port, served by the
  supervisor (imported only then: the web framework is most of a start);
- :mod:`.spark_cluster`: ``worker spark``, a standalone master and worker or a
  Spark Connect server from the installed pyspark, detached.

The top layer: it may import everything below, and nothing below imports it.
"""
