"""The Python `mcp` 2.3.0 client in 2025-06-18 (legacy) mode with the runtime's GET stream
(tests/tests/e2e/catalog/live_list_sdk.rs, "live list for legacy clients").

The SDK's own, unchanged GET stream code runs (the runtime names the token's session id at
`initialize`); `get_stream_events.py` reports it.

Prints one JSON object per line: `{"event": "listed", "tools": [...]}` once connected,
`{"event": "get-open"}` / `{"event": "get-ended"}` / `{"event": "get-error"}` from the SDK's
own GET stream log lines, and `{"event": "note", "method": ...}` for each notification.
Runs until killed.

Usage: live_list_client.py URL   (token in TUTTI_TEST_TOKEN)
"""

import asyncio
import json
import os
import sys

import httpx2
import mcp.client.streamable_http as streamable_http
from mcp import Client

from get_stream_events import watch_get_stream


def out(**kw):
    print(json.dumps(kw), flush=True)


async def on_message(message):
    method = getattr(message, "method", None)
    if method is not None:
        out(event="note", method=method)


async def main():
    url = sys.argv[1]
    watch_get_stream(lambda event: out(event="get-" + event))
    headers = {"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as hc:
        transport = streamable_http.streamable_http_client(url, http_client=hc, terminate_on_close=False)
        async with Client(transport, mode="legacy", message_handler=on_message) as c:
            tools = (await c.list_tools()).tools
            out(event="listed", protocolVersion=str(c.protocol_version), tools=[t.name for t in tools])
            await asyncio.Event().wait()


try:
    asyncio.run(main())
except Exception as e:
    out(event="error", error=repr(e))
    sys.exit(1)
