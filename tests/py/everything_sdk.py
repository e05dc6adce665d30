"""The Python `mcp` 2.3.0 client against server-everything through the runtime, in one session
(tests/tests/e2e/catalog/sdk_everything.rs, "Python SDK client, both eras, against
server-everything as an upstream").

Prints one JSON object per line, one per step, `event` naming the step:
`connected`, `prompts`, `resources`, `completion`, `logs`, `subscription`, `elicitation`,
`sampling`, `elicitation-declined`, `sampling-declined`, `done`; on a failure
`{"event": "error", ...}` and exit status 1.

Legacy mode (2025-06-18 surface): the runtime names the token's session id at `initialize`, so
the SDK's own GET stream is open (the runtime sends unclaimed log messages and `resources/updated` there);
`logging/setLevel` and `resources/subscribe`. Modern mode (2026-07-28): the log level travels
in each request's `_meta` (`io.modelcontextprotocol/logLevel`, the SDK's `log_level`), and the
subscription is a `subscriptions/listen` stream (`Client.listen(resource_subscriptions=...)`).

Usage: everything_sdk.py URL MODE KEY   (MODE legacy or 2026-07-28; token in TUTTI_TEST_TOKEN)
"""

import asyncio
import base64
import json
import os
import sys
import time

import httpx2
import mcp.client.streamable_http as streamable_http
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference

from get_stream_events import watch_get_stream

LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"
# server-everything's simulated logging and resource updates come every 5 s.
LONG_CALL = {"duration": 7, "steps": 7}
UPDATE_DEADLINE = 30


def out(**kw):
    print(json.dumps(kw), flush=True)


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def texts(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


class Callbacks:
    """The client's answers: `decline` switches elicitation and sampling to refusing."""

    def __init__(self):
        self.decline = False
        self.asked = []
        self.logs = []
        self.updates = asyncio.Queue()
        self.get_open = asyncio.Event()

    async def elicit(self, ctx, params):
        self.asked.append({"kind": "elicitation", "message": params.message})
        if self.decline:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace", "check": True})

    async def sample(self, ctx, params):
        self.asked.append({"kind": "sampling", "maxTokens": params.max_tokens})
        if self.decline:
            return types.ErrorData(code=-1, message="the user declined to sample")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="sampled by the everything test"),
            model="everything-test-model",
        )

    async def log(self, params):
        self.logs.append({"level": params.level, "logger": params.logger, "data": params.data})

    async def message(self, message):
        if isinstance(message, types.ResourceUpdatedNotification):
            await self.updates.put(message.params.uri)

    def get_event(self, event):
        if event == "open":
            self.get_open.set()


async def prompts(c, key):
    listed = [dump(p) for p in (await c.list_prompts()).prompts]
    simple = dump(await c.get_prompt(f"{key}_simple-prompt", {}))
    args = dump(await c.get_prompt(f"{key}_args-prompt", {"city": "Lyon", "state": "Rhône"}))
    team = dump(await c.get_prompt(f"{key}_completable-prompt", {"department": "Engineering", "name": "Alice"}))
    out(event="prompts", names=[p["name"] for p in listed], simple=simple, args=args, team=team)


async def resources(c):
    listed = [dump(r) for r in (await c.list_resources()).resources]
    templates = [dump(t) for t in (await c.list_resource_templates()).resource_templates]
    text_uri = next(r["uri"] for r in listed if r.get("mimeType", "").startswith("text/"))
    text = dump(await c.read_resource(text_uri))
    blob = dump(await c.read_resource("demo://resource/dynamic/blob/7"))
    decoded = [base64.b64decode(b["blob"]).decode("utf-8") for b in blob["contents"] if "blob" in b]
    dynamic = dump(await c.read_resource("demo://resource/dynamic/text/3"))
    out(event="resources", uris=[r["uri"] for r in listed], textUri=text_uri, text=text,
        blob=blob, blobDecoded=decoded, dynamicText=dynamic,
        templates=[t["uriTemplate"] for t in templates])
    return text_uri


async def completion(c, key):
    ref = PromptReference(type="ref/prompt", name=f"{key}_completable-prompt")
    department = dump(await c.complete(ref, {"name": "department", "value": "Eng"}))
    member = dump(await c.complete(ref, {"name": "name", "value": "A"}, {"department": "Engineering"}))
    tref = ResourceTemplateReference(type="ref/resource", uri="demo://resource/dynamic/text/{resourceId}")
    template = dump(await c.complete(tref, {"name": "resourceId", "value": "4"}))
    out(event="completion", department=department["completion"]["values"],
        member=member["completion"]["values"], template=template["completion"]["values"])


async def call(c, cb, event, name, args, **kw):
    cb.asked.clear()
    try:
        r = await c.call_tool(name, args, **kw)
        out(event=event, asked=list(cb.asked), isError=bool(r.is_error), text=texts(r))
    except MCPError as e:
        out(event=event, asked=list(cb.asked), failed=True, code=e.code, error=str(e))


async def requests_from_upstream(c, cb, key):
    await call(c, cb, "elicitation", f"{key}_trigger-elicitation-request", {})
    await call(c, cb, "sampling", f"{key}_trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20})
    cb.decline = True
    await call(c, cb, "elicitation-declined", f"{key}_trigger-elicitation-request", {})
    await call(c, cb, "sampling-declined", f"{key}_trigger-sampling-request", {"prompt": "no", "maxTokens": 5})
    cb.decline = False


async def logs(c, cb, key, legacy):
    """server-everything logs every 5 s once toggled on; a 7 s call is in flight for at least
    one of them. Before any level: none may arrive (on the call or, legacy, the GET stream)."""
    long_call = f"{key}_trigger-long-running-operation"
    toggled = await c.call_tool(f"{key}_toggle-simulated-logging", {})
    cb.logs.clear()
    await c.call_tool(long_call, LONG_CALL)
    before = list(cb.logs)
    set_level = None
    meta = None
    if legacy:
        await c.set_logging_level("debug")
        set_level = "ok"
    else:
        try:
            await c.set_logging_level("debug")
            set_level = "ok"
        except MCPError as e:
            set_level = {"code": e.code, "message": e.error.message}
        meta = {LOG_LEVEL_META: "debug"}
    cb.logs.clear()
    await c.call_tool(long_call, LONG_CALL, meta=meta)
    after = list(cb.logs)
    await c.call_tool(f"{key}_toggle-simulated-logging", {})
    out(event="logs", toggled=texts(toggled), before=before, setLevel=set_level, after=after)


async def wait_update(cb, uri):
    deadline = time.monotonic() + UPDATE_DEADLINE
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        got = await asyncio.wait_for(cb.updates.get(), left)
        if got == uri:
            return got


async def subscription(c, cb, key, uri, legacy):
    toggle = f"{key}_toggle-subscriber-updates"
    started = time.monotonic()
    if legacy:
        await asyncio.wait_for(cb.get_open.wait(), 30)
        subscribed = dump(await c.subscribe_resource(uri))
        await c.call_tool(toggle, {})
        started = time.monotonic()
        try:
            got = await wait_update(cb, uri)
        except TimeoutError:
            got = None
        took = time.monotonic() - started
        await c.call_tool(toggle, {})
        await c.unsubscribe_resource(uri)
        out(event="subscription", via="resources/subscribe", subscribed=subscribed, update=got, seconds=took)
        return
    async with c.listen(resource_subscriptions=[uri]) as sub:
        honored = dump(sub.honored)
        await c.call_tool(toggle, {})
        started = time.monotonic()
        try:
            event = await asyncio.wait_for(sub.__anext__(), UPDATE_DEADLINE)
            got = getattr(event, "uri", None)
        except TimeoutError:
            got = None
        took = time.monotonic() - started
        await c.call_tool(toggle, {})
    out(event="subscription", via="subscriptions/listen", honored=honored, update=got, seconds=took)


async def main():
    url, mode, key = sys.argv[1], sys.argv[2], sys.argv[3]
    legacy = mode == "legacy"
    cb = Callbacks()
    if legacy:
        watch_get_stream(cb.get_event)
    headers = {"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as hc:
        transport = streamable_http.streamable_http_client(url, http_client=hc, terminate_on_close=False)
        async with Client(transport, mode=mode, elicitation_callback=cb.elicit,
                          sampling_callback=cb.sample, logging_callback=cb.log,
                          message_handler=cb.message) as c:
            out(event="connected", protocolVersion=str(c.protocol_version))
            await prompts(c, key)
            uri = await resources(c)
            await completion(c, key)
            await logs(c, cb, key, legacy)
            await subscription(c, cb, key, uri, legacy)
            # Last: a 2026-07-28 client that refuses a sampling request leaves the call parked
            # at the runtime until its timeout, and while two calls are in flight a stdio
            # upstream's requests and log messages name no call (never guessed).
            await requests_from_upstream(c, cb, key)
            out(event="done")


try:
    asyncio.run(main())
except Exception as e:
    out(event="error", error=repr(e))
    sys.exit(1)
