"""The deployments feature: builds of the workers, and the runs on them."""
