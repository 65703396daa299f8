"""A test server for OCI Queue (there is no emulator), its pytest fixture and the tests that pin it to the real SDK."""
