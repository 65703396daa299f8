"""Code the functions share, beside their folders, as Functions v1 apps keep it.

Importing it leaves a line in the file ``V1_IMPORTS`` names, when it is set: the tests count the app's imports
(import-time code, such as creating queues or tables, must run once per process that runs the app).
"""

import os
from pathlib import Path

if os.environ.get("V1_IMPORTS"):
    with Path(os.environ["V1_IMPORTS"]).open("a", encoding="utf-8") as imports:
        imports.write(f"{os.getpid()}\n")
