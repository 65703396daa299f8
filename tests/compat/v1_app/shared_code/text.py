"""A helper the functions import relatively (``from ..shared_code``) and absolutely (``from __app__.shared_code``)."""


def stamp(text: str) -> str:
    return f"[{text}]"
