"""The Python `mcp` 2.3.0 SDK's streamable-HTTP transport with the runtime's GET stream.

The stock SDK opens its GET stream only once `initialize` answered with an `Mcp-Session-Id`
(`StreamableHTTPTransport.handle_get_stream` returns at once while `self.session_id` is
unset), and SPEC §5 forbids the runtime to issue one: the bearer token is the session. The one
test-side hook is a subclass of the SDK's own transport whose session id is a placeholder that
never goes on the wire (`_prepare_headers` drops it), so the SDK's unchanged
`handle_get_stream` opens, reads and reconnects the stream as it would for any server.

`use_token_session()` installs it; `GetStreamEvents` turns the SDK's own GET stream log lines
into callbacks (`open`, `ended`, `error`).
"""

import logging

import mcp.client.streamable_http as streamable_http

PLACEHOLDER = "tutti-token-is-the-session"


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
    """Calls `on_event("open" | "ended" | "error")` from the SDK's own GET stream log lines."""

    def __init__(self, on_event):
        super().__init__()
        self.on_event = on_event

    def emit(self, record):
        text = record.getMessage()
        if text.startswith("GET SSE connection established"):
            self.on_event("open")
        elif text.startswith("GET stream disconnected"):
            self.on_event("ended")
        elif text.startswith("GET stream error"):
            self.on_event("error")


def use_token_session(on_event):
    """Makes `streamable_http_client` use `TokenSessionTransport`; GET stream events go to
    `on_event`, and the SDK's transport log to stderr (a failing test's diagnostics)."""
    log = logging.getLogger(streamable_http.__name__)
    log.setLevel(logging.DEBUG)
    log.addHandler(GetStreamEvents(on_event))
    to_stderr = logging.StreamHandler()
    to_stderr.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(to_stderr)
    streamable_http.StreamableHTTPTransport = TokenSessionTransport
