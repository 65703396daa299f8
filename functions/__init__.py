"""The sample app the host runs by default (``functions.function_app:app``)."""
