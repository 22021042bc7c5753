"""The whole gateway on the embedded stack: every test here uses the `stack` fixture (tests/serving/conftest.py)."""
