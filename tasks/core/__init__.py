"""Plumbing every stage shares: params, artifact paths, atomic I/O, errors, environment, text normalisation, the stage entry point."""
