"""Storage backends: the queue and blob protocols, and one package per service that implements them.

``queues`` and ``blobs`` are the protocols (with each backend's own limits and
capabilities); ``registry`` picks a backend from a connection string;
``retrying`` is the one retry policy remote backends share; ``embedded``
(SQLite file and a blob folder), ``azure`` and ``oci`` are the services. The
lowest layer: imports nothing else of the host. A new backend is a package
here plus one entry in ``registry``, and must pass ``tests/conformance``.
"""
