"""A scripted model endpoint for real agent CLIs: the OpenAI Responses API (`POST .../responses`,
answered as a server-sent event stream), standard library only.

    scripted_model.py TOOL_SUFFIX LOG

Prints `{"event": "listening", "port": N}` on stdout once it serves on 127.0.0.1. Each request
is answered from what it carries, so a turn's outcome shows what the agent offered the model:

- the last input item is a tool result (`function_call_output`): a final text
  `tool answered: <output>`;
- otherwise, if a tool whose name ends with TOOL_SUFFIX is offered: a call of that tool with
  `{"message": "called by the scripted model"}`;
- otherwise: a text `no tool ending in <TOOL_SUFFIX> yet`.

Every request appends one JSON line to LOG: the path, the names of the tools offered and what
was answered.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SUFFIX, LOG = sys.argv[1], sys.argv[2]
MESSAGE = "called by the scripted model"


def tool_names(tools):
    """The names of the offered tools, namespaced ones as `<namespace><name>`."""
    names = []
    for tool in tools or []:
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                names.append(tool.get("name", "") + inner.get("name", ""))
        elif tool.get("name"):
            names.append(tool["name"])
        elif (tool.get("function") or {}).get("name"):
            names.append(tool["function"]["name"])
    return names


def output_text(item):
    output = item.get("output")
    if isinstance(output, list):
        return "".join(part.get("text", "") for part in output if isinstance(part, dict))
    if isinstance(output, dict):
        return output.get("content") or json.dumps(output)
    return str(output)


def answer(body):
    """The output item for this request and what the log says of it."""
    items = body.get("input") or []
    last = items[-1] if items else {}
    if last.get("type") == "function_call_output":
        text = "tool answered: " + output_text(last)
        return message(text), {"text": text}
    tools = body.get("tools") or []
    for tool in tools:
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if inner.get("name", "").endswith(SUFFIX):
                    return call(inner["name"], tool["name"]), {"call": tool["name"] + inner["name"]}
        elif tool.get("name", "").endswith(SUFFIX):
            return call(tool["name"], None), {"call": tool["name"]}
    text = "no tool ending in %s yet" % SUFFIX
    return message(text), {"text": text}


def message(text):
    return {
        "type": "message",
        "id": "msg_scripted",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(name, namespace):
    item = {
        "type": "function_call",
        "id": "fc_scripted",
        "call_id": "call_scripted",
        "name": name,
        "arguments": json.dumps({"message": MESSAGE}),
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def sse(kind, data):
    data = dict(data, type=kind)
    return ("event: %s\ndata: %s\n\n" % (kind, json.dumps(data))).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"models": [], "data": []}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        item, said = answer(body)
        with open(LOG, "a") as log:
            entry = {"path": self.path, "tools": tool_names(body.get("tools")), **said}
            log.write(json.dumps(entry) + "\n")
        response = {"id": "resp_scripted", "object": "response", "status": "in_progress"}
        done = dict(response, status="completed", output=[item], usage={
            "input_tokens": 1, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 2,
        })
        stream = (
            sse("response.created", {"response": response})
            + sse("response.output_item.done", {"output_index": 0, "item": item})
            + sse("response.completed", {"response": done})
        )
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(stream)))
        self.end_headers()
        self.wfile.write(stream)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(json.dumps({"event": "listening", "port": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
