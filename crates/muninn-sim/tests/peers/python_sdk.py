"""Drives muninn sim-api with the official Anthropic Python SDK (a real peer nobody here wrote).

Usage: python_sdk.py BASE_URL
Prints one JSON object per line: {"step": ..., "usage": {...}, ...}; exits non-zero on any
failed expectation. The Rust test compares every reported usage with what the cache model
predicts for the requests the simulator recorded.
"""
import json
import sys
import urllib.request

import anthropic

BASE = sys.argv[1]
MODEL = "claude-opus-5-5"
SYSTEM = "You are the python peer. " + " ".join(f"rule{i} holds." for i in range(600))


def emit(step, **kw):
    print(json.dumps({"step": step, **kw}), flush=True)


def usage_dict(u):
    d = {
        "input_tokens": u.input_tokens,
        "cache_creation_input_tokens": u.cache_creation_input_tokens,
        "cache_read_input_tokens": u.cache_read_input_tokens,
        "output_tokens": u.output_tokens,
    }
    cc = getattr(u, "cache_creation", None)
    if cc is not None:
        d["cache_creation"] = {
            "ephemeral_5m_input_tokens": cc.ephemeral_5m_input_tokens,
            "ephemeral_1h_input_tokens": cc.ephemeral_1h_input_tokens,
        }
    return d


def admin(path, body):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


client = anthropic.Anthropic(base_url=BASE, api_key="sk-test-python", max_retries=0)
system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
history = []
reads = []
for turn in range(1, 6):
    history.append({"role": "user", "content": [
        {"type": "text", "text": f"python turn {turn}", "cache_control": {"type": "ephemeral"}}]})
    if turn % 2 == 1:
        msg = client.messages.create(model=MODEL, max_tokens=256, system=system, messages=history)
        mode = "create"
    else:
        with client.messages.stream(model=MODEL, max_tokens=256, system=system, messages=history) as s:
            text = "".join(s.text_stream)
            msg = s.get_final_message()
        assert text == msg.content[0].text, (text, msg.content)
        mode = "stream"
    assert msg.content[0].text == f"Reply to turn {turn}: 'python turn {turn}'", msg.content
    assert msg.stop_reason == "end_turn"
    emit("turn", turn=turn, mode=mode, usage=usage_dict(msg.usage))
    reads.append(msg.usage.cache_read_input_tokens)
    # The marker moves forward: the old last block goes back to a plain string.
    history[-1] = {"role": "user", "content": f"python turn {turn}"}
    history.append({"role": "assistant", "content": [{"type": "text", "text": msg.content[0].text}]})

assert reads[0] == 0, reads
assert all(b > a for a, b in zip(reads, reads[1:])), reads

# Tool use, streamed, with input_json_delta.
tools = [{"name": "lookup", "description": "Look up", "input_schema": {
    "type": "object", "properties": {"word": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["word"]}}]
with client.messages.stream(model=MODEL, max_tokens=256, tools=tools,
                            messages=[{"role": "user", "content": "Please use lookup for raven"}]) as s:
    msg = s.get_final_message()
tool = [b for b in msg.content if b.type == "tool_use"][0]
assert tool.name == "lookup" and tool.input == {"word": "word-value", "n": 42}, tool
assert msg.stop_reason == "tool_use"
emit("tool_use", usage=usage_dict(msg.usage), input=tool.input)

# count_tokens.
n = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "Hello, world!"}])
assert n.input_tokens == 6, n
emit("count_tokens", input_tokens=n.input_tokens)

# Errors arrive as the SDK's typed exceptions.
admin("/admin/faults", {"kind": "rate_limit", "retry_after_s": 1})
try:
    client.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    raise SystemExit("expected a RateLimitError")
except anthropic.RateLimitError as e:
    assert e.status_code == 429 and e.response.headers["retry-after"] == "1"
    emit("rate_limit", status=e.status_code)
admin("/admin/faults", {"kind": "overloaded"})
try:
    client.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    raise SystemExit("expected a 529")
except anthropic.APIStatusError as e:
    assert e.status_code == 529, e
    emit("overloaded", status=e.status_code)
admin("/admin/faults", {"kind": "mid_stream_error", "after_deltas": 1})
try:
    with client.messages.stream(model=MODEL, max_tokens=256,
                                messages=[{"role": "user", "content": "a stream that breaks"}]) as s:
        for _ in s.text_stream:
            pass
    raise SystemExit("expected a mid-stream error")
except anthropic.APIStatusError as e:
    emit("mid_stream_error", message=str(e)[:80])
try:
    client.messages.create(model=MODEL, max_tokens=5, messages=[
        {"role": "user", "content": [{"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}}
                                     for i in range(5)]}])
    raise SystemExit("expected a 400")
except anthropic.BadRequestError as e:
    assert "A maximum of 4 blocks with cache_control may be provided. Found 5." in str(e), e
    emit("bad_request", status=e.status_code)
# With retries on, the SDK rides out a 429 by itself.
admin("/admin/faults", {"kind": "rate_limit", "retry_after_s": 0.1})
retrying = anthropic.Anthropic(base_url=BASE, api_key="sk-test-python", max_retries=2)
msg = retrying.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "after a 429"}])
emit("retried", usage=usage_dict(msg.usage))
emit("done")
