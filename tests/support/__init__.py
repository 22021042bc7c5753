"""Helpers the tests share: CLI runs, local servers (Redis, a Ray head), the gateway stack handle, network traps, waiting."""
