"""Benchmarks (scripts writing ``results/*.json``) and the gateway stack support they share with the tests."""
