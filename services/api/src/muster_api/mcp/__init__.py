"""``muster mcp``: the stdio MCP server through which coding agents use Muster.

It speaks MCP on stdin/stdout (the official ``mcp`` SDK, low-level server: the tools' input schemas are exactly the
contract's) and the REST API through ``muster_client``. It holds the agent's mesh session token (persisted per
service URL and agent_id in a 0600 file, never in a tool result), acknowledges inbox messages only once they were
returned, and does the Herdr auto-wake locally: the pane id never leaves this process.

Modules: ``settings`` (environment), ``identities`` (the token files), ``words`` (ages and listings in words),
``tools`` (names, descriptions, schemas, argument models), ``session`` (the agent's identity and inbox cursor),
``wake`` (following the inbox and waking the pane), ``handlers`` (one per tool), ``server`` (the MCP wiring),
``command`` (the ``muster mcp`` subcommand).
"""
