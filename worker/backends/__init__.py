"""Storage backends: the queue and blob protocols, and one package per service that implements them.

The protocols: :mod:`.queues`, :mod:`.blobs`, and :mod:`.storage` (what bindings ask of storage).
:mod:`.registry` picks a backend by connection string and imports an extra's SDK only when needed.
Shared by the remote backends: :mod:`.retrying`, :mod:`.failures`, :mod:`.receipts`, :mod:`.releasing`,
:mod:`.blocking` (blocking SDK calls in threads, a cancelled caller let go at once: OCI Queue, SQS).
The services: :mod:`.embedded` (a SQLite file, a blob folder), :mod:`.azure`, :mod:`.oci`, :mod:`.sqs`.
The lowest layer: it imports nothing else of the host.
To add a backend, see ARCHITECTURE.md, "Where to add".
"""
