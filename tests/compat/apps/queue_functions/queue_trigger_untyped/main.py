# Copyright (c) Microsoft Corporation. All rights reserved.
# Licensed under the MIT License.
import logging

logger = logging.getLogger(__name__)


def main(msg: str) -> str:
    return msg
