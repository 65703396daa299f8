"""Invocation ids: the text of a version-4 UUID, as in Functions, unique in a process and across a fork."""

from __future__ import annotations

import os
import uuid

from worker.invocation import new_invocation_id


def test_ids_are_version_4_uuids_in_their_canonical_text_and_never_repeat() -> None:
    ids = [new_invocation_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    for text in ids[:100]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text, "not the canonical lower-case 8-4-4-4-12 form"
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_a_forked_child_draws_a_random_part_of_its_own() -> None:
    """A process forked after the import (an embedding server's workers) must not repeat its parent's ids."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write one id and leave without running the parent's cleanup
        os.write(write, new_invocation_id().encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    parent = new_invocation_id()
    assert uuid.UUID(child).version == 4
    assert child[:24] != parent[:24], f"the child's id {child} shares its random part with the parent's {parent}"
