"""Notifications: events a person must see (``[notify]`` in ``muster.toml``) sent through Apprise URLs by one sender
task per instance, from a durable outbox."""
