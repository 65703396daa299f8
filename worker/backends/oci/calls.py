"""Whether a failed OCI request sent anything: a put that never left may be sent again.

:func:`sending` notes a request's first byte out; any other failed put may have been stored, so it is not resent.
Where the SDK's vendored pools differ (:func:`track_sending`), every failure counts as sent, after one warning.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from worker.dependencies import fall_back

#: Per thread: whether the request of the call under way (see :func:`sending`) has sent anything.
SENDING = threading.local()


def tracked(pool_class: Any) -> type:
    """``pool_class`` (a vendored urllib3 pool class, untyped) whose connections note, in the sending thread, that a
    request's first byte went out."""
    base = pool_class.ConnectionCls

    class Connection(base):  # type: ignore[misc, valid-type]
        def send(self, data: Any) -> None:
            if self.sock is None:  # http.client would connect here: a failure to connect sends nothing
                self.connect()
            SENDING.sent = True
            super().send(data)

    return type(f"Tracked{pool_class.__name__}", (pool_class,), {"ConnectionCls": Connection})


@contextmanager
def sending() -> Iterator[None]:
    """Around one SDK call in this thread: an exception out of it gets ``request_sent``, whether any byte of the
    request left for the service (on a tracked connection, see :func:`track_sending`).

    False proves the service never saw the request; True means it may have, and may have done it.
    """
    SENDING.sent = False
    try:
        yield
    except Exception as exc:
        # A thread whose clients could not be tracked cannot tell: the call may have been sent.
        exc.request_sent = SENDING.sent or getattr(SENDING, "untracked", False)  # type: ignore[attr-defined]
        raise


def track_sending(client: Any) -> None:
    """Make ``client``'s connections record the sending of each request (see :func:`sending`).

    The clients of a thread are its own, so where the SDK's pools are not as expected the thread is marked
    untracked (a per-thread flag) and :func:`sending` counts its failed calls as sent.
    """
    try:
        managers = [adapter.poolmanager for adapter in client.base_client.session.adapters.values()]
        classes = [manager.pool_classes_by_scheme for manager in managers]
        replaced = [{scheme: tracked(cls) for scheme, cls in pools.items()} for pools in classes]
        if not replaced or not all(callable(getattr(cls.ConnectionCls, "send", None)) for cls in classes[0].values()):
            raise AttributeError("no connection pools with a ConnectionCls that sends")
    except (AttributeError, TypeError) as exc:
        fall_back(
            "oci",
            f"the vendored connection pools of its clients: {exc}",
            "every failed call counts as possibly sent, so a put that never left is reported, not sent again",
        )
        SENDING.untracked = True
        return
    for manager, pools in zip(managers, replaced, strict=True):
        manager.pool_classes_by_scheme = pools
