"""Untyped parameters: the trigger is a func.QueueMessage, a dataType string blob a str; a queue output."""


def main(msg, note, forward):
    assert isinstance(note, str), type(note)
    forward.set(msg.get_body().decode())
