"""The service side of muster_dispatch: SQL store, routes."""
