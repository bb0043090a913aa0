"""The Responses door's events: one choice's deltas → a Responses ``Response`` / its
typed stream events. Sans-IO; the state is plain data.

The same `ResponsesStream` makes both answers: non-streaming is one whole `Delta` plus the
finish, and its ``Response`` is the one ``response.completed`` carries, so a stream and the
non-streaming answer agree by construction. Event sequence (OpenAI's, as vLLM 0.33 emits
it in ``entrypoints/openai/responses/streaming_events.py``)::

    response.created, response.in_progress
    per output item, in order of appearance:
      reasoning:     output_item.added, content_part.added, reasoning_text.delta*,
                     reasoning_text.done, content_part.done, output_item.done
      message:       output_item.added, content_part.added, output_text.delta*,
                     output_text.done, content_part.done, output_item.done
      function_call: output_item.added, function_call_arguments.delta*,
                     function_call_arguments.done, output_item.done
    response.completed  (or response.incomplete on finish_reason "length", status
                         "incomplete"; or on "abort", status "cancelled")

``sequence_number`` increases by one per event across the stream. Item ids are
``rs_`` / ``msg_`` / ``fc_`` + the response id's suffix + the output index, so a stream and
its non-streaming twin name items alike; ``call_id`` is the parser's tool-call id.

State: counters, the open item, and the text of the items so far — Responses' closing
events (``*.done``, ``output_item.done``, ``response.completed``) repeat the whole output,
so, unlike chat and Anthropic Messages, this door's machine must remember it.
"""

from __future__ import annotations

from typing import Any

_PREFIX = {"reasoning": "rs", "message": "msg", "function_call": "fc"}
# finish_reason → Response status; "abort" is vLLM 0.33's "cancelled" (responses/serving.py).
_STATUS = {"length": "incomplete", "abort": "cancelled"}


def response_envelope(req: Any, *, response_id: str, created_at: int, model: str, sampling: dict) -> dict:
    """The ``Response`` fields that echo the request (vLLM's ``ResponsesResponse.from_request``);
    ``sampling`` holds the effective ``temperature``, ``top_p``, ``max_tokens``."""
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": "in_progress",
        "background": bool(req.background), "error": None, "incomplete_details": None,
        "instructions": req.instructions, "max_output_tokens": sampling.get("max_tokens"),
        "max_tool_calls": req.max_tool_calls, "metadata": req.metadata, "model": model, "output": [],
        "parallel_tool_calls": req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
        "previous_response_id": None, "reasoning": req.reasoning, "service_tier": req.service_tier,
        "store": req.store, "temperature": sampling.get("temperature"), "text": req.text,
        "tool_choice": req.tool_choice, "tools": req.tools, "top_logprobs": req.top_logprobs,
        "top_p": sampling.get("top_p"), "truncation": req.truncation, "usage": None, "user": req.user,
    }


class ResponsesStream:
    """Deltas of one choice → Responses events.

    Args:
        envelope: `response_envelope` (only read on a fresh start).
        state: `export_state` of an earlier call, or None.

    Raises:
        ValueError: a malformed ``state`` (the caller answers 400).
    """

    def __init__(self, envelope: dict | None = None, state: dict | None = None) -> None:
        if state is None:
            if envelope is None:
                raise ValueError("a fresh ResponsesStream needs the response envelope")
            self.env, self.seq, self.open, self.acc, self.call, self.done = envelope, 0, None, "", None, []
            self.started = self.finished = False
            return
        try:
            self.env, self.seq, self.open, self.acc = dict(state["env"]), int(state["seq"]), state["open"], str(state["acc"])
            self.call, self.done = state["call"], list(state["done"])
            self.started, self.finished = bool(state["st"]), bool(state["fin"])
            if self.open not in (None, "reasoning", "message", "function_call"):
                raise ValueError(f"unknown open item {self.open!r}")
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed Responses stream state ({exc})") from None

    def export_state(self) -> dict:
        """Plain JSON-able state."""
        return {"env": self.env, "seq": self.seq, "open": self.open, "acc": self.acc, "call": self.call,
                "done": self.done, "st": self.started, "fin": self.finished}

    # -- events ----------------------------------------------------------------------
    def step(self, delta: Any, usage: dict | None = None) -> list[dict]:
        """One `Delta` (``reasoning``, ``content``, ``tool_calls``, ``finish_reason``) → events.
        ``usage`` (``input_tokens``, ``output_tokens``) is read when the delta finishes."""
        if self.finished:
            return []
        out: list[dict] = []
        if not self.started:
            self.started = True
            out += [self._ev("response.created", response=self._response()),
                    self._ev("response.in_progress", response=self._response())]
        if delta.reasoning:
            out += self._text("reasoning", delta.reasoning)
        if delta.content:
            out += self._text("message", delta.content)
        for call in delta.tool_calls:
            if call.name is not None:
                out += self._close()
                out += self._open_call(call)
            if call.arguments and self.open == "function_call":
                self.acc += call.arguments
                out.append(self._ev("response.function_call_arguments.delta", output_index=self._index(),
                                    item_id=self._id(), delta=call.arguments))
        if delta.finish_reason is not None:
            out += self.finish(delta.finish_reason, usage)
        return out

    def finish(self, finish_reason: str, usage: dict | None) -> list[dict]:
        """Close the open item and end with ``response.completed`` / ``response.incomplete``."""
        if self.finished:
            return []
        status = _STATUS.get(finish_reason, "completed")
        out = self._close("completed" if status == "completed" else "incomplete")
        self.finished = True
        self.env.update(status=status,
                        incomplete_details={"reason": "max_output_tokens"} if finish_reason == "length" else None,
                        usage=_usage(usage))
        kind = "response.completed" if status == "completed" else "response.incomplete"
        out.append(self._ev(kind, response=self._response()))
        return out

    def response(self) -> dict:
        """The ``Response`` object as it stands (complete once finished)."""
        return self._response()

    # -- internals -------------------------------------------------------------------
    def _ev(self, kind: str, **fields: Any) -> dict:
        ev = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return ev

    def _response(self) -> dict:
        return {**self.env, "output": list(self.done)}

    def _index(self) -> int:
        return len(self.done)

    def _id(self) -> str:
        base = self.env["id"].removeprefix("resp_")
        return f"{_PREFIX[self.open]}_{base}_{self._index()}"

    def _text(self, kind: str, text: str) -> list[dict]:
        out: list[dict] = []
        if self.open != kind:
            out += self._close()
            self.open, self.acc = kind, ""
            item_id, index = self._id(), self._index()
            if kind == "reasoning":
                item = {"id": item_id, "type": "reasoning", "summary": [], "status": "in_progress"}
                part = {"type": "reasoning_text", "text": ""}
            else:
                item = {"id": item_id, "type": "message", "role": "assistant", "content": [], "status": "in_progress"}
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out += [self._ev("response.output_item.added", output_index=index, item=item),
                    self._ev("response.content_part.added", output_index=index, item_id=item_id, content_index=0,
                             part=part)]
        self.acc += text
        name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
        extra = {} if kind == "reasoning" else {"logprobs": []}
        out.append(self._ev(name, output_index=self._index(), item_id=self._id(), content_index=0, delta=text, **extra))
        return out

    def _open_call(self, call: Any) -> list[dict]:
        self.open, self.acc = "function_call", ""
        self.call = {"call_id": call.id, "name": call.name}
        item = {"id": self._id(), "type": "function_call", "call_id": call.id, "name": call.name,
                "arguments": "", "status": "in_progress"}
        return [self._ev("response.output_item.added", output_index=self._index(), item=item)]

    def _close(self, status: str = "completed") -> list[dict]:
        """Close the open item; ``status`` is ``incomplete`` when the output was cut at the limit."""
        if self.open is None:
            return []
        item_id, index, text = self._id(), self._index(), self.acc
        if self.open == "function_call":
            item = {"id": item_id, "type": "function_call", "call_id": self.call["call_id"], "name": self.call["name"],
                    "arguments": text, "status": status}
            out = [self._ev("response.function_call_arguments.done", output_index=index, item_id=item_id,
                            name=self.call["name"], arguments=text)]
        else:
            if self.open == "reasoning":
                part = {"type": "reasoning_text", "text": text}
                item = {"id": item_id, "type": "reasoning", "summary": [], "content": [part], "status": status}
                out = [self._ev("response.reasoning_text.done", output_index=index, item_id=item_id, content_index=0,
                                text=text)]
            else:
                part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
                item = {"id": item_id, "type": "message", "role": "assistant", "content": [part], "status": status}
                out = [self._ev("response.output_text.done", output_index=index, item_id=item_id, content_index=0,
                                text=text, logprobs=[])]
            out.append(self._ev("response.content_part.done", output_index=index, item_id=item_id, content_index=0,
                                part=part))
        out.append(self._ev("response.output_item.done", output_index=index, item=item))
        self.done.append(item)
        self.open, self.acc, self.call = None, "", None
        return out


def _usage(usage: dict | None) -> dict:
    u = usage or {}
    inp, outp = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
    return {"input_tokens": inp, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": outp,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": inp + outp}
