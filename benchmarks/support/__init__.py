"""What the benchmark scripts share: the stack config, the load generator, CPU accounting, the placement model."""
