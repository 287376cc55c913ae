"""muster_dispatch."""
