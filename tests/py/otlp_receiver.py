"""An OTLP/HTTP receiver for the observability tests.

Usage: otlp_receiver.py PORT CAPTURE_FILE

Listens on 127.0.0.1:PORT (0: any free port), prints `listening on N` once it does, and
decodes every POST with the official `opentelemetry-proto` package (PyPI, pinned in
scripts/install-test-tools): `/v1/traces` as ExportTraceServiceRequest, `/v1/metrics` as
ExportMetricsServiceRequest. Each request becomes one JSON line in CAPTURE_FILE:
`{"path": …, "request": <the message in protobuf's JSON mapping>}`, with trace and span ids
as lowercase hex (as W3C `traceparent` writes them; the mapping gives base64), or
`{"path": …, "error": …}` when the body does not decode (answered 400). Any other path is
recorded as `{"path": …}` and answered 404. Runs until killed.

Debian 12's Prometheus (2.42) has no OTLP receiver (it came in 2.47), so metrics come here too.
"""

import base64
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

SERVICES = {
    "/v1/traces": (
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
    ),
    "/v1/metrics": (
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
    ),
}
ID_KEYS = ("traceId", "spanId", "parentSpanId")


def hex_ids(value):
    """The mapping's base64 ids as hex, everywhere in `value`."""
    if isinstance(value, dict):
        return {
            k: (base64.b64decode(v).hex() if k in ID_KEYS and isinstance(v, str) else hex_ids(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [hex_ids(v) for v in value]
    return value


class Handler(BaseHTTPRequestHandler):
    capture = None
    lock = threading.Lock()

    def record(self, line):
        with self.lock:
            self.capture.write(json.dumps(line) + "\n")
            self.capture.flush()

    def answer(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        service = SERVICES.get(self.path)
        if service is None:
            self.record({"path": self.path})
            self.answer(404)
            return
        request_type, response_type = service
        try:
            request = request_type.FromString(body)
        except DecodeError as e:
            self.record({"path": self.path, "error": str(e)})
            self.answer(400)
            return
        self.record({"path": self.path, "request": hex_ids(MessageToDict(request))})
        self.answer(200, response_type().SerializeToString())

    def log_message(self, *args):
        pass


def main():
    port, capture = int(sys.argv[1]), sys.argv[2]
    Handler.capture = open(capture, "a", encoding="utf-8")
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
