"""The GET stream of the Python `mcp` 2.3.0 SDK's streamable-HTTP transport, as events.

The stock SDK opens its GET stream once `initialize` answered with an `Mcp-Session-Id`; the
runtime names the token's session id there (SPEC §11), so the SDK's own, unchanged
`handle_get_stream` opens, reads and reconnects the stream as it would for any server.
`watch_get_stream()` turns the SDK's GET stream log lines into callbacks (`open`, `ended`,
`error`).
"""

import logging

import mcp.client.streamable_http as streamable_http


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


def watch_get_stream(on_event):
    """GET stream events go to `on_event`, and the SDK's transport log to stderr (a failing
    test's diagnostics)."""
    log = logging.getLogger(streamable_http.__name__)
    log.setLevel(logging.DEBUG)
    log.addHandler(GetStreamEvents(on_event))
    to_stderr = logging.StreamHandler()
    to_stderr.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(to_stderr)
