"""Errors raised by the service itself (the packages have their own trees).

MusterApiError
├── ConfigurationError     bad settings or config file (startup refuses to run)
├── NotReadyError          database unreachable or migrations not at head (503)
├── MigrationError         a migration left rows breaking a foreign key (rolled back)
├── PayloadTooLargeError   request body over the service-wide bound (413)
├── ToolRefused            ``muster mcp`` refuses a tool call before sending anything (an MCP tool error)
└── CommandError           a `muster` command cannot do what it was asked (its message says what to do instead)
"""

from __future__ import annotations


class MusterApiError(Exception):
    """Root of the service's own errors."""


class ConfigurationError(MusterApiError):
    """Settings or a config file are invalid."""


class NotReadyError(MusterApiError):
    """The service cannot serve yet: say why."""


class MigrationError(MusterApiError):
    """The migration chain would have left the database inconsistent; nothing of it was committed."""


class PayloadTooLargeError(MusterApiError):
    """The request body is larger than the service accepts."""


class ToolRefused(MusterApiError):
    """A tool call the MCP server refuses itself (not checked in, a pane id outside Herdr…): the message says what
    to do instead."""


class CommandError(MusterApiError):
    """A ``muster`` command cannot go on; the message is one line that says what to do."""
