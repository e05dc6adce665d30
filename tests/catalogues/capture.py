#!/usr/bin/env python3
"""Captures one MCP stdio server's tools/list (every page) as a catalogue for docs/RISK.md.

Usage: capture.py NAME SOURCE COMMAND [ARGS...] > tests/catalogues/NAME.json
(SOURCE names the package and version, e.g. "npm @modelcontextprotocol/server-memory@2026.8.31").
Keeps name, description and annotations of each tool. Standard library only."""
import json, subprocess, sys

def main():
    name, source, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    n = 0
    def rpc(method, params):
        nonlocal n
        n += 1
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n")
        p.stdin.flush()
        while True:
            line = p.stdout.readline()
            if not line:
                raise SystemExit(f"{name}: server closed")
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("id") == n:
                if "error" in m:
                    raise SystemExit(f"{name}: {m['error']}")
                return m["result"]
    init = rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "catalogue", "version": "1"}})
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"); p.stdin.flush()
    tools, cursor = [], None
    while True:
        r = rpc("tools/list", {"cursor": cursor} if cursor else {})
        tools += r.get("tools", [])
        cursor = r.get("nextCursor")
        if not cursor:
            break
    p.kill()
    keep = ("name", "description", "annotations")
    out = {"server": name, "source": source,
           "serverInfo": init.get("serverInfo", {}),
           "tools": [{k: t[k] for k in keep if k in t} for t in tools]}
    print(json.dumps(out, indent=1, ensure_ascii=False))

main()
