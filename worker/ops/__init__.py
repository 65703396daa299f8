"""Operating the host: the ``worker`` command, start-up checks, the supervisor of ``--processes N``, poison tools.

The top layer: it may import everything below, and nothing below imports it.
"""
