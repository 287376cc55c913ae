"""muster_mesh."""
