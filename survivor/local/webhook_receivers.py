"""Webhook receivers on 127.0.0.1: a generic JSON one, one shaped like a Slack incoming webhook, one
like a Google Chat webhook; each can answer, hang or fail, and holds what it got with when.

    >>> with WebhookReceiver("slack") as slack:           # http://127.0.0.1:PORT/services/T0/B0/x
    ...     run_the_job(notify=[{"url": slack.url, "format": "slack"}])
    >>> [r.body["text"] for r in slack.received]

Each refuses what its real counterpart refuses, so a payload survivor gets wrong fails the test:
- `generic`: survivor's event JSON (docs/notify-event.schema.json): id, kind, job, time, summary,
  facts, and nothing else; 400 otherwise.
- `slack`: Slack answers an incoming webhook's bad payload with HTTP 400 and a word
  (`invalid_payload`, `no_text`: https://docs.slack.dev/messaging/sending-messages-using-incoming-webhooks,
  "Handling errors"); a message needs `text` (or blocks), a section's text at most 3000 characters,
  a context at most 10 elements (https://docs.slack.dev/reference/block-kit/blocks). A good one gets
  200 `ok`.
- `chat`: a Chat message with fields of google.chat.v1.Message only (`text` at most 4096
  characters here), `messageId` as CreateMessageRequest.message_id requires (`client-`, at most 63
  characters of a-z 0-9 -), and a `messageId` the space already has answered 409 ALREADY_EXISTS.

`behaviour`: "ok" answers; "hang" takes the request and never answers (until `stop`); "fail"
answers 500 to every call.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from survivor.local.http import LocalService, QuietHandler, send_google_error, send_json

#: survivor's event kinds and fields (survivor/notify/events.py), as the generic receiver checks them.
EVENT_FIELDS = {"id": str, "kind": str, "job": str, "time": str, "summary": str, "facts": dict}
#: Top-level fields of a Slack incoming webhook's message (chat.postMessage's that a webhook takes).
SLACK_FIELDS = {
    "text",
    "blocks",
    "attachments",
    "thread_ts",
    "mrkdwn",
    "unfurl_links",
    "unfurl_media",
    "username",
    "icon_emoji",
    "icon_url",
    "channel",
    "metadata",
}
#: google.chat.v1.Message fields a webhook may send.
CHAT_FIELDS = {
    "text",
    "cardsV2",
    "thread",
    "fallbackText",
    "accessoryWidgets",
    "privateMessageViewer",
    "formattedText",
    "argumentText",
    "annotations",
    "attachment",
}
CHAT_MESSAGE_ID = re.compile(r"client-[a-z0-9-]{1,56}")


@dataclass
class Received:
    """One call a receiver got: when (time.time() and time.monotonic()), its body, query, headers and answer."""

    at: float
    monotonic: float
    body: Any
    params: dict[str, str]
    headers: dict[str, str]
    status: int = 0


def generic_problem(body: Any) -> str | None:
    """What is wrong with a generic event payload, or None."""
    if not isinstance(body, dict):
        return "expected a JSON object"
    if set(body) != set(EVENT_FIELDS):
        return f"expected exactly the fields {sorted(EVENT_FIELDS)}, got {sorted(body)}"
    for key, kind in EVENT_FIELDS.items():
        if not isinstance(body[key], kind) or (kind is str and not body[key]):
            return f"{key}: expected a non-empty {kind.__name__}"
    return None


def slack_problem(body: Any) -> str | None:
    """The word Slack answers a bad incoming-webhook payload with, or None."""
    if not isinstance(body, dict) or set(body) - SLACK_FIELDS:
        return "invalid_payload"
    blocks = body.get("blocks")
    if not (isinstance(body.get("text"), str) and body["text"].strip()) and not blocks:
        return "no_text"
    if blocks is not None:
        if not isinstance(blocks, list) or len(blocks) > 50:
            return "invalid_blocks"
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "section":
                text = block.get("text") or {}
                if text.get("type") not in ("mrkdwn", "plain_text") or not 0 < len(text.get("text") or "") <= 3000:
                    return "invalid_blocks"
            elif kind == "context":
                elements = block.get("elements")
                if not isinstance(elements, list) or not 0 < len(elements) <= 10:
                    return "invalid_blocks"
            else:
                return "invalid_blocks"
    return None


def chat_problem(body: Any, params: dict[str, str]) -> str | None:
    """What Chat's API refuses in a webhook call (400's message), or None."""
    if not isinstance(body, dict) or set(body) - CHAT_FIELDS:
        return f"Invalid JSON payload received. Unknown name in {sorted(set(body) - CHAT_FIELDS) if isinstance(body, dict) else body!r}"
    if not isinstance(body.get("text"), str) or not body["text"] or len(body["text"]) > 4096:
        return "Message text is empty or too long"
    message_id = params.get("messageId")
    if message_id is not None and not CHAT_MESSAGE_ID.fullmatch(message_id):
        return f"Invalid custom message id {message_id!r}: it must begin with client- and hold at most 63 a-z 0-9 -"
    return None


class WebhookReceiver(LocalService):
    """A webhook of `fmt` ("generic", "slack", "chat") on 127.0.0.1 behaving as `behaviour` says."""

    thread_name = "webhook-receiver"

    def __init__(self, fmt: str, behaviour: str = "ok", port: int = 0):
        self.fmt, self.behaviour = fmt, behaviour
        self.received: list[Received] = []
        self.refused: list[tuple[Any, str]] = []
        self._message_ids: set[str] = set()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._listen(port, self._handler())

    @property
    def url(self) -> str:
        """The webhook's URL, with a path and query like the real one's."""
        path = {
            "generic": "/hooks/survivor",
            "slack": "/services/T000/B000/XXXXXXXX",
            "chat": "/v1/spaces/AAAA/messages?key=local-key&token=local-token",
        }[self.fmt]
        return self.endpoint + path

    def accepted(self) -> list[Received]:
        """The calls it answered 2xx, in arrival order."""
        with self._lock:
            return [r for r in self.received if 200 <= r.status < 300]

    def stop(self) -> None:
        """Lets every hanging call go (unanswered), then stops serving."""
        self._released.set()
        super().stop()

    def _handler(self):
        receiver = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                split = urlsplit(self.path)
                params = {k: v[-1] for k, v in parse_qs(split.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if len(raw) < length:  # the sender went away mid-request (an agent's exit): no call at all
                    self.close_connection = True
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                call = Received(time.time(), time.monotonic(), body, params, dict(self.headers.items()))
                with receiver._lock:
                    receiver.received.append(call)
                if receiver.behaviour == "hang":
                    receiver._released.wait()
                    return
                if receiver.behaviour == "fail":
                    call.status = 500
                    send_json(self, 500, {"error": "the receiver is down"})
                    return
                call.status = self._answer(body, params)

            def _answer(self, body: Any, params: dict[str, str]) -> int:
                if receiver.fmt == "generic":
                    problem = generic_problem(body)
                    if problem:
                        receiver.refused.append((body, problem))
                        send_json(self, 400, {"error": problem})
                        return 400
                    send_json(self, 200, {"ok": True})
                    return 200
                if receiver.fmt == "slack":
                    problem = slack_problem(body)
                    data = (problem or "ok").encode()
                    status = 400 if problem else 200
                    if problem:
                        receiver.refused.append((body, problem))
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return status
                problem = chat_problem(body, params)
                if problem:
                    receiver.refused.append((body, problem))
                    send_google_error(self, 400, "INVALID_ARGUMENT", problem)
                    return 400
                message_id = params.get("messageId")
                with receiver._lock:
                    taken = message_id in receiver._message_ids
                    if message_id:
                        receiver._message_ids.add(message_id)
                if taken:
                    send_google_error(self, 409, "ALREADY_EXISTS", f"Message {message_id} already exists")
                    return 409
                send_json(
                    self,
                    200,
                    {"name": f"spaces/AAAA/messages/{message_id or len(receiver.received)}", "text": body["text"]},
                )
                return 200

        return Handler


@dataclass
class Receivers:
    """The three receivers at once (generic, slack, chat), answering; `targets` is their `notify:`."""

    generic: WebhookReceiver = field(default_factory=lambda: WebhookReceiver("generic"))
    slack: WebhookReceiver = field(default_factory=lambda: WebhookReceiver("slack"))
    chat: WebhookReceiver = field(default_factory=lambda: WebhookReceiver("chat"))

    def all(self) -> list[WebhookReceiver]:
        """The three, in the order of `targets`."""
        return [self.generic, self.slack, self.chat]

    @property
    def targets(self) -> list[dict[str, str]]:
        """The spec's `notify:` for the three."""
        return [{"url": r.url, "format": r.fmt} for r in self.all()]

    def __enter__(self) -> "Receivers":
        for receiver in self.all():
            receiver.start()
        return self

    def __exit__(self, *exc) -> None:
        for receiver in self.all():
            receiver.stop()
