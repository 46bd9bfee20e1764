"""benchmarks/capacity.py's model on hand-made traces whose answers are known: where a Spot VM goes,
when it is preempted, what a move is, and what the rows say."""

import json

import pytest

from benchmarks import capacity
from benchmarks.capacity import Placement, TraceError, load, region_of
from survivor.local import traces

GAP = 360  # seconds: a point every 0.1 h
TICK = 1 / 60


def write(folder, zone, points):
    (folder / f"{zone}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": GAP}, "data": points}))


@pytest.fixture
def east_out_at_2h(tmp_path):
    """east-1 (one zone) has capacity for 2 h, then none for 10 h; west-1 always."""
    write(tmp_path, "east-1a", [1] * 20 + [0] * 100 + [1] * 80)
    write(tmp_path, "west-1a", [2] * 200)
    return load(str(tmp_path))


def job(hours=4.0, deadline=8.0, lost=0.05):
    return capacity.job_of(hours, deadline, restart=0.2, lost=lost)


def replay(zones, rule, policy, **kw):
    where = Placement(zones, 0.0, "east-1", rule)
    return where, traces.replay(where, job(**kw), policy, limit_factor=2.0)


def test_a_zones_region_is_its_name_less_the_last_letter_and_a_point_above_zero_is_capacity(east_out_at_2h):
    assert region_of("us-east-1a") == "us-east-1" and east_out_at_2h.regions == ["east-1", "west-1"]
    assert east_out_at_2h.up("east-1a", 1.9, 1.99) and not east_out_at_2h.up("east-1a", 1.95, 2.05)
    assert east_out_at_2h.up("west-1a", 19.9, 19.99) and not east_out_at_2h.up("west-1a", 19.95, 20.05)  # past the end
    assert east_out_at_2h.share(["east-1a"]) == pytest.approx(100 / 200)


def test_eager_next_region_relaunches_at_once_outside_the_preempted_region(east_out_at_2h):
    where, run = replay(east_out_at_2h, "eager", traces.always(traces.SPOT))
    # boot 0.2, train 1.8 h in east-1a, preempted at 2.0 losing 0.05 h, boot 0.2 in west-1a, train 2.25 h
    assert run.preemptions == 1 and where.zone == "west-1a" and where.moves == 1
    assert run.finished_at == pytest.approx(2.0 + 0.2 + 2.25, abs=2 * TICK)


def test_by_default_a_preemption_loses_no_work_and_a_restart_is_the_measured_boot(east_out_at_2h):
    # the notice commit: survivor loses no step to a noticed preemption; the restart is the boot
    # measurements' ~180 s (benchmarks/capacity.py RESTART_HOURS), for every policy alike
    assert capacity.LOST_HOURS == 0.0 and capacity.RESTART_HOURS == pytest.approx(180 / 3600, abs=0.001)
    measured = capacity.job_of(4.0, 8.0, capacity.RESTART_HOURS)
    where = Placement(east_out_at_2h, 0.0, "east-1", "eager")
    run = traces.replay(where, measured, traces.always(traces.SPOT), limit_factor=2.0)
    # boot 0.05, train 1.95 h in east-1a, preempted at 2.0 losing nothing, boot 0.05 in west-1a, train 2.05 h
    assert run.finished_at == pytest.approx(2.0 + 0.05 + 2.05, abs=2 * TICK)


def test_failover_first_waits_its_window_in_the_preempted_region(east_out_at_2h):
    where, run = replay(east_out_at_2h, "failover", traces.always(traces.SPOT))
    assert where.zone == "west-1a" and where.moves == 1
    assert run.finished_at == pytest.approx(2.0 + capacity.SKYPILOT_WINDOW_HOURS + 0.2 + 2.25, abs=2 * TICK)


def test_confined_to_its_region_a_spot_only_job_waits_out_the_outage(east_out_at_2h):
    where, run = replay(east_out_at_2h, "region", traces.always(traces.SPOT))
    assert where.moves == 0 and not run.met  # back at 12 h: 12 + 0.2 + 2.25 > 8
    assert run.finished_at == pytest.approx(12.0 + 0.2 + 2.25, abs=2 * TICK)


def test_survivor_moves_to_the_region_with_capacity_and_confined_pays_for_on_demand(east_out_at_2h):
    base = traces.replay(traces.Trace(0, ()), job(), traces.always(traces.ON_DEMAND), start_mode=traces.ON_DEMAND)
    moved = capacity.replay_one(east_out_at_2h, "survivor", job(), 0.0, "east-1", base.cost_usd)
    confined = capacity.replay_one(east_out_at_2h, "survivor, one region", job(), 0.0, "east-1", base.cost_usd)
    assert moved.met and confined.met and moved.moves == 1 and confined.moves == 0
    spot, on_demand = job().prices()
    # all Spot: two boots and the work with the lost 0.05 h, at the Spot price
    assert moved.cost == pytest.approx(spot * (0.2 + 1.8 + 0.2 + 2.25) / base.cost_usd, abs=0.01)
    assert confined.cost > 2 * moved.cost  # the rest ran on on-demand
    assert base.cost_usd == pytest.approx(on_demand * 4.2, abs=on_demand * 2 * TICK)  # minute ticks


def test_a_job_stays_in_its_home_region_while_it_has_capacity(tmp_path):
    write(tmp_path, "east-1a", [1] * 200)
    write(tmp_path, "west-1a", [1] * 200)
    for rule in ("move", "anywhere", "eager", "failover"):
        where, run = replay(load(str(tmp_path)), rule, traces.always(traces.SPOT))
        assert (where.zone, where.moves, run.preemptions) == ("east-1a", 0, 0), rule


def test_the_rows_name_every_policy_with_the_published_keys(east_out_at_2h, tmp_path):
    results = capacity.run(east_out_at_2h, every=24.0, jobs=((4.0, 8.0),), restart=0.2)
    rows = capacity.rows(results)
    assert [r["policy"] for r in rows] == list(capacity.POLICIES) and rows[0]["policy"] == "survivor"
    assert set(rows[0]) == {
        "policy",
        "jobs",
        "deadlines_met",
        "vm_fraction",
        "goodput",
        "mean_cost",
        "worst_cost",
        "moves_per_job",
    }
    on_demand = rows[-1]
    assert (on_demand["jobs"], on_demand["mean_cost"], on_demand["worst_cost"]) == (2, 1.0, 1.0)  # a start per region
    assert on_demand["vm_fraction"] == pytest.approx(4 / 4.2, abs=0.01)


def test_a_trace_not_in_the_published_format_is_one_line_naming_the_file(tmp_path, capsys):
    (tmp_path / "east-1a_x.json").write_text('{"data": [1, 0]}')
    with pytest.raises(TraceError, match="east-1a_x.json: not a trace in the published format"):
        load(str(tmp_path))
    assert capacity.main(["--traces", str(tmp_path), "--json", str(tmp_path / "rows.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "east-1a_x.json" in err and "Traceback" not in err


def test_a_folder_without_traces_says_so(tmp_path):
    (tmp_path / "README.md").write_text("no traces here")
    with pytest.raises(TraceError, match="no <zone>_<anything>.json file"):
        load(str(tmp_path))
    with pytest.raises(TraceError, match="cannot list it"):
        load(str(tmp_path / "missing"))


def test_after_a_preemption_eager_leaves_the_region_and_the_others_stay_in_its_other_zone(tmp_path):
    write(tmp_path, "east-1a", [1] * 20 + [0] * 180)
    write(tmp_path, "east-1b", [1] * 200)
    write(tmp_path, "west-1a", [1] * 200)
    zones = load(str(tmp_path))
    landed = {}
    for rule in ("eager", "failover", "move", "anywhere"):
        where, run = replay(zones, rule, traces.always(traces.SPOT))
        landed[rule] = (where.zone, where.moves, run.preemptions)
    assert landed == {
        "eager": ("west-1a", 1, 1),
        "failover": ("east-1b", 0, 1),
        "move": ("east-1b", 0, 1),
        "anywhere": ("east-1b", 0, 1),
    }


def test_survivors_move_follows_its_built_rule_without_an_oracle(tmp_path):
    """The replay's survivor uses survivor/policy/placement.py `decide`: the next region of the list,
    which may be out too; it waits there `move_after` again before the next move (no oracle)."""
    write(tmp_path, "a-1a", [1] * 20 + [0] * 180)
    write(tmp_path, "b-1a", [1] * 20 + [0] * 180)
    write(tmp_path, "c-1a", [1] * 200)
    zones = load(str(tmp_path))
    where = Placement(zones, 0.0, "a-1", "move")
    run = traces.replay(where, job(), traces.survivor_policy(), limit_factor=2.0)
    assert (where.zone, where.moves) == ("c-1a", 2) and run.met
    # an oracle would have gone to c-1 at once: one move
    oracle = Placement(zones, 0.0, "a-1", "anywhere")
    traces.replay(oracle, job(), traces.survivor_policy(), limit_factor=2.0)
    assert oracle.zone == "c-1a"


def test_in_an_outage_of_every_region_survivor_moves_a_few_times_an_hour_not_every_look(tmp_path):
    # both regions out from 2 h to 8 h: without the doubling wait the group walked the list every
    # minute (360 moves); with it, every 15 minutes at most once the rounds have found nothing
    write(tmp_path, "east-1a", [1] * 20 + [0] * 60 + [1] * 120)
    write(tmp_path, "west-1a", [1] * 20 + [0] * 60 + [1] * 120)
    where = Placement(load(str(tmp_path)), 0.0, "east-1", "move")
    run = traces.replay(where, job(hours=4.0, deadline=16.0), traces.always(traces.SPOT), limit_factor=2.0)
    assert run.met and run.preemptions == 1
    # 1 + 2 + 4 + 8 minutes, then one move each 15 minutes: about 26 in the 6 h
    assert 15 <= where.moves <= 30, where.moves
    # back on capacity within one wait of its return: 8 h + at most 15 min + the boot, then 2.25 h of work
    assert run.finished_at is not None and run.finished_at <= 8.0 + 0.25 + 0.2 + 2.25 + 2 * TICK


def test_traces_too_short_for_any_job_are_one_line(tmp_path, capsys):
    write(tmp_path, "east-1a", [1] * 3)  # 0.3 h: no job of the table fits
    assert capacity.main(["--traces", str(tmp_path), "--json", str(tmp_path / "rows.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the shortest job replayed needs 18 h" in err and "Traceback" not in err


# -- survivor with capacity data ("advice") and SkyPilot as 0.14.1 ships ("eager-shipped") -----------


def test_after_a_preemption_skypilot_as_shipped_relaunches_in_the_preempted_region_first(tmp_path):
    # skypilot#10021: EAGER_NEXT_REGION as 0.14.1 ships never blocks the region it was preempted in,
    # so it relaunches in the home region's other zone; as its docs describe, it leaves the region
    write(tmp_path, "east-1a", [1] * 20 + [0] * 180)
    write(tmp_path, "east-1b", [1] * 200)
    write(tmp_path, "west-1a", [1] * 200)
    zones = load(str(tmp_path))
    shipped, run = replay(zones, "eager-shipped", traces.always(traces.SPOT))
    assert (shipped.zone, shipped.moves, run.preemptions) == ("east-1b", 0, 1)
    documented, _ = replay(zones, "eager", traces.always(traces.SPOT))
    assert (documented.zone, documented.moves) == ("west-1a", 1)


def test_skypilot_as_shipped_goes_home_first_once_the_home_region_has_capacity_again(tmp_path):
    # home east-1 out 1-2 h: the shipped rule moves to west-1, and after the next preemption (west-1
    # out from 3 h) tries home first again, where there is capacity: two moves
    write(tmp_path, "east-1a", [1] * 10 + [0] * 10 + [1] * 180)
    write(tmp_path, "west-1a", [1] * 30 + [0] * 170)
    where, run = replay(load(str(tmp_path)), "eager-shipped", traces.always(traces.SPOT))
    assert (where.zone, where.moves, run.preemptions) == ("east-1a", 2, 2)


def test_with_capacity_data_survivor_moves_once_at_the_first_look_without_a_timer(east_out_at_2h):
    where, run = replay(east_out_at_2h, "advice", traces.survivor_policy())
    assert (where.zone, where.moves, run.preemptions) == ("west-1a", 1, 1) and run.met
    # preempted at 2.0 (nothing lost to the notice commit beyond the job's 0.05 h), moved at the same look:
    # a boot of 0.2 h in west-1a, then the 2.25 h left
    assert run.finished_at == pytest.approx(2.0 + 0.2 + 2.25, abs=3 * TICK)


def test_with_capacity_data_a_region_that_flaps_every_half_hour_is_left_once_for_the_steady_one(tmp_path):
    write(tmp_path, "east-1a", ([1] * 5 + [0] * 5) * 20)  # 0.5 h up, 0.5 h out
    write(tmp_path, "west-1a", [1] * 200)
    where, run = replay(load(str(tmp_path)), "advice", traces.survivor_policy())
    assert (where.zone, where.moves, run.preemptions) == ("west-1a", 1, 1) and run.met


def test_with_capacity_data_the_look_after_a_preemption_reads_the_data_of_its_tick(tmp_path, monkeypatch):
    # points 90 s apart: east-1 loses its capacity 1.5 min into a one-minute tick (2.025 h). The look
    # that finds the VM preempted reads the tick's last point, the loss included, so survivor moves
    # in that tick, as SkyPilot's EAGER_NEXT_REGION relaunches outside the preempted region; read at
    # the tick's start, the data still showed east-1's capacity and the move waited a tick
    points = {"east-1a": [1] * 81 + [0] * 400, "west-1a": [1] * 481}
    for zone, data in points.items():
        (tmp_path / f"{zone}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 90}, "data": data}))
    zones = load(str(tmp_path))

    def finish(rule, policy):
        where = Placement(zones, 0.0, "east-1", rule)
        run = traces.replay(where, job(), policy, limit_factor=2.0)
        assert run.preemptions == 1 and where.zone == "west-1a" and run.met
        return run.finished_at

    eager = finish("eager", traces.always(traces.SPOT))
    assert finish("advice", traces.survivor_policy()) == eager
    monkeypatch.setattr(capacity, "TICK_HOURS", 1e-9)  # the data of the tick's start
    assert finish("advice", traces.survivor_policy()) == pytest.approx(eager + TICK, abs=1e-3)


def test_with_capacity_data_an_outage_of_every_region_moves_nothing(tmp_path):
    write(tmp_path, "east-1a", [1] * 20 + [0] * 60 + [1] * 120)
    write(tmp_path, "west-1a", [1] * 20 + [0] * 60 + [1] * 120)
    where, run = replay(load(str(tmp_path)), "advice", traces.always(traces.SPOT), hours=4.0, deadline=16.0)
    assert (where.moves, run.preemptions) == (0, 1) and run.met
    assert run.finished_at == pytest.approx(8.0 + 0.2 + 2.25, abs=3 * TICK)  # back when east-1 is


def test_with_capacity_data_even_a_short_remainder_leaves_a_region_that_is_out(east_out_at_2h):
    # at 2.5 h east-1 is out and west-1 steady: 0.05 h of training left would wait in east-1 as
    # long as its outage lasts, so the move (a 0.05 h restart and a 0.01 h restore) pays, as it
    # does with hours left; a region with capacity is never left
    short = Placement(east_out_at_2h, 0.0, "east-1", "advice", hours_left=0.05)
    assert short.candidates(2.5, 2.5 + TICK) == ["west-1a"] and short.moves == 1
    long = Placement(east_out_at_2h, 0.0, "east-1", "advice", hours_left=3.0)
    assert long.candidates(2.5, 2.5 + TICK) == ["west-1a"] and long.moves == 1
    up = Placement(east_out_at_2h, 0.0, "east-1", "advice", hours_left=0.05)
    assert up.candidates(1.5, 1.5 + TICK) and up.moves == 0


def test_the_survivor_row_plans_with_the_training_left_and_its_places_hazard(east_out_at_2h):
    seen = []

    def policy(view):
        seen.append((view.t, view.situation.spot_hazard_per_hour, where.hours_left))
        return traces.SPOT

    where = Placement(east_out_at_2h, 0.0, "east-1", "advice")
    traces.replay(where, job(), capacity.planning(policy, where, job()), limit_factor=2.0)
    lefts = [left for _, _, left in seen]
    assert lefts[0] == 4.0 and lefts == sorted(lefts, reverse=True) and lefts[-1] < 0.25 + TICK  # a look a 0.25 h
    # east-1 has had capacity for an hour at 1.5 h: Google's top band, planned with 8 h (ln 2 / 8 an hour)
    assert [h for t, h, _ in seen if 1.5 <= t < 1.75][0] == pytest.approx(0.0866, abs=0.001)
    off = Placement(east_out_at_2h, 0.0, "east-1", "advice", bet=capacity.Constants(deadline_hazard=False))
    seen.clear()
    traces.replay(off, job(), capacity.planning(policy, off, job()), limit_factor=2.0)
    assert {h for _, h, _ in seen} == {None}


def test_four_machine_shapes_of_one_region_are_four_places_of_one_job(tmp_path):
    for shape, points in (("k80_1", [1] * 200), ("v100_8", [0] * 200)):
        folder = tmp_path / f"aws-10-26-2022-{shape}"
        folder.mkdir()
        (folder / f"us-west-2a_{shape}.json").write_text(json.dumps({"metadata": {"gap_seconds": GAP}, "data": points}))
    zones = capacity.load_shapes([str(tmp_path / "aws-10-26-2022-k80_1"), str(tmp_path / "aws-10-26-2022-v100_8")])
    assert zones.regions == ["k80_1:us-west-2", "v100_8:us-west-2"]
    # a job whose own shape (v100_8) never has capacity moves to the other shape at its first look
    where = Placement(zones, 0.0, "v100_8:us-west-2", "advice")
    run = traces.replay(where, job(), traces.survivor_policy(), limit_factor=2.0)
    assert (where.zone, where.moves) == ("k80_1:us-west-2a", 1) and run.met


def test_the_constants_are_chosen_on_the_first_half_only(tmp_path, monkeypatch):
    write(tmp_path, "east-1a", [1] * 400)
    write(tmp_path, "west-1a", [1] * 400)
    zones = load(str(tmp_path))  # 40 h: a 4 h job replayed to twice its 8 h deadline fits each half once
    halves = []
    real = capacity.run

    def spy(*args, **kw):
        halves.append(kw.get("half"))
        return real(*args, **kw)

    monkeypatch.setattr(capacity, "run", spy)
    grid = (capacity.Constants(horizon_hours=1.0), capacity.Constants(horizon_hours=2.0))
    chosen, tried = capacity.fit(zones, 12.0, restart=0.2, grid=grid, jobs=((4.0, 8.0),))
    assert halves == ["first", "first"] and chosen in grid and len(tried) == 2
    assert all(row["jobs"] == 2 and row["deadlines_met"] == 2 for _, row in tried)  # one start from each home


def test_a_replay_waits_out_every_short_outage_it_runs_into(tmp_path):
    # one point (0.1 h) without capacity every hour: each one a running Spot VM meets preempts it,
    # and no VM is made before the point ends (the replay must not skip an outage inside a minute)
    write(tmp_path, "east-1a", ([1] * 9 + [0]) * 40)
    zones = load(str(tmp_path))
    where, run = replay(zones, "region", traces.always(traces.SPOT), lost=0.0)
    outages = [h + 0.9 for h in range(40) if h + 0.9 < run.finished_at]
    assert run.preemptions == len(outages)
    assert run.finished_at >= 4.0 + 0.2 + len(outages) * (0.1 + 0.2) - 3 * TICK  # 5 outages: 5.7 h
    assert run.spot_hours <= run.finished_at - len(outages) * 0.1 + TICK
