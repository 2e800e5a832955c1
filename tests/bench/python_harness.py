#!/usr/bin/env python3
"""The classic agent loop in Python with the official Anthropic SDK (asyncio), driven
against agentbatch's simulator, to compare the loop's own CPU per 1,000 model turns with
agentbatch's (docs/PERFORMANCE.md). Not part of the test suite.

    pip install anthropic
    agentbatch sim --port 8788 --no-request-bodies --job reports/bench-w1-throughput-*/job.yaml &
    python3 tests/bench/python_harness.py --url http://127.0.0.1:8788 --tasks 1000 --concurrency 100

Tasks are t00000, t00001, ... as in the W1 job; each runs until the model ends its turn,
executing get_time calls and sending every result back under its id.
"""

import argparse
import asyncio
import datetime
import resource
import time

import anthropic

GET_TIME = {
    "name": "get_time",
    "description": "Get the current date and time.",
    "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
}


async def run_task(client, url, key, sem, counts):
    async with sem:
        c = client.with_options(base_url=f"{url}/t/{key}")
        messages = [{"role": "user", "content": "go"}]
        while True:
            resp = await c.messages.create(
                model="claude-haiku-4-5", max_tokens=256, tools=[GET_TIME], messages=messages
            )
            counts["turns"] += 1
            messages.append({"role": "assistant", "content": resp.content})
            calls = [b for b in resp.content if b.type == "tool_use"]
            if resp.stop_reason != "tool_use" or not calls:
                counts["done"] += 1
                return
            results = []
            for call in calls:
                now = datetime.datetime.now(datetime.timezone.utc).isoformat()
                results.append({"type": "tool_result", "tool_use_id": call.id, "content": now})
            messages.append({"role": "user", "content": results})


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=100)
    args = ap.parse_args()
    client = anthropic.AsyncAnthropic(api_key="sim", base_url=args.url, max_retries=0)
    sem = asyncio.Semaphore(args.concurrency)
    counts = {"turns": 0, "done": 0}
    start = time.monotonic()
    await asyncio.gather(
        *(run_task(client, args.url, f"t{i:05d}", sem, counts) for i in range(args.tasks))
    )
    wall = time.monotonic() - start
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime
    print(
        f"python harness (anthropic {anthropic.__version__}): {counts['done']}/{args.tasks} tasks, "
        f"{counts['turns']} turns, wall {wall:.2f} s, CPU {cpu:.2f} s = "
        f"{cpu / max(counts['turns'], 1) * 1000:.2f} CPU-s per 1,000 turns, peak RSS {ru.ru_maxrss / 1024:.0f} MB"
    )


asyncio.run(main())
