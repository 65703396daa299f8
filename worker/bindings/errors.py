"""What no attempt can use: a value from one message, or one its handler set, that retrying cannot change.

Such a message goes to poison on its first attempt, with the reason.
Examples: a blob name the service refuses, a null ``{name}``, a queue output no message can carry.
"""

from __future__ import annotations


class Unusable(ValueError):
    """A value no attempt can use; the message goes to poison at once with this reason."""


class UnusableOutput(Unusable, TypeError):
    """A handler set an output value of a type its binding cannot send or write."""
