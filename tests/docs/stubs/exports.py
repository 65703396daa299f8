"""The app's own code the checkpoint example imports (docs/leases.md, Resumable work)."""


def write_page(table: str, page: int) -> None:
    """Write one page of ``table``: here, nothing."""
