"""The service side of muster_mesh: SQL store, routes."""
