"""The service side of muster_a2a: SQL store, routes."""
