"""Reading a raw spec mapping key by key (`Validator`), recording every problem as one line
instead of raising at the first, and the checks it applies: numbers in their ranges, strings fit for
argv, hyperparameter names that cannot set a contract flag (`agent_flag_taken`).
"""

from __future__ import annotations

import datetime as _dt
import posixpath
import re
from typing import Any, Mapping

from survivor.places import region_of_zone
from survivor.trainers.registry import BUILTIN_TRAINERS
from survivor.spec.fields import KEYS, NUMBER_RANGES, ON_FINISH
from survivor.spec.keys import Key
from survivor.spec.problems import did_you_mean, show
from survivor.spec.recipe import FLAT_KEYS, UNSUPPORTED_FLAT_KEYS, kebab
from survivor.spec.sections import (
    BUDGET_KEYS,
    Budget,
    Deadline,
    FALLBACK_KEYS,
    FLEX_START_WAIT_HOURS,
    FallbackSpec,
    MAX_FLEX_START_WAIT_HOURS,
    MAX_NOTIFY_TARGETS,
    MAX_SHAPES,
    NOTIFY_EVENTS,
    NOTIFY_FORMATS,
    NOTIFY_KEYS,
    NotifyTarget,
    PLACEMENT_RANGES,
    Placement,
    SHAPE_KEYS,
    Shape,
    TrainerSpec,
)
from survivor.spec.uris import control_characters, looks_secret, normalize_uri, notify_url_problem, validate_uri


_HPARAM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def checkpoint_naming(pattern: str) -> re.Pattern:
    """The regex of a spec's `checkpoint_pattern` (`jobdir.snapshot.step_in_name` matches with it): a file name (or a path under the job dir, with
    `/`) in which `{step}` stands for the step, once, and `*` for any characters but `/`.

        >>> checkpoint_naming("model-{step}-*.keras").fullmatch("model-0350-0.7641.keras").group("step")
        '0350'

    Raises ValueError when `{step}` is not in it exactly once."""
    if pattern.count("{step}") != 1:
        raise ValueError("`{step}` exactly once, where the step is in the file name")
    parts = [re.escape(part).replace(r"\*", "[^/]*") for part in pattern.split("{step}")]
    return re.compile(r"(?P<step>\d+)".join(parts))


_FLAT_NAMES = {v: k for k, v in FLAT_KEYS.items()}
#: Signals a trainer may name as its "save now and keep training" signal (SIGUSR1/2 are the two
#: POSIX leaves to applications; SIGTERM and SIGINT already mean "save and exit").
SAVE_SIGNALS = ("SIGUSR1", "SIGUSR2")
#: Sections that belong to other commands (make-template, submit); carried along untouched.
EXTRA_SECTIONS = ("compute", "vertex", "trainingInput")
#: The keys the validator reads itself.
_TOP_LEVEL = {key.name for key in KEYS} - set(EXTRA_SECTIONS)


#: The longest single argument execve(2) takes on Linux (MAX_ARG_STRLEN, 32 pages of 4 KiB): every
#: string that may end up in the trainer's argv is held to it.
MAX_STRING = 131072


#: The latest a duration `deadline` may be: a year of hours.
DEADLINE_MAX_HOURS = 365 * 24.0
#: What a trainer's argparse would read as one of the agent's own flags: the flags the agent passes
#: (BUILTIN_FLAGS) and --help (which prints and exits 0: "finished"). argparse also takes any
#: unambiguous prefix of a long option (allow_abbrev, https://docs.python.org/3/library/argparse.html#allow-abbrev),
#: so `--job` is `--job-dir` to a trainer without a `--job` of its own: prefixes are refused too.
_AGENT_FLAGS = ("job-dir", "data-dir", "train-steps", "num-gpus", "checkpoint-steps", "help")
#: Hyperparameter names whose values are masked in logs.
_SECRET_NAME = re.compile(r"key|token|passw|secret|credential", re.IGNORECASE)
#: A user name useradd(8) accepts (at most 32 characters, no control characters or spaces).
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?")


def _is_number(text: str) -> bool:
    """`-0.5`, `-1e-5`: a negative number is a value, not a flag."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def is_secret_name(name: str) -> bool:
    """True for a hyperparameter whose value is masked in logs (`*key*`, `*token*`, `*password*`,
    `*secret*`, `*credential*`)."""
    return bool(_SECRET_NAME.search(name))


def agent_flag_taken(name: str) -> str | None:
    """Pure decision: the agent's own flag a hyperparameter named `name` would set in the trainer's
    argparse (its name, or a prefix of it), or None when the name is free."""
    flag = kebab(name)
    for own in _AGENT_FLAGS:
        if own.startswith(flag):
            return own
    return None


class Validator:
    """Reads one key at a time from a raw mapping, recording problems instead of raising."""

    def __init__(self, data: Mapping[str, Any], flat: bool):
        self.data = {k if isinstance(k, str) else show(k): v for k, v in data.items()}
        self.flat = flat
        self.problems: list[str] = []
        self.seen: set[str] = set()

    def _label(self, key: str) -> str:
        return _FLAT_NAMES.get(key, key) if self.flat else key

    def _problem(self, key: str, value: Any, expected: str) -> None:
        self.problems.append(f"{self._label(key)} = {show(value)}: expected {expected}")

    def _get(self, key: str) -> Any:
        self.seen.add(key)
        value = self.data.get(key)
        if isinstance(value, str) and value.strip() == "":
            return None
        return value

    def named(self, key: str) -> bool:
        """True when the spec gives `key` a (non-empty) value."""
        value = self.data.get(key)
        return value is not None and not (isinstance(value, str) and value.strip() == "")

    def string(self, key: str) -> str | None:
        """A string of at most MAX_STRING characters without control characters; None when not given."""
        value = self._get(key)
        if value is None:
            return None
        if not isinstance(value, str) or len(value) > MAX_STRING or control_characters(value):
            self._problem(key, value, f"a string of at most {MAX_STRING} characters, no control characters")
            return None
        return value

    def checkpoint_pattern(self) -> str | None:
        """`checkpoint_pattern`: a string with `{step}` once (`checkpoint_naming`)."""
        value = self.string("checkpoint_pattern")
        if value is None:
            return None
        try:
            checkpoint_naming(value)
        except ValueError as exc:
            self._problem("checkpoint_pattern", value, str(exc))
            return None
        return value

    def user(self) -> str | None:
        """`user`: a user name useradd(8) accepts."""
        value = self.string("user")
        if value is not None and not _USER.fullmatch(value):
            self._problem("user", value, "a user name of this VM (letters, digits, _ . -; at most 32)")
            return None
        return value

    def uri(self, key: str, required: bool = False) -> str | None:
        """A job or data dir location (`validate_uri`), normalized; a problem when `required` and missing."""
        value = self._get(key)
        if value is None:
            if required:
                self.problems.append(f"{self._label(key)} is missing: expected gs://BUCKET/PATH or an absolute path")
            return None
        if not isinstance(value, str):
            self._problem(key, value, "a string such as gs://BUCKET/PATH")
            return None
        wrong = validate_uri(value.strip())
        if wrong:
            self._problem(key, value, wrong)
            return None
        return normalize_uri(value)

    def integer(self, key: str, required: bool = False) -> int | None:
        """A whole number within NUMBER_RANGES[key]."""
        low, high = NUMBER_RANGES[key]
        value = self._get(key)
        if value is None:
            if required:
                self.problems.append(f"{self._label(key)} is missing: expected a whole number")
            return None
        number: int | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():  # False for inf and nan
            number = int(value)
        elif isinstance(value, str) and len(value) <= 40 and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            number = int(value)
        if number is None or number < low:
            self._problem(key, value, f"a whole number >= {low:g}")
            return None
        if number > high:
            self._problem(key, value, f"a whole number <= {high:g}")
            return None
        return number

    def number(self, key: str) -> float | None:
        """A finite number within NUMBER_RANGES[key]."""
        low, high = NUMBER_RANGES[key]
        value = self._get(key)
        if value is None:
            return None
        try:
            if isinstance(value, bool) or (isinstance(value, str) and len(value) > 40):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            number = None
        if number is None or number != number or number < low:
            self._problem(key, value, f"a number >= {low:g}")
            return None
        if number > high:  # inf included
            self._problem(key, value, f"a finite number <= {high:g}")
            return None
        return number

    def plain(self, key: Key) -> Any:
        """A key read by its kind alone (`Key.plain`): a location, a whole number or a number within its
        bounds; its default when the spec does not give it (or gives it wrong: the problem is recorded)."""
        if key.kind == "location":
            value: Any = self.uri(key.name, required=key.required)
        elif key.kind == "integer":
            value = self.integer(key.name, required=key.required)
        else:
            value = self.number(key.name)
        return key.default if value is None else value

    def boolean(self, key: str) -> bool | None:
        """true/false, yes/no, 1/0 or on/off; None when not given."""
        value = self._get(key)
        if value is None:
            return None
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "yes", "1", "on"):
            return True
        if text in ("false", "no", "0", "off"):
            return False
        self._problem(key, value, "true or false")
        return None

    def deadline(self) -> Deadline | None:
        """`deadline`: an ISO 8601 time with its zone, or a duration from the first start (`90m`, `36h`, `3d`)."""
        value = self._get("deadline")
        if value is None:
            return None
        expected = "an ISO time with its zone (2026-12-01T18:00:00Z) or a duration from the first start (36h, 90m, 3d)"
        if isinstance(value, _dt.datetime):  # YAML reads an unquoted timestamp itself
            if value.tzinfo is None:
                self._problem("deadline", value.isoformat(), expected)
                return None
            return Deadline(at=value.astimezone(_dt.timezone.utc))
        if not isinstance(value, str) or len(value) > 40:
            self._problem("deadline", value.isoformat() if isinstance(value, _dt.date) else value, expected)
            return None
        text = value.strip()
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(m|min|h|d)", text.lower())
        if m:
            hours = float(m.group(1)) * {"m": 1 / 60, "min": 1 / 60, "h": 1.0, "d": 24.0}[m.group(2)]
            if not 1 / 60 <= hours <= DEADLINE_MAX_HOURS:
                self._problem("deadline", value, f"a duration from 1m to {DEADLINE_MAX_HOURS / 24:g}d")
                return None
            return Deadline(after_hours=hours)
        try:
            at = _dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            at = None
        if at is None or at.tzinfo is None:
            self._problem("deadline", value, expected)
            return None
        return Deadline(at=at.astimezone(_dt.timezone.utc))

    def fallback(self) -> FallbackSpec | None:
        """`fallback`: the on-demand machine of a job with a deadline (`machine_type`, `gpu`, `switch_back`),
        and whether flex-start may stand in for on-demand (`flex_start`, `flex_start_wait_hours`)."""
        keys = FALLBACK_KEYS
        value = self._get("fallback")
        has_deadline = self.named("deadline")
        if value is None:
            return FallbackSpec() if has_deadline else None
        if not isinstance(value, dict):
            self._problem("fallback", value, "a mapping with " + ", ".join(keys[:-1]) + " or " + keys[-1])
            return None
        if not has_deadline:
            self.problems.append("fallback: only means something with a deadline; add deadline: (e.g. 36h)")
        for key in sorted(str(k) for k in value if k not in keys):
            close = did_you_mean(key, keys)
            self.problems.append(
                f"fallback.{key}: unknown key{f' ({close})' if close else ''}; expected "
                + ", ".join(keys[:-1])
                + " or "
                + keys[-1]
            )
        out = {}
        for key in ("machine_type", "gpu"):
            item = value.get(key)
            if item is not None and (
                not isinstance(item, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}(:[1-9][0-9]?)?", item)
            ):
                self.problems.append(
                    f"fallback.{key} = {show(item)}: expected "
                    + (
                        "a machine type such as n1-standard-16"
                        if key == "machine_type"
                        else "TYPE:COUNT such as nvidia-tesla-t4:1, or none"
                    )
                )
                item = None
            out[key] = item
        flags = {}
        for key, default in (("switch_back", True), ("flex_start", False)):
            flag = value.get(key, default)
            if not isinstance(flag, bool):
                self.problems.append(f"fallback.{key} = {show(flag)}: expected true or false")
                flag = default
            flags[key] = flag
        wait = value.get("flex_start_wait_hours", FLEX_START_WAIT_HOURS)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= MAX_FLEX_START_WAIT_HOURS:
            self.problems.append(
                f"fallback.flex_start_wait_hours = {show(wait)}: expected hours from 0 to "
                f"{MAX_FLEX_START_WAIT_HOURS:g}, the queue wait flex-start is planned with"
            )
            wait = FLEX_START_WAIT_HOURS
        return FallbackSpec(
            machine_type=out["machine_type"],
            gpu=out["gpu"],
            switch_back=flags["switch_back"],
            flex_start=flags["flex_start"],
            flex_start_wait_hours=float(wait),
        )

    def placement(self) -> Placement | None:
        """`placement`: `regions` (a list of regions, the first where the job starts), `shapes` (other
        machines, after compute:'s), with `move_after_minutes` and `preemptions_per_hour` (when the
        job moves on)."""
        value = self._get("placement")
        if value is None:
            return None
        known = ("regions", "shapes", "move_after_minutes", "preemptions_per_hour")
        if not isinstance(value, dict):
            self._problem("placement", value, "a mapping with regions (and move_after_minutes, preemptions_per_hour)")
            return None
        for key in sorted(str(k) for k in value if k not in known):
            close = did_you_mean(key, known)
            self.problems.append(
                f"placement.{key}: unknown key{f' ({close})' if close else ''}; expected {', '.join(known)}"
            )
        regions = value.get("regions")
        if not isinstance(regions, list) or not regions:
            self.problems.append(
                f"placement.regions = {show(regions)}: expected a list of regions, e.g. [us-west1, us-central1]"
            )
            return None
        for region in regions:
            if not isinstance(region, str) or not re.fullmatch(r"[a-z]+-[a-z]+[0-9]+", region):
                hint = (
                    f"; {region} is a zone, its region is {region_of_zone(region)}"
                    if isinstance(region, str) and re.fullmatch(r"[a-z]+-[a-z]+[0-9]+-[a-z]", region)
                    else ""
                )
                self.problems.append(f"placement.regions: {show(region)} is not a region (e.g. us-west1){hint}")
                return None
        if len(set(regions)) != len(regions):
            self.problems.append(f"placement.regions: {', '.join(regions)} names a region twice")
        numbers = {}
        for key, (low, high) in PLACEMENT_RANGES.items():
            default = getattr(Placement, key)  # the dataclass's default: one home for it
            item = value.get(key, default)
            if isinstance(item, bool) or not isinstance(item, (int, float)) or not low <= item <= high:
                self.problems.append(f"placement.{key} = {show(item)}: expected a number from {low:g} to {high:g}")
                item = default
            numbers[key] = float(item)
        return Placement(tuple(regions), shapes=self._shapes(value.get("shapes")), **numbers)

    def notify(self) -> tuple[NotifyTarget, ...]:
        """`notify`: a list of targets, each `url`, `format`, `on`, `no_vm_minutes`; one line a problem."""
        value = self._get("notify")
        if value is None or value == []:
            return ()
        if not isinstance(value, list):
            self._problem(
                "notify", value, "a list of targets, e.g. [{url: https://hooks.slack.com/services/..., format: slack}]"
            )
            return ()
        if len(value) > MAX_NOTIFY_TARGETS:
            self.problems.append(f"notify: {len(value)} targets; expected at most {MAX_NOTIFY_TARGETS}")
            return ()
        known = NOTIFY_KEYS
        targets = []
        for i, item in enumerate(value):
            label = f"notify[{i}]"
            if not isinstance(item, dict):
                self.problems.append(f"{label} = {show(item)}: expected a mapping with url (and format, on)")
                continue
            # YAML 1.1, which PyYAML reads, takes an unquoted `on:` key for the boolean true
            item = {("on" if k is True and "on" not in item else k): v for k, v in item.items()}
            count = len(self.problems)
            for key in sorted(str(k) for k in item if k not in known):
                close = did_you_mean(key, known)
                self.problems.append(
                    f"{label}.{key}: unknown key{f' ({close})' if close else ''}; expected {', '.join(known)}"
                )
            url = item.get("url")
            wrong = notify_url_problem(url)
            if wrong:
                self.problems.append(f"{label}.url = {show('***' if looks_secret(url) else url)}: expected {wrong}")
            fmt = item.get("format", "generic")
            if fmt not in NOTIFY_FORMATS:
                self.problems.append(f"{label}.format = {show(fmt)}: expected one of {', '.join(NOTIFY_FORMATS)}")
            on = item.get("on", [])
            on = [on] if isinstance(on, str) else on
            if "on" in item and on == []:
                self.problems.append(
                    f"{label}.on = []: expected at least one event; leave on: out to be told every event"
                )
            if not isinstance(on, list) or not all(isinstance(e, str) for e in on):
                self.problems.append(
                    f"{label}.on = {show(on)}: expected a list of events among {', '.join(NOTIFY_EVENTS)}"
                )
                on = []
            for event in on:
                if event not in NOTIFY_EVENTS:
                    close = did_you_mean(event, NOTIFY_EVENTS)
                    self.problems.append(
                        f"{label}.on: {show(event)} is no event{f' ({close})' if close else ''}; "
                        f"expected among {', '.join(NOTIFY_EVENTS)}"
                    )
            minutes = item.get("no_vm_minutes", NotifyTarget.no_vm_minutes)
            low, high = PLACEMENT_RANGES["move_after_minutes"]
            if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not low <= minutes <= high:
                self.problems.append(
                    f"{label}.no_vm_minutes = {show(minutes)}: expected a number from {low:g} to {high:g}"
                )
            if len(self.problems) == count:
                targets.append(
                    NotifyTarget(
                        url=str(url).strip(), format=str(fmt), on=tuple(dict.fromkeys(on)), no_vm_minutes=float(minutes)
                    )
                )
        return tuple(targets)

    def budget(self) -> Budget | None:
        """`budget`: `usd` (more than 0) and `warn_at` (a share from 0 to 1, default 0.8)."""
        value = self._get("budget")
        if value is None:
            return None
        if not isinstance(value, dict):
            self._problem("budget", value, "a mapping with usd (and warn_at), e.g. {usd: 250, warn_at: 0.8}")
            return None
        known = BUDGET_KEYS
        for key in sorted(str(k) for k in value if k not in known):
            close = did_you_mean(key, known)
            self.problems.append(f"budget.{key}: unknown key{f' ({close})' if close else ''}; expected usd or warn_at")
        usd, warn = value.get("usd"), value.get("warn_at", Budget.warn_at)
        ok = True
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not 0 < usd <= 1e9:
            hint = (
                " (YAML reads 1e9 as text: write 1.0e9 or 1000000000)"
                if isinstance(usd, str) and re.fullmatch(r"[0-9.]+[eE][-+]?[0-9]+", usd.strip())
                else ""
            )
            self.problems.append(
                f"budget.usd = {show(usd)}: expected US dollars, more than 0 and at most 1000000000{hint}"
            )
            ok = False
        if isinstance(warn, bool) or not isinstance(warn, (int, float)) or not 0 < warn < 1:
            self.problems.append(f"budget.warn_at = {show(warn)}: expected a share between 0 and 1, e.g. 0.8")
            ok = False
        return Budget(float(usd), float(warn)) if ok and isinstance(usd, (int, float)) else None

    def _shapes(self, value: Any) -> tuple[Shape, ...]:
        """`placement.shapes`: a list of mappings with the machine keys of `compute:`. Only their form
        is checked here; the machine rules are compute:'s, checked where the template is made
        (survivor/cloud/template.py `machine_problems`), as the spec knows no machine table."""
        if value is None or value == []:
            return ()
        if not isinstance(value, list):
            self.problems.append(
                f"placement.shapes = {show(value)}: expected a list of shapes, e.g. [{{machine_type: g2-standard-8}}]"
            )
            return ()
        if len(value) > MAX_SHAPES:
            self.problems.append(f"placement.shapes: {len(value)} shapes; expected at most {MAX_SHAPES}")
            return ()
        shapes: list[Shape] = []
        first: dict[Shape, int] = {}  # a dict, not `in shapes`: a hostile spec may list 50 000 of them
        for i, item in enumerate(value):
            label = f"placement.shapes[{i}]"
            if not isinstance(item, dict) or not item:
                self.problems.append(f"{label} = {show(item)}: expected a mapping with machine_type and/or gpu")
                continue
            for key in sorted(str(k) for k in item if k not in SHAPE_KEYS):
                close = did_you_mean(key, SHAPE_KEYS)
                self.problems.append(
                    f"{label}.{key}: unknown key{f' ({close})' if close else ''}; expected machine_type or gpu"
                )
            keys = {}
            for key, pattern, expected in (
                ("machine_type", r"[a-z0-9][a-z0-9-]{0,62}", "a machine type such as g2-standard-8"),
                ("gpu", r"none|[a-z0-9][a-z0-9-]{0,62}:[1-9][0-9]?", "TYPE:COUNT such as nvidia-tesla-t4:1, or none"),
            ):
                field_value = item.get(key)
                if field_value is not None and (
                    not isinstance(field_value, str) or not re.fullmatch(pattern, field_value)
                ):
                    self.problems.append(f"{label}.{key} = {show(field_value)}: expected {expected}")
                    field_value = None
                keys[key] = field_value
            shape = Shape(**keys)
            if shape in first:
                self.problems.append(f"{label}: the same shape as placement.shapes[{first[shape]}]")
            first.setdefault(shape, i)
            shapes.append(shape)
        return tuple(shapes)

    def gpus(self, key: str) -> int | None:
        """`num_gpus`: a count, or None for `all` (every GPU the VM has)."""
        value = self._get(key)
        if value is None or (isinstance(value, str) and value.strip().lower() in ("all", "auto")):
            return None
        self.seen.discard(key)
        return self.integer(key)

    def name(self) -> str:
        """`name`: a GCE resource name; by default the job dir's last part, made one."""
        value = self.string("name")
        if value is not None:
            if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", value):
                self._problem("name", value, "a lowercase name of letters, digits and hyphens (a GCE resource name)")
            return value
        job_dir = self.data.get("job_dir")
        if isinstance(job_dir, str):
            tail = posixpath.basename(job_dir.rstrip("/")) or "job"
            cleaned = re.sub(r"[^a-z0-9-]+", "-", tail.lower()).strip("-")
            return (cleaned if cleaned[:1].isalpha() else f"job-{cleaned}")[:63].rstrip("-") or "job"
        return "job"

    def on_finish(self) -> str:
        """`on_finish`, or the recipe's `keepAlive: true` as `keep-alive`; `auto` by default."""
        keep_alive = self.boolean("keep_alive")
        value = self._get("on_finish")
        if value is None:
            return "keep-alive" if keep_alive else "auto"
        if not isinstance(value, str) or value not in ON_FINISH:
            self._problem("on_finish", value, "one of " + ", ".join(ON_FINISH))
            return "auto"
        return value

    def hyperparameters(self) -> tuple[tuple[str, str], ...]:
        """`hyperparameters`: (flag, value) pairs, each flag free of the contract's and each value one argv item."""
        value = self._get("hyperparameters")
        if value is None:
            return ()
        if not isinstance(value, dict):
            self._problem("hyperparameters", value, "a mapping of name to value")
            return ()
        out: dict[str, str] = {}
        for name, raw in value.items():
            label = name if self.flat else f"hyperparameters.{name}"
            if not isinstance(name, str) or not _HPARAM_NAME.match(name) or len(name) > 200:
                self.problems.append(f"hyperparameters: name {show(name)}: expected letters, digits, - or _")
                continue
            shown = "'***'" if is_secret_name(name) else show(raw)
            flag = kebab(name)
            taken = agent_flag_taken(name)
            if taken:
                why = (
                    "--help prints and exits 0, which reads as a finished job"
                    if taken == "help"
                    else f"the agent passes --{taken} itself"
                    + ("" if taken == flag else f"; argparse reads --{flag} as --{taken}")
                )
                self.problems.append(
                    f"{label}: a hyperparameter may not be named like the trainer's contract "
                    f"flag --{taken} ({why}); rename it"
                )
                continue
            if flag in out:
                self.problems.append(f"{label}: a second hyperparameter for the flag --{flag}")
                continue
            if isinstance(raw, (dict, list)):
                self.problems.append(f"{label} = {shown}: expected a single value")
                continue
            try:
                text = format_value(raw)
            except ValueError:  # an integer too long to print
                text = None
            if text is None or len(text) > MAX_STRING or "\x00" in text:
                self.problems.append(
                    f"{label} = {shown}: expected a value of at most {MAX_STRING} characters without NUL"
                )
                continue
            if text.startswith("-") and not _is_number(text):  # `--lr --job-dir=/etc` moved the checkpoints
                self.problems.append(
                    f"{label} = {shown}: a value starting with - is read as a flag by the "
                    "trainer's argparse (it could set --job-dir); expected a number or a value "
                    "not starting with -"
                )
                continue
            out[flag] = text
        return tuple(out.items())

    def trainer(self) -> TrainerSpec:
        """`trainer` (or the flat form's keys): one of module, argv or builtin, and where its code comes from."""
        if self.flat:
            module = self.string("trainer_module")
            spec = TrainerSpec(
                module=module,
                builtin=None if module else "cifar10",
                git_url=self.string("trainer_git_url"),
                git_ref=self.string("trainer_git_ref"),
                package=self.string("trainer_package"),
            )
        else:
            value = self._get("trainer")
            if value is None:
                self.problems.append("trainer is missing: expected {module: ...}, {argv: [...]} or {builtin: cifar10}")
                return TrainerSpec()
            if isinstance(value, str) and value in BUILTIN_TRAINERS:  # it ran as `python -m dummy` and failed 3 boots
                self._problem("trainer", value, f"{{builtin: {value}}} (a string is a module to run with python -m)")
                return TrainerSpec()
            if isinstance(value, str):
                value = {"module": value}
            if not isinstance(value, dict):
                self._problem("trainer", value, "a mapping with module, argv or builtin")
                return TrainerSpec()
            known = ("module", "argv", "builtin", "git_url", "git_ref", "package", "save_signal")
            unknown = sorted({show(k) if not isinstance(k, str) else k for k in value} - set(known))
            for key in unknown:
                close = did_you_mean(key, known)
                self.problems.append(
                    f"trainer.{key}: unknown key{f' ({close})' if close else ''}; expected module, "
                    "argv, builtin, git_url, git_ref, package or save_signal"
                )
            spec = TrainerSpec(
                module=self._trainer_string(value, "module"),
                argv=self._argv(value.get("argv")),
                builtin=self._trainer_string(value, "builtin"),
                git_url=self._trainer_string(value, "git_url"),
                git_ref=self._trainer_string(value, "git_ref"),
                package=self._trainer_string(value, "package"),
                save_signal=self._save_signal(value.get("save_signal")),
            )
        chosen = [k for k in ("module", "argv", "builtin") if getattr(spec, k)]
        label = "trainerModule" if self.flat else "trainer"
        refused = not self.flat and any(
            value.get(k) not in (None, "", [], {}) and not getattr(spec, k) for k in ("module", "argv", "builtin")
        )
        if len(chosen) != 1 and not (refused and not chosen):  # a refused one has its own line
            self.problems.append(f"{label}: expected exactly one of module, argv, builtin; got {chosen or 'none'}")
        if spec.module and not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", spec.module):
            self.problems.append(f"{label}.module = {show(spec.module)}: expected a dotted Python module name")
        if spec.builtin and spec.builtin not in BUILTIN_TRAINERS:
            self.problems.append(
                f"{label}.builtin = {show(spec.builtin)}: expected one of {', '.join(BUILTIN_TRAINERS)}"
            )
        if spec.package:
            wrong = validate_uri(spec.package)
            if wrong or not re.search(r"\.(tar\.gz|whl|zip)$", spec.package):
                self.problems.append(
                    f"{label}.package = {show(spec.package)}: expected a gs:// or absolute path to a .tar.gz, .zip or .whl"
                )
        if spec.git_url and spec.git_url.startswith("-"):
            self.problems.append(f"{label}.git_url = {show(spec.git_url)}: expected a repository URL or path")
        if spec.git_ref and spec.git_ref.startswith("-"):
            self.problems.append(f"{label}.git_ref = {show(spec.git_ref)}: expected a branch, tag or commit")
        return spec

    def _argv(self, argv: Any) -> tuple[str, ...]:
        """A YAML list of strings (numbers allowed: `[python, train.py, --lr, 0.1]`), program first."""
        if argv is None or argv == [] or argv == "":
            return ()
        if not isinstance(argv, list) or not all(
            isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in argv
        ):
            self.problems.append(f"trainer.argv = {show(argv)}: expected a list of strings (no shell command line)")
            return ()
        try:
            items = tuple(format_value(a) for a in argv)
        except ValueError:  # an integer too long to print
            items = ("",)
        if not items[0] or any(len(a) > MAX_STRING or "\x00" in a for a in items):
            self.problems.append(
                f"trainer.argv = {show(argv)}: expected a program and arguments of at most "
                f"{MAX_STRING} characters each, without NUL"
            )
            return ()
        return items

    def _trainer_string(self, section: dict, key: str) -> str | None:
        value = section.get(key)
        if value is None or value == "":
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "git_ref":
            value = format_value(value)  # a numeric tag or commit prefix
        if not isinstance(value, str):
            self.problems.append(f"trainer.{key} = {show(value)}: expected a string")
            return None
        if len(value) > MAX_STRING or control_characters(value):
            self.problems.append(
                f"trainer.{key} = {show(value)}: expected a string of at most {MAX_STRING} "
                "characters, no control characters"
            )
            return None
        return value

    def _save_signal(self, value: Any) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.problems.append(f"trainer.save_signal = {show(value)}: expected one of {', '.join(SAVE_SIGNALS)}")
            return None
        name = value.strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name not in SAVE_SIGNALS:
            self.problems.append(f"trainer.save_signal = {show(value)}: expected one of {', '.join(SAVE_SIGNALS)}")
            return None
        return name

    def unsupported(self) -> None:
        """One problem for each recipe attribute survivor cannot honour as it is."""
        for key, value in (self.data.get("_unsupported") or {}).items():
            self.problems.append(f"{key} = {show(value)}: {UNSUPPORTED_FLAT_KEYS[key]}")

    def extra(self) -> dict[str, Any]:
        """The sections other commands read (`EXTRA_SECTIONS`), each a mapping, carried along untouched."""
        out = {}
        for key in EXTRA_SECTIONS:
            if key in self.data:
                self.seen.add(key)
                if not isinstance(self.data[key], dict):
                    self._problem(key, self.data[key], "a mapping")
                else:
                    out[key] = self.data[key]
        return out

    def reject_unknown(self) -> None:
        """One problem for each key nothing read (a YAML spec only), with the key it is close to."""
        if self.flat:
            return
        for key in sorted(set(self.data) - self.seen - _TOP_LEVEL - set(EXTRA_SECTIONS) - {"_unsupported"}):
            close = did_you_mean(key, _TOP_LEVEL | set(EXTRA_SECTIONS))
            hint = (
                f" (write {FLAT_KEYS[key]})"
                if key in FLAT_KEYS
                else f" ({close})"
                if close
                else " (hyperparameters go under hyperparameters:)"
            )
            self.problems.append(f"{key}: unknown key{hint}")


def format_value(value: Any) -> str:
    """Formats a hyperparameter value the way a trainer's argparse expects it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)
