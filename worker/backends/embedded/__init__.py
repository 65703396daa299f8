"""The embedded backend: a SQLite queue file and a blob folder beside it, for zero set-up."""
