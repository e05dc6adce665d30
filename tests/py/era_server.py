"""A 2026-07-28 upstream for the era-hygiene tests (tests/tests/e2e/calls/era_hygiene.rs).

The Python `mcp` SDK's dual-era `MCPServer` (mcp 2.3.0): it answers a modern request with
`resultType` and `_meta["io.modelcontextprotocol/serverInfo"]` naming itself, which must
never reach a client of the runtime as such.

Usage: era_server.py PORT   (streamable HTTP on 127.0.0.1:PORT, path /mcp)
       era_server.py stdio  (stdio)
"""

import sys

from mcp.server import MCPServer

mcp = MCPServer("tutti-py-era")


@mcp.tool()
def measure(label: str) -> dict:
    """Returns a labelled measurement as structured content."""
    return {"label": label, "value": 1.5, "count": 3}


if __name__ == "__main__":
    if sys.argv[1:] == ["stdio"]:
        mcp.run(transport="stdio")
    else:
        mcp.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
