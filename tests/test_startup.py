"""The startup script, the unit and the install they ship with: fast checks (the full boot is
tests/test_boot_rehearsal.py). The script runs for real in a sandbox root against the metadata
emulator; none of these gets as far as pip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from survivor.operator import image
from survivor.local.boot import STARTUP, SandboxRoot
from survivor.local.metadata_server import MetadataServer
from survivor.cloud.template import startup_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_STARTUP = os.path.join(ROOT, "survivor", "startup")
SHA = "a" * 64
GOOD = {
    "survivor-wheel": "gs://bucket/run/survivor/install/aaaa/survivor_train-0.1.0-py3-none-any.whl",
    "survivor-wheel-sha256": SHA,
    "survivor-lock": "gs://bucket/run/survivor/install/bbbb/vm-lock.txt",
    "survivor-lock-sha256": SHA,
}


def test_startup_script_is_shellcheck_clean():
    result = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "shellcheck"), STARTUP], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def test_the_unit_has_one_copy_and_sends_the_agent_to_the_serial_console_and_the_journal():
    script = open(STARTUP).read()
    assert "[Service]" not in script  # the script copies the unit from the installed wheel
    unit = open(os.path.join(PACKAGE_STARTUP, "survivor-agent.service")).read()
    assert re.search(r"^StandardOutput=journal\+console$", unit, re.M)
    assert re.search(r"^StandardError=journal\+console$", unit, re.M)
    assert "Restart=on-failure" in unit and "StartLimitBurst=" in unit
    assert int(unit.split("TimeoutStopSec=")[1].split()[0]) >= 25
    # top-level startup/ is the package's directory, not a second copy
    assert os.path.realpath(os.path.join(ROOT, "startup")) == os.path.realpath(PACKAGE_STARTUP)
    assert startup_script() == script


def test_the_wheel_carries_the_startup_script_the_unit_and_the_lock():
    with zipfile.ZipFile(image.build_wheel()) as wheel:
        names = set(wheel.namelist())
        assert {
            "survivor/startup/startup.sh",
            "survivor/startup/survivor-agent.service",
            "survivor/startup/vm-lock.txt",
        } <= names
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Name: survivor-train" in metadata and "Requires-Python: >=3.10" in metadata


@pytest.mark.slow  # two wheel builds, each in pip's fresh build environment
def test_the_wheel_is_the_same_bytes_for_the_same_source(tmp_path):
    import shutil

    snapshot = tmp_path / "tree"  # the checkout as it is now (others may be editing it)
    shutil.copytree(os.path.join(ROOT, "survivor"), snapshot / "survivor", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(os.path.join(ROOT, name), snapshot)
    first = image.build_wheel(str(tmp_path / "a"), root=str(snapshot))
    second = image.build_wheel(str(tmp_path / "b"), root=str(snapshot))
    assert first != second and image.sha256_of(first) == image.sha256_of(second)


def test_the_vm_lock_pins_every_dependency_with_hashes_for_every_python_from_3_10():
    from importlib import metadata

    from packaging.requirements import Requirement

    text = open(image.lock_path()).read()
    # universal from the floor: the default image's 3.12 (Ubuntu 24.04) and 22.04's 3.10 both install it
    assert "--universal" in text and "--python-version 3.10" in text and "--extra gpu" in text
    assert "--generate-hashes" in text
    entries = re.findall(
        r"^([a-z0-9][a-z0-9._-]*)==(\S+)(?: ;[^\\\n]*)?((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)", text, re.M
    )
    pinned = {name for name, _, _ in entries}
    assert len(entries) == len(re.findall(r"^[a-z0-9][a-z0-9._-]*==", text, re.M))  # every pin has hashes
    wanted = set()
    for line in metadata.requires("survivor-train"):
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": "gpu", "sys_platform": "linux"}):
            wanted.add(re.sub(r"[-_.]+", "-", requirement.name).lower())
    assert wanted - pinned == set(), "regenerate survivor/startup/vm-lock.txt (command in its first lines)"
    assert "nvidia-cudnn-cu12" in pinned  # tensorflow[and-cuda]


def test_readme_never_installs_the_bare_name_survivor():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert not re.search(r"pip install (-\S+ )*survivor(\[|\s|$|==)", readme)
    assert "survivor-train" in readme


# -- the script against the metadata emulator, stopping before pip ----------------------------------


def boot(tmp_path, attributes: dict[str, str], **env: str):
    metadata = MetadataServer(attributes=attributes, name="vm-1").start()
    root = SandboxRoot(str(tmp_path / "root"))
    os.makedirs(root.path, exist_ok=True)
    try:
        result = root.run_startup(metadata.host, env={"STORAGE_EMULATOR_HOST": "127.0.0.1:9", **env}, timeout=120)
        guest = metadata.get("instance/guest-attributes")
    finally:
        metadata.stop()
    return root, result, guest.get("survivor", {})


@pytest.mark.parametrize(
    "key, value",
    [
        ("survivor-wheel", "gs://bucket/x/survivor_train-0.1.0-py3-none-any.whl; reboot"),
        ("survivor-wheel", "file:///etc/passwd/survivor_train-0.1.0-py3-none-any.whl"),
        ("survivor-wheel", "gs://bucket/x/other-1.0-py3-none-any.whl"),
        ("survivor-wheel-sha256", "$(touch /tmp/pwned)"),
        ("survivor-lock", "gs://bucket/lock.txt`touch /tmp/pwned`"),
        ("survivor-lock-sha256", "abc"),
        ("survivor-mode", "build; touch /tmp/pwned"),
    ],
)
def test_a_hostile_metadata_value_is_refused_and_reported_before_anything_runs(tmp_path, key, value):
    root, result, guest = boot(tmp_path, {**GOOD, key: value})
    assert result.returncode == 1, result.output
    assert f"FAILED: refusing {key}" in result.output
    assert guest["state"] == "install-failed" and guest["install-error"].startswith(f"refusing {key}")
    assert not os.path.exists(root.at("/opt/survivor/venv")) and not os.path.exists("/tmp/pwned")


def test_no_wheel_in_metadata_and_nothing_installed_is_a_reported_failure(tmp_path):
    root, result, guest = boot(tmp_path, {})
    assert result.returncode == 1
    assert "no survivor-wheel in metadata and no survivor in" in guest["install-error"]
    assert open(root.at("/opt/survivor/failed-boots")).read().strip() == "1"


def test_an_unexpected_failure_is_reported_before_set_e_exits(tmp_path):
    root = tmp_path / "root"
    (root / "opt").mkdir(parents=True)
    (root / "opt" / "survivor").write_text("a file where the install directory goes")
    _, result, guest = boot(tmp_path, GOOD)
    assert result.returncode == 1
    assert "FAILED: line " in result.output and "unexpected failure of" in result.output
    assert guest["state"] == "install-failed" and "unexpected failure" in guest["install-error"]


def test_a_staged_file_that_differs_from_its_sha256_is_refused_before_pip(tmp_path, gcs_server, bucket):
    from survivor.jobdir.storage import open_storage

    job_dir = f"gs://{bucket}/run"
    open_storage(job_dir).write("survivor/install/x/survivor_train-0.1.0-py3-none-any.whl", b"swapped bytes")
    attributes = {
        **GOOD,
        "survivor-wheel": f"{job_dir}/survivor/install/x/survivor_train-0.1.0-py3-none-any.whl",
        "survivor-job-dir": job_dir,
    }
    root, result, guest = boot(tmp_path, attributes, STORAGE_EMULATOR_HOST=gcs_server.url)
    assert result.returncode == 1
    assert f"not the {SHA} make-template recorded" in guest["install-error"]
    assert not os.path.exists(root.at("/opt/survivor/venv"))
    records = [info.name for info in open_storage(job_dir).list(image.BOOTS)]
    assert len(records) == 1 and records[0].endswith("-vm-1-failed.json")


# -- the metadata server, closed to the trainer's user ------------------------------------------------

FIREWALL_TRY = r"""
set -euo pipefail
ip link set lo up
ip addr add 169.254.169.254/32 dev lo  # this namespace's own "metadata server" address
"$@"  # closes the metadata server to nobody
"$@"  # a second run adds nothing
iptables -w -S OUTPUT | grep -c -- '--uid-owner' | sed 's/^/rules: /'
/usr/bin/python3 -m http.server --bind 169.254.169.254 80 >/dev/null 2>&1 &
server=$!
ask='import http.client
try:
    connection = http.client.HTTPConnection("169.254.169.254", 80, timeout=5)
    connection.request("GET", "/")
    print(connection.getresponse().status)
except OSError as exc:
    print(type(exc).__name__)'
for _ in $(seq 50); do [[ "$(/usr/bin/python3 -c "$ask")" == 200 ]] && break; sleep 0.1; done
echo "root: $(/usr/bin/python3 -c "$ask" 2>&1 | tail -n 1)"
echo "nobody: $(setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 -c "$ask" 2>&1 | tail -n 1)"
kill "${server}"
"""
#: startup.sh's own function, read out of the script
STARTUP_CLOSES = [
    "bash",
    "-c",
    "readonly METADATA_IP=169.254.169.254; "
    'eval "$(sed -n \'/^conceal_metadata() {/,/^}/p\' "$0")"; conceal_metadata nobody',
    STARTUP,
]
#: the agent's, for a spec's own user (trainer.close_metadata_server)
AGENT_CLOSES = [
    sys.executable,
    "-c",
    "import pwd; from survivor.agent.metadata_firewall import close_to; close_to(pwd.getpwnam('nobody').pw_uid)",
]


@pytest.mark.skipif(
    os.geteuid() != 0
    or not os.access("/usr/bin/python3", os.X_OK)
    or not all(shutil.which(t) for t in ("iptables", "unshare", "setpriv", "ip")),
    reason="needs root, iptables, unshare, setpriv, ip and /usr/bin/python3: a network namespace of its own",
)
@pytest.mark.parametrize("closes", [STARTUP_CLOSES, AGENT_CLOSES], ids=["startup.sh", "agent"])
def test_the_trainers_user_gets_no_answer_from_the_metadata_server(tmp_path, closes):
    """The rule, for real, in a network namespace of its own (the host's firewall is not touched)
    whose loopback holds 169.254.169.254, added by startup.sh (survivor-trainer) or by the agent (a
    spec's own user): root's connection is answered, the trainer's user's is reset; the rule is
    added once however often it runs."""
    script = tmp_path / "try.sh"
    script.write_text(FIREWALL_TRY)
    done = subprocess.run(
        ["unshare", "--net", "bash", str(script), *closes], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert ["rules: 1", "root: 200", "nobody: ConnectionRefusedError"] == lines, done.stdout + done.stderr


def test_the_agent_runs_as_root_and_the_trainer_as_the_user_the_metadata_server_is_closed_to():
    """The unit names no User= (systemd then runs the agent as root, which may switch users) and
    passes the agent the very user startup.sh closes the metadata server to."""
    unit = open(os.path.join(PACKAGE_STARTUP, "survivor-agent.service")).read()
    assert not re.search(r"^(User|Group|DynamicUser)=", unit, re.M)
    [exec_start] = re.findall(r"^ExecStart=(.*)$", unit, re.M)
    words = exec_start.split()
    closed_to = re.search(r"^readonly TRAINER_USER=(\S+)$", open(STARTUP).read(), re.M).group(1)
    assert words[words.index("--trainer-user") + 1] == closed_to == "survivor-trainer"


def test_the_agent_adds_the_same_rule_as_startup_sh():
    """A spec's own user gets startup.sh's rule from the agent (metadata_firewall.rule), word for word."""
    from survivor.agent.metadata_firewall import METADATA_IP, rule

    text = open(STARTUP).read()
    words = re.search(r"local rule=\((.*?)\)\n", text, re.S).group(1).split()
    substituted = [
        w.replace('"${METADATA_IP}/32"', f"{METADATA_IP}/32").replace('"${uid}"', "1234").strip('"') for w in words
    ]
    assert substituted == rule(1234)
    assert f"readonly METADATA_IP={METADATA_IP}" in text


def test_the_metadata_server_is_closed_to_the_trainer_before_the_agent_starts():
    text = open(STARTUP).read()
    rule = text.index('conceal_metadata "${TRAINER_USER}"')
    assert rule < text.index("systemctl start survivor-agent.service")
    assert "--uid-owner" in text and "REJECT" in text
