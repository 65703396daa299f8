"""Operating the host: the ``worker`` command, start-up checks, the supervisor, poison tools.

Commands: :mod:`.cli`, :mod:`.scaffold` (``worker init``), :mod:`.completion`, :mod:`.spark_cluster`.
For people: :mod:`.terminal` (control characters shown, never obeyed); :mod:`.locate` (the settings search).
Start: :mod:`.preflight` (every problem at once, exit 2), :mod:`.open_files`, :mod:`.host_process`.
Processes: :mod:`.supervisor` (never imports the app), :mod:`.front` (one port for ``--processes N``).
The top layer: it may import everything below, and nothing below imports it.
"""
