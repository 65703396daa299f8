"""Blob in -> blob out by {queueTrigger}: a sync, typed main in __init__.py, shared code imported relatively."""

import azure.functions as func

from ..shared_code.text import stamp


def main(msg: func.QueueMessage, source, copy: func.Out[bytes]) -> None:
    # source is unannotated: function.json's dataType binary makes it bytes.
    copy.set(stamp(msg.get_body().decode()).encode() + b" " + source)
