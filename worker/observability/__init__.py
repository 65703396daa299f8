"""What the host tells operators: the structured log (``logs``) and the counters behind ``/metrics`` (``metrics``).

Imports nothing of the host's own: every layer above may use it.
"""
