"""The ingress (serving.ingress): request checks, middlewares, colocated and direct ingress, metrics, replica status."""
