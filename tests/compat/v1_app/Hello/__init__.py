raise RuntimeError("an HTTP function's module is not imported")
