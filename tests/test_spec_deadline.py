"""The job spec's `deadline:` and `fallback:`: a time or a duration, the on-demand machine, one line per problem."""

import datetime as dt

import pytest

from survivor.spec import Deadline, FallbackSpec, JobSpec, SpecError

BASE = "job_dir: /tmp/job\ntrain_steps: 100\ntrainer: {builtin: dummy}\n"


def spec(extra: str) -> JobSpec:
    return JobSpec.from_yaml(BASE + extra)


def problems(extra: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        spec(extra)
    return caught.value.problems


def test_a_deadline_is_a_time_with_its_zone_or_a_duration_from_the_first_start():
    assert spec("deadline: 2026-12-01T18:00:00Z").deadline == Deadline(
        at=dt.datetime(2026, 12, 1, 18, tzinfo=dt.timezone.utc)
    )
    assert spec("deadline: '2026-12-01T18:00:00+02:00'").deadline.at == dt.datetime(
        2026, 12, 1, 16, tzinfo=dt.timezone.utc
    )
    assert spec("deadline: 36h").deadline == Deadline(after_hours=36.0)
    assert spec("deadline: 90m").deadline == Deadline(after_hours=1.5)
    assert spec("deadline: 2d").deadline == Deadline(after_hours=48.0)
    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    assert Deadline(after_hours=36).resolve(start) == start + dt.timedelta(hours=36)


def test_a_deadline_brings_the_same_shape_on_demand_fallback_by_default():
    assert spec("deadline: 36h").fallback == FallbackSpec(machine_type=None, gpu=None, switch_back=True)
    assert spec("").deadline is None and spec("").fallback is None
    chosen = spec(
        "deadline: 36h\nfallback: {machine_type: n1-standard-8, gpu: 'nvidia-tesla-t4:1', switch_back: false}"
    )
    assert chosen.fallback == FallbackSpec("n1-standard-8", "nvidia-tesla-t4:1", False)


@pytest.mark.parametrize("value", ["2026-12-01T18:00:00", "2026-12-01", "36", "0h", "-3h", "400d", "soon", "[1]"])
def test_a_bad_deadline_is_one_line_naming_the_key_and_the_value(value):
    lines = problems(f"deadline: {value}")
    assert len(lines) == 1 and lines[0].startswith("deadline = ") and "expected" in lines[0]


def test_bad_fallbacks_are_one_line_each():
    lines = problems("fallback: {gpu: 'T4 please', colour: red, switch_back: maybe}")
    assert lines == [
        "fallback: only means something with a deadline; add deadline: (e.g. 36h)",
        "fallback.colour: unknown key; expected machine_type, gpu, switch_back, flex_start or flex_start_wait_hours",
        "fallback.gpu = 'T4 please': expected TYPE:COUNT such as nvidia-tesla-t4:1, or none",
        "fallback.switch_back = 'maybe': expected true or false",
    ]
    assert problems("deadline: 36h\nfallback: on-demand") == [
        "fallback = 'on-demand': expected a mapping with machine_type, gpu, switch_back, flex_start or "
        "flex_start_wait_hours"
    ]


def test_deadline_and_fallback_round_trip_through_the_metadata_attribute():
    original = spec("deadline: 2026-12-01T18:00:00Z\nfallback: {machine_type: n1-standard-8, switch_back: false}")
    again = JobSpec.from_yaml(original.to_yaml())
    assert (again.deadline, again.fallback) == (original.deadline, original.fallback)
    assert JobSpec.from_yaml(spec("deadline: 36h").to_yaml()).deadline == Deadline(after_hours=36.0)


@pytest.mark.parametrize(
    "fallback, named",
    [
        ("{machine_type: n1-fakest-99}", "fallback.machine_type n1-fakest-99"),
        ("{gpu: 'nvidia-tesla-zz99:1'}", "fallback.gpu nvidia-tesla-zz99:1"),
        ("{machine_type: e2-standard-4}", "fallback.gpu nvidia-tesla-t4:1 with fallback.machine_type e2-standard-4"),
        (
            "{machine_type: a2-highgpu-1g, gpu: 'nvidia-tesla-t4:3'}",
            "fallback.gpu nvidia-tesla-t4:3 with fallback.machine_type a2-highgpu-1g",
        ),
    ],
)
def test_a_fallback_machine_compute_engine_would_refuse_is_one_line_naming_it(fallback, named):
    from survivor.cloud.template import MachineOptions, machine_problems

    job = spec(f"deadline: 36h\nfallback: {fallback}")
    options = MachineOptions(machine_type="n1-standard-8", gpu_type="nvidia-tesla-t4", gpu_count=1)
    lines = machine_problems(job, options)
    assert len(lines) == 1 and lines[0].startswith("fallback: ") and named in lines[0], lines
    assert machine_problems(spec("deadline: 36h\nfallback: {machine_type: n1-standard-16}"), options) == []


def test_a_deadline_already_past_is_one_warning_line_naming_it_not_an_error():
    from survivor.cloud.template import deadline_warning

    now = dt.datetime(2026, 11, 23, tzinfo=dt.timezone.utc)
    warning = deadline_warning(spec("deadline: 2020-01-01T00:00:00Z"), now)
    assert warning.startswith("warning: deadline 2020-01-01T00:00:00Z is already past") and "\n" not in warning
    assert deadline_warning(spec("deadline: 2026-12-01T18:00:00Z"), now) is None
    assert deadline_warning(spec("deadline: 36h"), now) is None and deadline_warning(spec(""), now) is None


def test_flex_start_is_off_unless_the_fallback_allows_it_and_a_bad_value_is_one_line():
    assert spec("deadline: 36h").fallback.flex_start is False
    allowed = spec("deadline: 36h\nfallback: {flex_start: true, flex_start_wait_hours: 0.5}").fallback
    assert (allowed.flex_start, allowed.flex_start_wait_hours) == (True, 0.5)
    assert spec("deadline: 36h\nfallback: {flex_start: true}").fallback.flex_start_wait_hours == 2.0
    assert problems("deadline: 36h\nfallback: {flex_start: sometimes}") == [
        "fallback.flex_start = 'sometimes': expected true or false"
    ]
    assert problems("deadline: 36h\nfallback: {flex_start: true, flex_start_wait_hours: 200}") == [
        "fallback.flex_start_wait_hours = 200: expected hours from 0 to 168, the queue wait flex-start is planned with"
    ]
    again = spec("deadline: 36h\nfallback: {flex_start: true, flex_start_wait_hours: 3}")
    assert JobSpec.from_mapping(again.to_mapping()).fallback == again.fallback
