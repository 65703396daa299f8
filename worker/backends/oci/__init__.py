"""OCI Queue on the official SDK: `connection` (connection strings, limits), `auth` (sign-in), `errors` (how a
failed call reads), `calls` (the blocking calls' threads and sockets), `admin` (queues and dead letters, the
control plane) and `queues` (the backend: messages).
"""
