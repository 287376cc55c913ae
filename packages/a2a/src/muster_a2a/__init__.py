"""muster_a2a."""
