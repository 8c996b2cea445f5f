"""SimPy side of the simulator: workers, routers and the workload driver as processes."""
