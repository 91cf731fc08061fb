"""Generated gRPC code; regenerate with ``make proto`` (tests check it matches the .proto sources)."""
