"""`survivor watch --every`: a period the look can keep (1m to 24h, whole minutes or hours), or one
line naming the value as typed and exit 2 before anything is asked of Google Cloud."""

import pytest

from survivor.commands.main import main
from survivor.commands.watch import every_minutes

BASE = ["watch", "cifar10", "--project", "survivor-local", "--zone", "us-west1-b"]


@pytest.mark.parametrize("text, minutes", [("1m", 1), ("15m", 15), ("1h", 60), ("24h", 1440)])
def test_every_takes_whole_minutes_or_hours(text, minutes):
    assert every_minutes(text) == minutes


@pytest.mark.parametrize("text", ["1e9d", "3d", "nan", "10s", "0", "0m", "25h", "1.5h", "-5m", "15", "inf"])
def test_every_refuses_anything_else_in_one_line_naming_it(text, capsys):
    assert main(BASE + [f"--every={text}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--every {text!r}" in err[0], err


def test_image_without_deploy_is_refused(capsys):
    assert main(BASE + ["--image", "us-docker.pkg.dev/p/survivor/survivor:1"]) == 2
    assert "--image" in capsys.readouterr().err
