"""OCI Queue on the official SDK: connection strings and sign-in, the blocking calls' threads, the queue backend."""
