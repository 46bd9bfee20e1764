"""Structured logs: one JSON object per line for Cloud Logging, or readable lines for a terminal.

    >>> from survivor.log import get, setup
    >>> setup("json")
    >>> get("agent").info("restored", step=1200, seconds=0.8)
    {"severity": "INFO", "message": "restored", "step": 1200, "seconds": 0.8, ...}

Cloud Logging's agent reads the journal and turns a JSON line into a structured entry: `severity`
and `message` are its special fields, every other key lands in `jsonPayload`.

Values registered with `redact()` (the hyperparameters whose names look secret) never appear in a
line: wherever they occur (the trainer's argv, its own output, a failure reason) they read `***`.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
from typing import Any

MASK = "***"
#: Shortest value masked: shorter ones would mask digits and words all over the log.
MIN_SECRET = 4
_secrets: tuple[str, ...] = ()


def redact(values) -> None:
    """Masks each of `values` (at least MIN_SECRET characters) in every line from now on."""
    global _secrets
    found = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET}
    _secrets = tuple(sorted(set(_secrets) | found, key=len, reverse=True))  # longest first


def scrub(text: str) -> str:
    """`text` with every registered secret masked, also as it appears inside a JSON string."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
        escaped = json.dumps(secret)[1:-1]
        if escaped != secret and escaped in text:
            text = text.replace(escaped, MASK)
    return text


_SEVERITY = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "CRITICAL",
}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object in the shape Cloud Logging parses."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON line, secrets masked."""
        entry: dict[str, Any] = {
            "severity": _SEVERITY.get(record.levelno, "DEFAULT"),
            "message": record.getMessage(),
            "time": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc).isoformat(),
            "logger": record.name,
        }
        entry.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return scrub(json.dumps(entry, default=str))


class TextFormatter(logging.Formatter):
    """Formats a record as `HH:MM:SS LEVEL logger: message key=value ...` for people."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one readable line, secrets masked."""
        when = _dt.datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        fields = getattr(record, "fields", {}) or {}
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        line = f"{when} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extra:
            line = f"{line}  {extra}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return scrub(line)


class Log:
    """A logger that takes structured fields as keyword arguments."""

    def __init__(self, logger: logging.Logger):
        self._logger = logger

    def _emit(self, level: int, message: str, fields: dict[str, Any], exc_info: bool = False) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, message, extra={"fields": fields}, exc_info=exc_info)

    def debug(self, message: str, **fields: Any) -> None:
        """Logs `message` at DEBUG with `fields` as structured data."""
        self._emit(logging.DEBUG, message, fields)

    def info(self, message: str, **fields: Any) -> None:
        """Logs `message` at INFO with `fields` as structured data."""
        self._emit(logging.INFO, message, fields)

    def warning(self, message: str, **fields: Any) -> None:
        """Logs `message` at WARNING with `fields` as structured data."""
        self._emit(logging.WARNING, message, fields)

    def error(self, message: str, **fields: Any) -> None:
        """Logs `message` at ERROR with `fields` as structured data."""
        self._emit(logging.ERROR, message, fields)

    def exception(self, message: str, **fields: Any) -> None:
        """Logs `message` at ERROR with `fields` and the exception being handled."""
        self._emit(logging.ERROR, message, fields, exc_info=True)


def get(name: str) -> Log:
    """Returns the structured logger `survivor.<name>`."""
    return Log(logging.getLogger(f"survivor.{name}"))


def setup(fmt: str = "auto", level: str = "INFO", stream=None) -> None:
    """Sends survivor's logs to `stream` (stdout) as `json`, `text`, or `auto` (text on a terminal)."""
    stream = stream or sys.stdout
    if fmt == "auto":
        fmt = "text" if stream.isatty() else "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("survivor")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def console(file=None):
    """The rich Console every command prints through (to `file`, else stdout). On a terminal it wraps
    at the terminal's width; into a pipe or a CI log it never wraps (rich would wrap at 80 columns,
    mid-path), so a line stays one line for grep. It never highlights: what commands print is data
    (records, reasons, names), and rich's highlighting of a long line takes minutes."""
    from rich.console import Console

    stream = file or sys.stdout
    if stream.isatty():
        return Console(file=file, highlight=False)
    return Console(file=file, soft_wrap=True, width=UNWRAPPED_WIDTH, highlight=False)


#: The width a console into a pipe lays its tables out in: wide enough that no row wraps.
UNWRAPPED_WIDTH = 1000
