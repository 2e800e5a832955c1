"""A small OTLP/HTTP trace receiver for the integration tests (tests/integration/otlp.rs).

It accepts POST /v1/traces, decodes the body with the official protobuf definitions
(opentelemetry-proto's ExportTraceServiceRequest) and appends one JSON line per span to
OUT/spans.jsonl; each request's raw body goes to OUT/bodies.bin and its headers to
OUT/headers.jsonl (with the request's path and query under ":path"), so a test can look
for what must never be exported. Modes for collectors that misbehave: --stall accepts
each request and never answers (a collector that hangs); --status CODE answers every
request with that status and a short text body; --max-body BYTES answers 413 to a body
larger than that (and keeps nothing of it); --reject N answers 200 with a partial success
rejecting N spans of each request (the others are kept).

It listens on 127.0.0.1 on a free port and prints that port on its first line of stdout.
Run it with the tests' virtual environment (AGENTBATCH_TEST_PYTHON, set by tests/run.sh).
"""

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

LOCK = threading.Lock()


def any_value(v):
    """An AnyValue as plain JSON: strings, ints, floats, bools, lists."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    if kind is None:
        return None
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


def span_json(span, resource, scope):
    return {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "name": span.name,
        # SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT, ... as the enum names them
        "kind": Span.SpanKind.Name(span.kind),
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "attributes": attributes(span.attributes),
        "events": [
            {"name": e.name, "time_ns": e.time_unix_nano, "attributes": attributes(e.attributes)}
            for e in span.events
        ],
        "status": {"code": span.status.code, "message": span.status.message},
        "resource": resource,
        "scope": scope,
    }


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        if self.server.stall:
            time.sleep(3600)
            return
        if self.server.status:
            self.reply(self.server.status, b"refused by the test receiver: no entry")
            return
        if self.server.max_body is not None and length > self.server.max_body:
            self.reply(413, b"request entity too large for the test receiver")
            return
        if self.path.split("?")[0] != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                scope = ss.scope.name
                spans = list(ss.spans)
                if self.server.reject:
                    spans = spans[self.server.reject:]
                for span in spans:
                    line = span_json(span, resource, scope)
                    line["scope_version"] = ss.scope.version
                    lines.append(json.dumps(line))
        out = self.server.out
        with LOCK:
            with open(os.path.join(out, "bodies.bin"), "ab") as f:
                f.write(body)
            with open(os.path.join(out, "headers.jsonl"), "a") as f:
                headers = {k.lower(): v for k, v in self.headers.items()}
                headers[":path"] = self.path
                f.write(json.dumps(headers) + "\n")
            with open(os.path.join(out, "spans.jsonl"), "a") as f:
                for line in lines:
                    f.write(line + "\n")
        answer = ExportTraceServiceResponse()
        if self.server.reject:
            answer.partial_success.rejected_spans = self.server.reject
            answer.partial_success.error_message = "test receiver: span quota exceeded"
        self.reply(200, answer.SerializeToString(), "application/x-protobuf")

    def reply(self, status, body, content_type="text/plain"):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, help="folder for spans.jsonl and bodies.bin")
    parser.add_argument("--stall", action="store_true", help="accept requests, never answer")
    parser.add_argument("--status", type=int, default=0, help="answer every request so")
    parser.add_argument("--max-body", type=int, default=None, help="413 above this size")
    parser.add_argument("--reject", type=int, default=0, help="partial success: reject N")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.out = args.out
    server.stall = args.stall
    server.status = args.status
    server.max_body = args.max_body
    server.reject = args.reject
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
