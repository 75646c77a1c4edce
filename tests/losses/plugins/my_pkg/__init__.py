"""A stand-in for a user's package, so the example configs' import paths resolve in tests."""
