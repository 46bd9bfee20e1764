"""Each receiver's payload format: survivor's own JSON, a Slack incoming webhook's, a Google Chat webhook's.

    >>> from survivor.notify.events import safe
    >>> event = safe("cifar10", attempt=3, committed_step=1200, steps_lost=0, seconds=4.2, time="2026-11-30T10:00:05Z")
    >>> request_for("slack", event).body["text"][:40]
    'cifar10: safe after the notice: step 120'
    >>> request_for("chat", event).params
    {'messageId': 'client-cifar10-safe-3'}

- `generic`: the event as JSON (`Event.to_json`: id, kind, job, time, summary, facts), described by
  docs/notify-event.schema.json, with the id also in the `X-Survivor-Event-Id` header.
- `slack`: an incoming webhook's message: `text` (the notification's fallback, always sent) and
  `blocks`, a `section` of `mrkdwn` text (at most 3000 characters) and a `context` with the event's id
  (https://docs.slack.dev/messaging/sending-messages-using-incoming-webhooks,
  https://docs.slack.dev/reference/block-kit/blocks/section-block). `&`, `<` and `>` are escaped, as
  Slack's formatting rules ask (https://docs.slack.dev/messaging/formatting-message-text): a reason
  that says `<!channel>` pings nobody. Slack keeps no id: a receiver that wants to drop a duplicate
  reads the id in the context.
- `chat`: a Google Chat webhook's message, `{"text": ...}` (a webhook posts through
  spaces.messages.create, https://developers.google.com/workspace/chat/quickstart/webhooks), with the
  query parameter `messageId`, a custom id ("Begins with client-", up to 63 characters, lowercase
  letters, numbers and hyphens, "unique within a space": CreateMessageRequest.message_id), made from
  the event's id: Chat itself refuses the second copy (409 ALREADY_EXISTS), which delivery counts as
  delivered.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from survivor.notify.events import Event
from survivor.spec import NOTIFY_FORMATS

#: The formats a `notify:` target may name: the spec's list, which its check reads (the spec may not
#: import notify); `request_for` lays out each.
FORMATS = NOTIFY_FORMATS
#: A Slack section's text: "Maximum length for this field is 3000 characters" (section block).
SLACK_SECTION_LIMIT = 3000
#: A Chat custom message id: `client-` and at most 63 characters of [a-z0-9-].
CHAT_MESSAGE_ID = re.compile(r"client-[a-z0-9-]{1,56}")


@dataclass(frozen=True)
class Request:
    """One webhook call: its JSON body, query parameters and headers (the URL is the target's)."""

    body: dict[str, Any]
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def _fact_lines(event: Event) -> list[str]:
    return [f"{name.replace('_', ' ')}: {value}" for name, value in event.facts.items() if value not in (None, "")]


def slack_escape(text: str) -> str:
    """Pure: text as Slack's mrkdwn shows it literally (`&`, `<`, `>` escaped)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def chat_message_id(event_id: str) -> str:
    """Pure: a Chat custom message id for an event: `client-` + its id in [a-z0-9-], a digest of
    the whole id at the end when it had to be cut (63 characters at most)."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", event_id.lower()).strip("-")
    if len(cleaned) > 56:
        cleaned = cleaned[:45].rstrip("-") + "-" + hashlib.sha256(event_id.encode()).hexdigest()[:10]
    return f"client-{cleaned or 'event'}"


def request_for(fmt: str, event: Event) -> Request:
    """Pure: the call that tells `event` to a receiver of format `fmt` (one of FORMATS)."""
    if fmt == "generic":
        return Request(event.to_json(), headers={"X-Survivor-Event-Id": event.id})
    if fmt == "slack":
        body = "\n".join([f"*{slack_escape(event.summary)}*", *(slack_escape(line) for line in _fact_lines(event))])
        if len(body) > SLACK_SECTION_LIMIT:
            body = body[: SLACK_SECTION_LIMIT - 1] + "…"
        return Request(
            {
                "text": slack_escape(event.summary),
                "blocks": [
                    {"type": "section", "text": {"type": "mrkdwn", "text": body}},
                    {
                        "type": "context",
                        "elements": [
                            {
                                "type": "mrkdwn",
                                "text": slack_escape(f"survivor {event.kind} · {event.time} · id {event.id}"),
                            }
                        ],
                    },
                ],
            }
        )
    if fmt == "chat":
        text = "\n".join([f"*{event.summary}*", *_fact_lines(event), f"id {event.id}"])
        return Request({"text": text[:4000]}, params={"messageId": chat_message_id(event.id)})
    raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
