"""Adapters across replicas (serving.placement): the spread router, pins and reports."""
