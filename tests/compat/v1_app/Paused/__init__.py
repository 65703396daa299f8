raise RuntimeError("a disabled function's module is not imported")
