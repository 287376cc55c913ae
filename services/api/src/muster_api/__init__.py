"""Muster service: composes mesh, A2A and dispatch behind one REST API."""

from importlib.metadata import version

__version__ = version("muster-api")

__all__ = ["__version__"]
