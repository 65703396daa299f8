"""Azure Storage: connection strings as Functions reads them, queue and blob clients, and how their failures read."""
