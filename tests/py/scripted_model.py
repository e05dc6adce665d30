"""A scripted model endpoint for real agent CLIs, standard library only: the OpenAI Responses API
(`POST .../responses`, answered as a server-sent event stream) and the Anthropic Messages API
(`POST /v1/messages`, streamed or not as asked; `POST /v1/messages/count_tokens` answers 1).

    scripted_model.py TOOL_SUFFIX LOG

Prints `{"event": "listening", "port": N}` on stdout once it serves on 127.0.0.1. Each request
is answered from what it carries, so a turn's outcome shows what the agent offered the model:

- the last input item is the result of a tool it called (`function_call_output`, or a user
  message holding a `tool_result` block): a final text `tool answered: <output>`;
- otherwise, if a tool whose name ends with TOOL_SUFFIX is offered: a call of that tool with
  `{"message": "called by the scripted model"}`;
- otherwise (Messages API), if the agent announced such a tool as deferred and offers
  `ToolSearch` (Claude Code's tool search): a `ToolSearch` call selecting it, once;
- otherwise: a text `no tool ending in <TOOL_SUFFIX> yet`.

Every request appends one JSON line to LOG: the path, the names of the tools offered and what
was answered (`call`, `search` or `text`).
"""

import itertools
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SUFFIX, LOG = sys.argv[1], sys.argv[2]
MESSAGE = "called by the scripted model"
TOOL_USE_IDS = itertools.count(1)


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


def result_text(content):
    """The text of an Anthropic `tool_result` block's content."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def texts(content):
    """The texts of a Messages API `content` (a string or a list of blocks)."""
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or [] if isinstance(b, dict)]


def deferred_tool(body):
    """The name ending with TOOL_SUFFIX that the agent announced as a deferred tool (loaded
    with its `ToolSearch`), in the system prompt or a message not from the assistant."""
    said = texts(body.get("system"))
    for msg in body.get("messages") or []:
        if msg.get("role") != "assistant":
            said += texts(msg.get("content"))
    for text in said:
        for word in text.replace(",", " ").split():
            if "__" in word and word.endswith(SUFFIX):
                return word
    return None


def tool_use(name, arguments, kind):
    """A `tool_use` block; its id says which `kind` of call it was (`call` or `search`)."""
    return {"type": "tool_use", "id": "toolu_%s_%d" % (kind, next(TOOL_USE_IDS)), "name": name,
            "input": arguments}


def anthropic_answer(body):
    """The content blocks and stop reason for a Messages API request, and the log's note."""
    messages = [m for m in body.get("messages") or [] if m.get("role") != "system"]
    last = messages[-1] if messages else {}
    content = last.get("content") if isinstance(last.get("content"), list) else []
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results and results[-1].get("tool_use_id", "").startswith("toolu_call_"):
        text = "tool answered: " + result_text(results[-1].get("content"))
        return [{"type": "text", "text": text}], "end_turn", {"text": text}
    names = tool_names(body.get("tools"))
    for name in names:
        if name.endswith(SUFFIX):
            block = tool_use(name, {"message": MESSAGE}, "call")
            return [block], "tool_use", {"call": name}
    deferred = deferred_tool(body)
    if deferred and "ToolSearch" in names and not results:
        block = tool_use("ToolSearch", {"query": "select:" + deferred}, "search")
        return [block], "tool_use", {"search": deferred}
    text = "no tool ending in %s yet" % SUFFIX
    return [{"type": "text", "text": text}], "end_turn", {"text": text}


def anthropic_stream(body, blocks, stop):
    """The Messages API event stream of `blocks`."""
    usage = {"input_tokens": 1, "output_tokens": 1}
    start = {"id": "msg_scripted", "type": "message", "role": "assistant",
             "model": body.get("model", "scripted"), "content": [], "stop_reason": None,
             "stop_sequence": None, "usage": usage}
    stream = sse("message_start", {"message": start})
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            opened, delta = dict(block, text=""), {"type": "text_delta", "text": block["text"]}
        else:
            opened = dict(block, input={})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        stream += sse("content_block_start", {"index": index, "content_block": opened})
        stream += sse("content_block_delta", {"index": index, "delta": delta})
        stream += sse("content_block_stop", {"index": index})
    stream += sse("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                    "usage": {"output_tokens": 1}})
    return stream + sse("message_stop", {})


def sse(kind, data):
    data = dict(data, type=kind)
    return ("event: %s\ndata: %s\n\n" % (kind, json.dumps(data))).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.reply("application/json", json.dumps({"models": [], "data": []}).encode())

    def reply(self, kind, data):
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_request_of(self, body, said):
        with open(LOG, "a") as log:
            entry = {"path": self.path, "tools": tool_names(body.get("tools")), **said}
            log.write(json.dumps(entry) + "\n")

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        path = self.path.split("?")[0]
        if path.endswith("/messages/count_tokens"):
            return self.reply("application/json", json.dumps({"input_tokens": 1}).encode())
        if path.endswith("/messages"):
            return self.messages(body)
        item, said = answer(body)
        self.log_request_of(body, said)
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
        self.reply("text/event-stream", stream)

    def messages(self, body):
        blocks, stop, said = anthropic_answer(body)
        self.log_request_of(body, said)
        if body.get("stream"):
            return self.reply("text/event-stream", anthropic_stream(body, blocks, stop))
        done = {"id": "msg_scripted", "type": "message", "role": "assistant",
                "model": body.get("model", "scripted"), "content": blocks, "stop_reason": stop,
                "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
        self.reply("application/json", json.dumps(done).encode())


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(json.dumps({"event": "listening", "port": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
