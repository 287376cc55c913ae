"""The dispatch section of the service's settings (``Settings.dispatch``), defined with the others in
``muster_api.settings``."""

from muster_api.settings import DispatchSettings

__all__ = ["DispatchSettings"]
