"""A small OTLP/HTTP trace receiver for the integration tests (tests/integration/otlp.rs).

It accepts POST /v1/traces, decodes the body with the official protobuf definitions
(opentelemetry-proto's ExportTraceServiceRequest) and appends one JSON line per span to
OUT/spans.jsonl; each request's raw body goes to OUT/bodies.bin and its headers to
OUT/headers.jsonl, so a test can look for what must never be exported. With --stall it
accepts each request and never answers (a collector that hangs).

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
        if self.path != "/v1/traces":
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
                for span in ss.spans:
                    lines.append(json.dumps(span_json(span, resource, scope)))
        out = self.server.out
        with LOCK:
            with open(os.path.join(out, "bodies.bin"), "ab") as f:
                f.write(body)
            with open(os.path.join(out, "headers.jsonl"), "a") as f:
                f.write(json.dumps({k.lower(): v for k, v in self.headers.items()}) + "\n")
            with open(os.path.join(out, "spans.jsonl"), "a") as f:
                for line in lines:
                    f.write(line + "\n")
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, help="folder for spans.jsonl and bodies.bin")
    parser.add_argument("--stall", action="store_true", help="accept requests, never answer")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.out = args.out
    server.stall = args.stall
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
