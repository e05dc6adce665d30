"""The Python `mcp` 2.3.0 client in 2025-06-18 (legacy) mode with the runtime's GET stream
(tests/tests/e2e_live_list_sdk.rs, issue 21 "live list for legacy clients").

The stock SDK opens its GET stream only once `initialize` answered with an `Mcp-Session-Id`
(`StreamableHTTPTransport.handle_get_stream` returns at once while `self.session_id` is
unset), and SPEC §5 forbids the runtime to issue one: the bearer token is the session. The one
test-side hook here is a subclass of the SDK's own transport whose session id is a placeholder
that never goes on the wire (`_prepare_headers` drops it), so the SDK's unchanged
`handle_get_stream` opens, reads and reconnects the stream as it would for any server.

Prints one JSON object per line: `{"event": "listed", "tools": [...]}` once connected,
`{"event": "get-open"}` / `{"event": "get-ended"}` / `{"event": "get-error"}` from the SDK's
own GET stream log lines, and `{"event": "note", "method": ...}` for each notification.
Runs until killed.

Usage: live_list_client.py URL   (token in TUTTI_TEST_TOKEN)
"""

import asyncio
import json
import logging
import os
import sys

import httpx2
import mcp.client.streamable_http as streamable_http
from mcp import Client

PLACEHOLDER = "tutti-token-is-the-session"


def out(**kw):
    print(json.dumps(kw), flush=True)


class TokenSessionTransport(streamable_http.StreamableHTTPTransport):
    """The SDK's transport with a session that is never sent: the token is the session."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.session_id = PLACEHOLDER

    def _prepare_headers(self):
        headers = super()._prepare_headers()
        if headers.get(streamable_http.MCP_SESSION_ID) == PLACEHOLDER:
            del headers[streamable_http.MCP_SESSION_ID]
        return headers


class GetStreamEvents(logging.Handler):
    """Turns the SDK's own GET stream log lines into events."""

    def emit(self, record):
        text = record.getMessage()
        if text.startswith("GET SSE connection established"):
            out(event="get-open")
        elif text.startswith("GET stream disconnected"):
            out(event="get-ended")
        elif text.startswith("GET stream error"):
            out(event="get-error")


async def on_message(message):
    method = getattr(message, "method", None)
    if method is not None:
        out(event="note", method=method)


async def main():
    url = sys.argv[1]
    log = logging.getLogger(streamable_http.__name__)
    log.setLevel(logging.DEBUG)
    log.addHandler(GetStreamEvents())
    # The SDK's transport log on stderr, for a failing test's diagnostics.
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(to_stderr)
    streamable_http.StreamableHTTPTransport = TokenSessionTransport
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
