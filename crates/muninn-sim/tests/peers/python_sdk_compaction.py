"""Asks muninn sim-api for an on-demand compaction with the official Anthropic Python SDK, once
whole and once streamed, and checks that the SDK's stream accumulator puts together the block
the whole reply holds (summary and signature).

Usage: python_sdk_compaction.py BASE_URL
Prints the block as one JSON line; exits non-zero on any failed expectation.
"""
import json
import sys

import anthropic

client = anthropic.Anthropic(base_url=sys.argv[1], api_key="sk-test-python", max_retries=0)
ask = dict(
    model="claude-opus-5-5",
    max_tokens=256,
    betas=["compact-2026-09-04"],
    compaction={"type": "summarize"},
    messages=[{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}],
)
whole = client.beta.messages.create(**ask)
with client.beta.messages.stream(**ask) as s:
    streamed = s.get_final_message()
for msg in (whole, streamed):
    assert msg.stop_reason == "compaction", msg
    assert [b.type for b in msg.content] == ["compaction"], msg.content
a, b = whole.content[0], streamed.content[0]
assert a.content and a.signature, a
assert (b.content, b.signature) == (a.content, a.signature), (a, b)
print(json.dumps({"content": b.content, "signature": b.signature}), flush=True)
