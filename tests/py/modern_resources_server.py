"""A 2026-07-28 upstream with a resource that changes (tests/tests/e2e/catalog/beyond_rest.rs).

The Python `mcp` SDK's `MCPServer` (mcp 2.3.0): on the 2026-07-28 wire there is no
`resources/subscribe`; a client subscribes to `note://counter` with `subscriptions/listen`
(`resourceSubscriptions`), and tool `touch` publishes that resource's update to such streams.

Usage: modern_resources_server.py PORT   (streamable HTTP on 127.0.0.1:PORT, path /mcp)
"""

import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

mcp = MCPServer("tutti-py-modern-resources")
touched = 0


@mcp.resource("note://counter", mime_type="text/plain")
def counter() -> str:
    """How many times `touch` ran."""
    return f"touched {touched} times"


@mcp.tool()
async def touch(ctx: Context) -> str:
    """Changes note://counter and announces it to its subscribers."""
    global touched
    touched += 1
    await ctx.notify_resource_updated("note://counter")
    return f"touched {touched} times"


if __name__ == "__main__":
    mcp.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
