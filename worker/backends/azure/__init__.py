"""Azure Storage: connection strings as Functions reads them, queue and blob clients, how failures read, and the
hot path's Delete Message (``deletes.py``)."""
