"""The person's side of the confirmed-call tests (tests/tests/e2e/calls/confirm*.rs): the official
Python SDK client (mcp 2.3.0) calls `fx_destroy` once and answers the question it is asked.

Usage: confirm_client.py ANSWER URL MODE [ARGUMENTS]   (token in TUTTI_TEST_TOKEN)
  ANSWER  accept | decline | cancel: the elicitation callback's action;
          none: no elicitation capability; never: the callback never returns
  MODE    the SDK's Client mode: legacy (2025-06-18) or auto (2026-07-28 where offered)
  ARGUMENTS  the call's arguments as a JSON object (default {})

Prints one JSON line {"version", "asked", "result", "seconds"}; with `never` it exits at
once after it (the callback is still waiting then).
"""

import asyncio
import json
import os
import sys
import time

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main():
    answer, url, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    arguments = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    headers = {"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]}
    asked = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        if answer == "never":
            await asyncio.sleep(3600)
        return types.ElicitResult(action=answer, content={} if answer == "accept" else None)

    kw = {} if answer == "none" else dict(elicitation_callback=on_elicit)
    async with httpx2.AsyncClient(headers=headers, timeout=60) as hc:
        async with Client(streamable_http_client(url, http_client=hc), mode=mode, **kw) as c:
            started = time.monotonic()
            r = await c.call_tool("fx_destroy", arguments)
            d = r.model_dump(mode="json", by_alias=True, exclude_none=True)
            print(json.dumps({"version": c.protocol_version, "asked": asked, "result": d,
                              "seconds": time.monotonic() - started}), flush=True)
            if answer == "never":
                os._exit(0)  # the callback still waits: do not wait for it


asyncio.run(main())
