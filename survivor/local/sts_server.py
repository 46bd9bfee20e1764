"""A stand-in for the Security Token Service's token exchange, as downscoping uses it: an access
token in, a token bounded by a Credential Access Boundary out.

    >>> with StsServer() as sts:                     # SURVIVOR_STS_ENDPOINT=sts.endpoint
    ...     rules = sts.boundary_of(token)            # the boundary a token it issued carries, or None
    >>> BucketIam(upstream=gcs.url, sts=sts)          # the storage stand-in that enforces it

`POST /v1/token`, form-encoded, as google-auth's `google.oauth2.sts.Client.exchange_token` sends it
(the `options` field is URL-quoted JSON). What it checks is what the Security Token Service v1
discovery document says (google-api-python-client ships it:
`googleapiclient.discovery_cache.get_static_doc("sts", "v1")`, `GoogleIdentityStsV1ExchangeTokenRequest`
and `...Options`): `grant_type` is `urn:ietf:params:oauth:grant-type:token-exchange`;
`requested_token_type` and `subject_token_type` are `urn:ietf:params:oauth:token-type:access_token`;
a `subject_token`; no `Authorization` header ("do not send the Authorization HTTP header"); the
options' `accessBoundary` holds 1 to 10 `accessBoundaryRules` and is at most 2048 characters; each rule
names an `availableResource` and `availablePermissions` that are all roles (`inRole:`). Its answer is
the document's `ExchangeTokenResponse`: `access_token`, `issued_token_type`, `token_type: Bearer`,
`expires_in`. A refusal is an OAuth 2.0 error (RFC 6749 section 5.2: 400,
`{"error": "invalid_request", "error_description": ...}`), which google-auth raises as `OAuthError`.

Its tokens encode their boundary: `sts-stand-in.<base64url JSON: rules, expiry>.<HMAC-SHA256>`,
signed with a key of this instance, so the storage stand-in reads the boundary from the token and
a trainer can neither forge one nor widen it. Unlike Google's, it refuses to exchange one of its
own tokens (Google would narrow it further) and any rule with an `availabilityCondition` (it
evaluates no CEL): survivor asks for neither.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from survivor.local.http import LocalService, QuietHandler, send_json

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
MAX_RULES = 10
MAX_BOUNDARY_CHARS = 2048
PREFIX = "sts-stand-in."
LIFETIME = 3599


class StsServer(LocalService):
    """The exchange on 127.0.0.1; `issued` counts the tokens it made."""

    thread_name = "sts-stand-in"

    def __init__(self, port: int = 0):
        self._key = secrets.token_bytes(32)
        self.issued = 0
        self._listen(port, self._handler_class())

    # -- tokens -------------------------------------------------------------------------------------

    def issue(self, rules: list[dict]) -> str:
        """A token bounded by `rules` (already checked), valid for LIFETIME seconds."""
        body = json.dumps({"rules": rules, "exp": int(time.time()) + LIFETIME}, sort_keys=True).encode()
        payload = base64.urlsafe_b64encode(body).decode().rstrip("=")
        self.issued += 1
        return f"{PREFIX}{payload}.{self._sign(payload)}"

    def boundary_of(self, token: str) -> list[dict] | None:
        """The boundary rules of a token this instance issued and that has not expired, else None."""
        if not token.startswith(PREFIX):
            return None
        payload, _, signature = token[len(PREFIX) :].partition(".")
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except ValueError:
            return None
        if not isinstance(claims, dict) or claims.get("exp", 0) < time.time():
            return None
        return claims.get("rules")

    def _sign(self, payload: str) -> str:
        return hmac.new(self._key, payload.encode(), hashlib.sha256).hexdigest()

    # -- the exchange -------------------------------------------------------------------------------

    def exchange(self, form: dict[str, str], authorized: bool) -> tuple[int, dict[str, Any]]:
        """(status, JSON answer) for one token request's form fields."""

        def refuse(why: str, error: str = "invalid_request") -> tuple[int, dict[str, Any]]:
            return 400, {"error": error, "error_description": why}

        if authorized:
            return refuse("the token exchange takes no Authorization header")
        if form.get("grant_type") != GRANT_TYPE:
            return refuse(f"grant_type must be {GRANT_TYPE}", "unsupported_grant_type")
        for field in ("requested_token_type", "subject_token_type"):
            if form.get(field) != ACCESS_TOKEN_TYPE:
                return refuse(f"{field} must be {ACCESS_TOKEN_TYPE}")
        subject = form.get("subject_token", "")
        if not subject:
            return refuse("subject_token is required")
        if subject.startswith(PREFIX):
            return refuse("this stand-in does not downscope a downscoped token", "invalid_grant")
        rules, why = _boundary_rules(form.get("options"))
        if rules is None:
            return refuse(why)
        return 200, {
            "access_token": self.issue(rules),
            "issued_token_type": ACCESS_TOKEN_TYPE,
            "token_type": "Bearer",
            "expires_in": LIFETIME,
        }

    def _handler_class(self):
        sts = self

        class Handler(QuietHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode(errors="replace")
                if urlsplit(self.path).path != "/v1/token":
                    return send_json(self, 404, {"error": "not_found", "error_description": self.path})
                form = {k: v[-1] for k, v in parse_qs(raw).items()}
                status, answer = sts.exchange(form, authorized="Authorization" in self.headers)
                send_json(self, status, answer)

        return Handler


def _boundary_rules(options: str | None) -> tuple[list[dict] | None, str]:
    """Pure: the access boundary's rules from the `options` field (URL-quoted JSON), or None and why."""
    if not options:
        return None, "options.accessBoundary is required to downscope"
    try:
        parsed = json.loads(unquote(options))
    except ValueError:
        return None, "options is not JSON"
    boundary = parsed.get("accessBoundary") if isinstance(parsed, dict) else None
    if not isinstance(boundary, dict):
        return None, "options.accessBoundary is required to downscope"
    if len(json.dumps(boundary)) > MAX_BOUNDARY_CHARS:
        return None, f"options.accessBoundary exceeds {MAX_BOUNDARY_CHARS} characters"
    rules = boundary.get("accessBoundaryRules")
    if not isinstance(rules, list) or not 1 <= len(rules) <= MAX_RULES:
        return None, f"accessBoundary.accessBoundaryRules must hold 1 to {MAX_RULES} rules"
    for rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("availableResource"), str):
            return None, "each access boundary rule needs an availableResource"
        permissions = rule.get("availablePermissions")
        if (
            not isinstance(permissions, list)
            or not permissions
            or not all(isinstance(p, str) and p.startswith("inRole:") for p in permissions)
        ):
            return None, "availablePermissions must be roles, as inRole:roles/..."
        if "availabilityCondition" in rule:
            return None, "this stand-in evaluates no availabilityCondition"
    return rules, ""
