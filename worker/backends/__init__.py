"""Storage backends: the queue and blob protocols, and one package per service that implements them.

- :mod:`.queues`: the queue protocol (``QueueBackend``, each backend's ``Limits``
  and ``Capabilities``, the errors; ``CountsByVisibility``, for a backend that
  can split a queue's count into visible and invisible; message properties
  where a service has them);
- :mod:`.blobs`: the blob protocol; :mod:`.storage`: what bindings ask for
  storage by connection name;
- :mod:`.registry`: picks a backend from a connection string, and imports the
  OCI backend (the ``oci`` extra) only when an ``oci://`` connection opens and
  the SQS one (``sqs``) only when an ``sqs://`` one does; without the SDK such
  a connection is a start-up problem;
- :mod:`.retrying`: the retry policy the remote backends share (transient
  failures, a service's ``retry-after`` waited within a call's budget, puts sent
  again only where nothing was done); :mod:`.failures`: what they share about
  failures (connection-string errors, network causes);
- :mod:`.receipts`: the book of receipts handed out, for services that cannot
  tell a stale receipt from a gone message (OCI Queue, SQS);
- :mod:`.releasing`: what a receive cancelled under way brings is released
  at once: on the event loop (embedded, Azure) and, counted, in the threads of
  the backends whose SDKs block; :mod:`.blocking`: those backends' calls in
  threads, a cancelled caller let go at once (OCI Queue, SQS);
- the services: :mod:`.embedded` (SQLite file and blob folder), :mod:`.azure`,
  :mod:`.oci`, :mod:`.sqs`.

The lowest layer: imports nothing else of the host. A new backend is a package
here (implementing ``QueueBackend`` and ``BlobStore``, with its own ``Limits``
and ``Capabilities``) plus one ``BackendKind`` in :mod:`.registry` (an SDK that
is not a core dependency is an extra, imported when a connection opens, and its
kind's ``problem`` names the install command), and must pass
``tests/conformance`` (add it to the ``backend_kind`` parameters, and its
emulator's fixture and tier marker to ``tests/conftest.py`` and
``tests/tiers.py``, as ``sqs`` and its ``moto_server`` are).
"""
