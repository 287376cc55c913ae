"""The commands of ``muster`` for people: the mesh (agents, checkin, send, inbox, checkout) and remote A2A agents,
through ``muster_client`` against a running service (``MUSTER_URL``, default http://127.0.0.1:8000; ``MUSTER_API_KEY``
when the service has keys).

Every command takes ``--json``; on a terminal it draws tables, colours and spinners (rich), piped it writes plain
text. A failure is one line on stderr saying what to do, with a non-zero exit status (1: refused or failed,
3: no service at that URL, 130: interrupted), never a traceback.
"""

from muster_api.commands.console.commands import register

__all__ = ["register"]
