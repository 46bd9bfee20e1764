"""Where a job's state and data may live, and where its events may go: the checks of a job or data
dir location (`validate_uri`, `normalize_uri`) and of a `notify:` webhook URL (`notify_url_problem`).
"""

from __future__ import annotations

import re
from typing import Any


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")


#: A Secret Manager secret version as a `notify:` URL: the webhook's URL is the secret's payload.
SECRET_VERSION = re.compile(
    r"projects/([a-z0-9-]{1,63}|[0-9]{1,20})/secrets/[A-Za-z0-9_-]{1,255}/versions/"
    r"([1-9][0-9]{0,18}|latest)"
)


#: Cloud Storage object names are at most 1024 bytes (https://cloud.google.com/storage/docs/objects#naming),
#: and the job dir is a prefix of every object survivor writes.
MAX_LOCATION = 1024


def control_characters(value: str) -> bool:
    """True when `value` holds a control character (below 0x20, or DEL)."""
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)


def looks_secret(url: Any) -> bool:
    """A webhook URL carries its credential (Slack's path, Chat's key and token, or a user:password
    before its host): never shown whole."""
    return (
        isinstance(url, str)
        and url.startswith(("http://", "https://"))
        and (len(url) > 40 or "@" in url.split("://", 1)[1].split("/", 1)[0])
    )


def notify_url_problem(url: Any) -> str | None:
    """Pure: what is wrong with a `notify:` URL, or None: an https:// URL, an http:// one to this
    machine only (a local receiver), or a Secret Manager version holding the URL."""
    expected = (
        "an https:// webhook URL (http:// only to 127.0.0.1 or localhost) or a Secret Manager version "
        "projects/PROJECT/secrets/NAME/versions/VERSION"
    )
    if not isinstance(url, str) or not url.strip() or len(url) > 4096 or control_characters(url):
        return expected
    url = url.strip()
    if SECRET_VERSION.fullmatch(url):
        return None
    if "@" in url.split("://", 1)[-1].split("/", 1)[0]:
        return expected + ", without a user:password before its host (keep such a URL in Secret Manager)"
    m = re.fullmatch(r"(https?)://([^/?#:@\s]+)(:[0-9]{1,5})?([/?#][^\s]*)?", url)
    if not m:
        return expected
    if m.group(1) == "http" and m.group(2) not in ("127.0.0.1", "localhost"):
        return expected
    return None


def validate_uri(value: str) -> str | None:
    """Returns what is wrong with a job/data dir location, or None when it is usable."""
    if len(value.encode("utf-8", "surrogatepass")) > MAX_LOCATION:
        return f"a location of at most {MAX_LOCATION} bytes"
    if control_characters(value):
        return "a location without control characters"
    if value.startswith("gs://"):
        rest = value[len("gs://") :]
        bucket = rest.split("/", 1)[0]
        if not bucket:
            return "a bucket name after gs://"
        if not _BUCKET.match(bucket) or ".." in bucket:
            return "a valid bucket name (3-63 of a-z 0-9 . _ -, starting and ending with a letter or digit)"
        path = rest[len(bucket) :].strip("/")
        if any(part in (".", "..") for part in path.split("/") if path):
            return "a path without . or .. segments"
        return None
    if "://" in value:
        if value.startswith("file://"):
            local = value[len("file://") :]
            if not local.startswith("/"):
                return "file:// followed by an absolute path (file:///...)"
            return _local_path_problem(local)
        return "gs://BUCKET/PATH, file:///ABSOLUTE/PATH or an absolute path"
    if not value.startswith("/"):
        return "gs://BUCKET/PATH, file:///ABSOLUTE/PATH or an absolute path (not a relative path)"
    return _local_path_problem(value)


def _local_path_problem(path: str) -> str | None:
    parts = [part for part in path.split("/") if part]
    if not parts:
        return "a directory below / (survivor writes and deletes under the job dir; / is not one)"
    if any(part in (".", "..") for part in parts):
        return "a path without . or .. segments"
    return None


def normalize_uri(value: str) -> str:
    """A valid location without trailing slashes: `file:///data/run/` -> `file:///data/run`."""
    value = value.strip()
    if value.startswith("file://"):
        return "file://" + value[len("file://") :].rstrip("/")
    return value.rstrip("/")
