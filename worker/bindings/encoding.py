"""messageEncoding: how handler bytes become the text a queue stores, and back.

``base64`` is what Azure Functions and the Azure SDKs write, so their messages reach a handler intact.
``none`` stores UTF-8 text as it is.
"""

from __future__ import annotations

import base64
import binascii


class MessageDecodeError(ValueError):
    """The stored text is not valid under the configured messageEncoding."""


def encode(body: bytes | str, encoding: str) -> str:
    """Wire text for ``body``; str bodies are taken as UTF-8."""
    data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("messageEncoding none stores text: the body is not valid UTF-8; use base64") from None


def decode(text: str, encoding: str, *, utf8: bool = False) -> bytes:
    """Handler bytes from wire text; raises MessageDecodeError saying what is wrong.

    ``utf8``: the handler takes the body as ``str``, so bytes that are not UTF-8 are refused here too: like
    base64 that does not decode, no attempt could hand them over, and the message goes to poison at once rather
    than failing every attempt.
    """
    if encoding != "base64":
        return text.encode("utf-8")
    try:
        # Whitespace (line-wrapped base64) is skipped, as .NET's Convert.FromBase64String does.
        body = base64.b64decode("".join(text.split()).encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise MessageDecodeError(f"message is not valid base64 (messageEncoding is base64): {exc}") from None
    if utf8:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"message body is not valid UTF-8, and the handler takes it as str: {exc}") from None
    return body


def body_text(text: str, encoding: str) -> str:
    """A message's body as text for people (the CLI, the console): decoded when it decodes, the stored text
    otherwise."""
    try:
        return decode(text, encoding).decode("utf-8", errors="replace")
    except MessageDecodeError:
        return text
