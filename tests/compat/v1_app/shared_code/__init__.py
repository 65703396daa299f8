"""Code the functions share, beside their folders, as Functions v1 apps keep it."""
