#!/usr/bin/env python3
"""A minimal MCP stdio server for what the reference servers do not do: it lists its
tools over several pages (two per page), and its `grow` tool adds a tool and sends
notifications/tools/list_changed. Used only by the integration tests."""
import json
import sys

tools = [
    {"name": f"tool_{i}", "description": f"Tool number {i}.",
     "inputSchema": {"type": "object", "properties": {}}}
    for i in range(1, 5)
]
tools.append({"name": "grow", "description": "Adds a tool named late_tool.",
              "inputSchema": {"type": "object", "properties": {}}})
PAGE = 2


def send(msg):
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue
    params = msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "paged", "version": "1.0"}}})
    elif method == "tools/list":
        start = int(params.get("cursor") or 0)
        result = {"tools": tools[start:start + PAGE]}
        if start + PAGE < len(tools):
            result["nextCursor"] = str(start + PAGE)
        send({"jsonrpc": "2.0", "id": mid, "result": result})
    elif method == "tools/call":
        name = params.get("name")
        if name == "grow" and not any(t["name"] == "late_tool" for t in tools):
            tools.append({"name": "late_tool", "description": "Added by grow.",
                          "inputSchema": {"type": "object", "properties": {}}})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "content": [{"type": "text", "text": f"{name} ran"}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": f"no method {method}"}})
