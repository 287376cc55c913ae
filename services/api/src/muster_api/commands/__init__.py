"""The ``muster`` command: ``cli`` parses the command line and runs ``serve``, ``worker``, ``migrate``, ``mcp`` and
``install``; ``startup`` checks a serve before it binds, ``eventloop`` picks the loop, ``logs`` configures logging;
``dispatch_commands`` and ``console`` are the commands for people, through ``muster_client`` against a running
service."""
