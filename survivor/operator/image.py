"""What a training VM boots with: survivor's own image, or survivor's wheel and the lock from the job's bucket.

    >>> install = stage_install("gs://my-bucket/runs/cifar10")      # builds the wheel, uploads it and the lock
    >>> install.wheel
    'gs://my-bucket/runs/cifar10/survivor/install/3fa2c1d9e0b7a4c2/survivor_train-0.1.0-py3-none-any.whl'
    >>> family_name(install)                                         # survivor's image family for exactly that
    'survivor-0-1-0-tf-2-21-0-3fa2c1d9e0'
    >>> make_image(compute, install, zone="us-west1-b")              # `survivor make-image`

Two ways, one startup script (survivor/startup/startup.sh):

- **the wheel path**: `make-template` uploads survivor's wheel and the lock (survivor/startup/vm-lock.txt:
  every dependency pinned with its sha256, for every Python from 3.10) to the job's bucket and
  names them, with their sha256, in metadata; each boot of a fresh disk pip installs exactly those.
- **the image path**: `survivor make-image` boots a builder VM from the Deep Learning VM family with
  `survivor-mode=build`; the startup script installs the same wheel and lock (and the trainer's pinned
  requirements) and powers off; the builder's disk becomes an image in survivor's family for that
  install (`family_name`), and the builder is deleted. `make-template` boots that family when it
  exists, and such a boot installs nothing: the recipe's custom-image step as a command.

The wheel is built reproducibly (SOURCE_DATE_EPOCH), so the same source gives the same sha256, the same
object names and the same image family.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.resources
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from survivor import __version__
from survivor.cloud.template import DEFAULT_IMAGE_FAMILY, DLVM_PROJECT, SCOPES, Install, startup_script
from survivor.places import region_of_zone

#: zip's earliest time: the wheel's bytes depend on the source only (honoured by setuptools' bdist_wheel)
SOURCE_DATE_EPOCH = "315532800"
#: Where the staged install lives in a job dir (content-addressed, so staging again is harmless)
STAGE = "survivor/install"
#: Boot records the startup script writes (one per failed boot, and the builder's outcome)
BOOTS = "survivor/boots/"
BUILDER_IMAGE_FAMILY = DEFAULT_IMAGE_FAMILY  # the templates' default (cloud/template.py): the image's base


class ImageError(Exception):
    """The install could not be built, staged or baked into an image. Says which step and why."""


# -- the install: wheel + lock ---------------------------------------------------------------------


def lock_path() -> str:
    """The lock shipped in the package: survivor/startup/vm-lock.txt."""
    return str(importlib.resources.files("survivor").joinpath("startup").joinpath("vm-lock.txt"))


def sha256_of(path: str) -> str:
    """The file's sha256, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_tree() -> str | None:
    """The checkout survivor runs from (a pyproject.toml of survivor-train beside the package), or None."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
            return root if re.search(r'^name\s*=\s*"survivor-train"', f.read(), re.M) else None
    except OSError:
        return None


def _tree_digest(root: str) -> str:
    """A digest of everything that goes into the wheel, so an unchanged tree reuses its wheel."""
    digest = hashlib.sha256()
    paths = [os.path.join(root, name) for name in ("pyproject.toml", "setup.py", "README.md")]
    for folder, dirs, files in os.walk(os.path.join(root, "survivor")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        paths += [os.path.join(folder, f) for f in sorted(files) if not f.endswith(".pyc")]
    for path in paths:
        if os.path.isfile(path):
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_wheel(cache_dir: str | None = None, root: str | None = None) -> str:
    """survivor's wheel, built from the checkout survivor runs from (or `root`), one build per state of
    the tree, kept in `cache_dir`. Raises ImageError when survivor was not installed from a checkout."""
    root = root or source_tree()
    if root is None:
        raise ImageError(
            "survivor was not installed from a source checkout, so its wheel cannot be built here: "
            "give --survivor-wheel PATH (a survivor_train-*.whl)"
        )
    cache_dir = cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "survivor", "wheels")
    target = os.path.join(cache_dir, _tree_digest(root))
    os.makedirs(cache_dir, exist_ok=True)
    with _locked(os.path.join(cache_dir, ".lock")):
        found = [f for f in os.listdir(target) if f.endswith(".whl")] if os.path.isdir(target) else []
        if found:
            return os.path.join(target, found[0])
        scratch = tempfile.mkdtemp(prefix="survivor-wheel-", dir=cache_dir)
        source = os.path.join(scratch, "source")
        try:
            # a clean copy: setuptools builds in the source tree, and a build/ left there by an
            # earlier build would put files into the wheel that the tree no longer has
            shutil.copytree(
                os.path.join(root, "survivor"),
                os.path.join(source, "survivor"),
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
            for name in ("pyproject.toml", "setup.py", "README.md"):
                if os.path.exists(os.path.join(root, name)):
                    shutil.copy2(os.path.join(root, name), source)
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "--quiet",
                    "--no-deps",
                    "--disable-pip-version-check",
                    "--wheel-dir",
                    os.path.join(scratch, "dist"),
                    source,
                ],
                env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH},
                capture_output=True,
                text=True,
            )
            dist = os.path.join(scratch, "dist")
            wheels = [f for f in os.listdir(dist) if f.endswith(".whl")] if os.path.isdir(dist) else []
            if result.returncode != 0 or len(wheels) != 1:
                last = (result.stderr.strip().splitlines() or ["no wheel came out"])[-1]
                raise ImageError(f"building survivor's wheel from {root} failed: {last}")
            os.replace(dist, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return os.path.join(target, wheels[0])


@dataclass(frozen=True)
class LocalInstall:
    """The files of an install on this machine, before staging: wheel, lock, trainer requirements."""

    wheel: str
    lock: str
    requirements: str | None = None

    def digests(self) -> tuple[str, str, str | None]:
        """The sha256 of the wheel, the lock and the requirements (None without them)."""
        return sha256_of(self.wheel), sha256_of(self.lock), sha256_of(self.requirements) if self.requirements else None


def local_install(survivor_wheel: str | None = None, requirements: str | None = None) -> LocalInstall:
    """The install make-template and make-image stage: a given wheel file or the one built here, the lock."""
    if survivor_wheel and not os.path.isfile(survivor_wheel):
        raise ImageError(f"--survivor-wheel {survivor_wheel}: no such file (a local survivor_train-*.whl)")
    if requirements and not os.path.isfile(requirements):
        raise ImageError(f"compute.requirements {requirements}: no such file (pinned requirements with --hash)")
    return LocalInstall(survivor_wheel or build_wheel(), lock_path(), requirements)


def staged_names(local: LocalInstall) -> list[tuple[str, str, str]]:
    """Pure decision: (local path, object name in the job dir, sha256) for each file; names are
    content-addressed, so the same file always lands in the same place."""
    out = []
    for path, name, digest in zip(
        (local.wheel, local.lock, local.requirements),
        (os.path.basename(local.wheel), "vm-lock.txt", "requirements.txt"),
        local.digests(),
    ):
        if path and digest:
            out.append((path, f"{STAGE}/{digest[:16]}/{name}", digest))
    return out


def install_for(job_dir: str, local: LocalInstall) -> Install:
    """Pure decision: the Install (gs:// URLs and sha256) that staging `local` in `job_dir` gives."""
    staged = staged_names(local)
    urls = [(f"{job_dir.rstrip('/')}/{name}", digest) for _, name, digest in staged]
    wheel, lock = urls[0], urls[1]
    requirements = urls[2] if len(urls) > 2 else (None, None)
    return Install(
        wheel=wheel[0],
        wheel_sha256=wheel[1],
        lock=lock[0],
        lock_sha256=lock[1],
        requirements=requirements[0],
        requirements_sha256=requirements[1],
        job_dir=job_dir,
    )


def stage_install(job_dir: str, local: LocalInstall, storage_factory: Callable | None = None) -> Install:
    """Uploads the wheel, the lock (and requirements) into the job dir on Cloud Storage, through
    survivor/jobdir/storage.py; returns what the template's metadata names."""
    if not job_dir.startswith("gs://"):
        raise ImageError(f"job_dir {job_dir}: not on Cloud Storage, so a VM cannot fetch survivor's wheel from it")
    from google.auth.exceptions import GoogleAuthError

    from survivor.jobdir.storage import StorageError, open_storage

    try:
        storage = (storage_factory or open_storage)(job_dir)
        # the operator's own files: a link of theirs is followed here (storage.upload, made for a
        # trainer's files, follows none)
        storage.upload([(os.path.realpath(path), name) for path, name, _ in staged_names(local)])
    except GoogleAuthError:  # the storage client is built before storage.py can speak for it
        raise ImageError(
            f"staging survivor's wheel and lock in {job_dir}: no Google Cloud credentials; run `gcloud "
            "auth application-default login`, or set STORAGE_EMULATOR_HOST for a local emulator"
        ) from None
    except StorageError as exc:
        raise ImageError(f"staging survivor's wheel and lock: {exc}") from exc
    return install_for(job_dir, local)


# -- survivor's image ------------------------------------------------------------------------------


def tensorflow_version(lock: str) -> str:
    """The TensorFlow version the lock pins ('unpinned' if none)."""
    with open(lock, encoding="utf-8") as f:
        found = re.search(r"^tensorflow==([0-9][0-9A-Za-z.]*)", f.read(), re.M)
    return found.group(1) if found else "unpinned"


def family_name(install: Install, tf_version: str, base: str = BUILDER_IMAGE_FAMILY) -> str:
    """Pure decision: survivor's image family for exactly this wheel, lock and requirements on the
    Deep Learning VM family `base` (a family name: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63
    characters). The base is named (`base_tag`: CUDA, Ubuntu, driver) and in the digest, so a new
    base (a new driver) is a new family, which make-template then builds."""
    digest = hashlib.sha256(
        f"{install.wheel_sha256} {install.lock_sha256} {install.requirements_sha256} {base}".encode()
    )
    return (f"survivor-{_dashed(__version__)}-tf-{_dashed(tf_version)}-{base_tag(base)}-{digest.hexdigest()[:10]}")[
        :63
    ].rstrip("-")


def base_tag(base: str) -> str:
    """Pure: a short name of a base family: `common-cu129-ubuntu-2404-nvidia-580` -> `cu129-u2404-n580`."""
    m = re.fullmatch(r"common-(cu\d+)-ubuntu-(\d+)-nvidia-(\d+)", base)
    return f"{m.group(1)}-u{m.group(2)}-n{m.group(3)}" if m else _dashed(base)[:16].rstrip("-")


def _dashed(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def builder_body(
    name: str,
    zone: str,
    install: Install,
    *,
    machine_type: str = "n1-standard-8",
    disk_gb: int = 100,
    service_account: str = "default",
    base: str = BUILDER_IMAGE_FAMILY,
    external_ip: bool = True,
    network: str = "global/networks/default",
) -> dict:
    """Pure decision: the `instances.insert` body of make-image's builder: a CPU VM of the Deep Learning
    VM family `base` whose startup script installs `install` (survivor-mode=build) and powers off.
    It follows the job's external-IP choice: without one (`external_ip=False`, an
    organisation's constraints/compute.vmExternalIpAccess) it has no accessConfig and reaches the
    package index only through Cloud NAT or a mirror (preflight says so first)."""
    interface: dict = {"network": network}
    if external_ip:
        interface["accessConfigs"] = [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]
    items = [
        {"key": "startup-script", "value": startup_script()},
        {"key": "survivor-mode", "value": "build"},
        {"key": "enable-guest-attributes", "value": "TRUE"},
        *install.items(),
    ]
    return {
        "name": name,
        "machineType": f"zones/{zone}/machineTypes/{machine_type}",
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "type": "PERSISTENT",
                "initializeParams": {
                    "sourceImage": f"projects/{DLVM_PROJECT}/global/images/family/{base}",
                    "diskSizeGb": str(disk_gb),
                    "diskType": f"zones/{zone}/diskTypes/pd-balanced",
                },
            }
        ],
        "metadata": {"items": items},
        "serviceAccounts": [{"email": service_account, "scopes": [SCOPES["storage"], SCOPES["logging"]]}],
        "networkInterfaces": [interface],
        "labels": {"survivor-role": "image-builder"},
    }


def build_outcome(record_names: list[str], builder: str) -> str | None:
    """Pure decision: 'built', 'not-built' or None (not yet) from the job dir's boot records."""
    for name in sorted(record_names, reverse=True):
        base = name.rsplit("/", 1)[-1]
        for outcome in ("not-built", "built"):
            if base.endswith(f"-{builder}-{outcome}.json"):
                return outcome
    return None


def make_image(
    compute,
    install: Install,
    family: str,
    *,
    zone: str,
    storage=None,
    progress: Callable[[str], None] = print,
    deadline: float = 3600.0,
    poll: float = 15.0,
    keep_builder: bool = False,
    **builder_options,
) -> str:
    """Builds survivor's image for `install` in `family` (unless the family has one): a builder VM,
    its outcome, the image from its disk, the builder deleted. Returns the image's name."""
    from survivor.cloud.compute import ComputeError
    from survivor.jobdir.storage import StorageError

    existing = compute.image_from_family(compute.project, family)
    if existing is not None:
        progress(f"image family {family} already has {existing['name']}: nothing to build")
        return existing["name"]
    if storage is None:
        from survivor.jobdir.storage import open_storage

        storage = open_storage(install.job_dir)
    builder = f"{family}-builder"[:63].rstrip("-")
    if compute.get_instance(zone, builder) is not None:
        # an interrupted make-image left it (still billing); its state is unknown, so start afresh
        progress(f"builder {builder}: left by an earlier make-image; deleting it to start again")
        compute.delete_instance(compute.project, zone, builder)
    # a builder of the same name may have left records (an earlier failed build): only new ones count
    try:
        earlier = {info.name for info in storage.list(BOOTS)}
    except StorageError as exc:
        raise ImageError(f"reading {install.job_dir}/{BOOTS}: {exc}") from exc
    progress(f"builder {builder}: creating in {zone} (installs the wheel and lock, then powers off)")
    compute.insert_instance(zone, builder_body(builder, zone, install, **builder_options))
    try:
        outcome, started, rounds = None, time.monotonic(), 0
        while True:
            vm = compute.get_instance(zone, builder)
            if vm is None:
                raise ImageError(f"builder {builder} disappeared before it finished")
            outcome = build_outcome([info.name for info in storage.list(BOOTS) if info.name not in earlier], builder)
            if outcome == "not-built" or vm["status"] == "TERMINATED":
                break
            if time.monotonic() - started > deadline:
                logs = f"`survivor logs --instance {builder} --zone {zone}`"
                raise ImageError(
                    f"builder {builder}: not done after {deadline:.0f} s; "
                    + (
                        f"see {logs}"
                        if keep_builder
                        else f"it is deleted: run again with a longer --deadline, or with "
                        f"--keep-builder to read its serial console ({logs}) and delete it yourself"
                    )
                )
            state = compute.guest_attributes(zone, builder).get("build", "installing")
            progress(f"builder {builder}: {vm['status'].lower()}, {state} ({time.monotonic() - started:.0f} s)")
            rounds += 1
            time.sleep(min(poll, 0.5 * 2**rounds))  # soon at first (a failure shows early), then every `poll`
        if outcome != "built":
            reason = compute.guest_attributes(zone, builder).get("build", "") or "it powered off without a record"
            raise ImageError(f"builder {builder} could not install: {reason}")
        name = f"{family}-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"[:63]
        progress(f"image {name}: creating in family {family} from the builder's disk")
        compute.insert_image(
            {
                "name": name,
                "family": family,
                "sourceDisk": f"projects/{compute.project}/zones/{zone}/disks/{builder}",
                "description": f"survivor {__version__}: wheel sha256 {install.wheel_sha256}, lock sha256 "
                f"{install.lock_sha256}, requirements sha256 {install.requirements_sha256 or 'none'}",
                "labels": {"survivor-version": _dashed(__version__)},
            }
        )
        return name
    except (ComputeError, StorageError) as exc:
        raise ImageError(str(exc)) from exc
    finally:
        if not keep_builder:
            progress(f"builder {builder}: deleting")
            try:
                compute.delete_instance(compute.project, zone, builder)
            except ComputeError as exc:
                progress(f"builder {builder}: could not delete it ({exc}); delete it by hand")


@dataclass(frozen=True)
class ImageRequest:
    """`survivor make-image`: the job spec whose bucket stages the install, and the builder VM's shape."""

    config: str
    zone: str
    project: str | None = None
    survivor_wheel: str | None = None  # a local survivor_train-*.whl instead of building one from the checkout
    machine_type: str = "n1-standard-8"  # the builder's; it needs no GPU
    disk_gb: int = 100  # the builder's, and so the image's
    deadline: float = 3600.0
    poll_seconds: float = 15.0
    keep_builder: bool = False


@dataclass(frozen=True)
class ImageOutcome:
    """What build_image did: the image it made (None when the family already had one), and the family."""

    image: str | None
    family: str


def build_image(request: ImageRequest, connect: Callable, progress: Callable[[str], None] = print) -> ImageOutcome:
    """Survivor's image for this wheel, lock and the trainer's requirements (the spec's
    compute.requirements), so that make-template's VMs boot into training installing nothing.

    `connect(project)` opens Compute Engine. Nothing is built when the family already has an image.
    Raises SpecError for a bad request, ImageError or ComputeError when a step fails.
    """
    from survivor.cloud.compute import location_problems, spec_project
    from survivor.cloud.template import MachineOptions
    from survivor.spec import JobSpec, SpecError

    problems = location_problems(request.zone, None, regional=False)
    if problems:
        raise SpecError(problems)
    spec = JobSpec.from_file(request.config)
    options = MachineOptions.from_spec(spec, survivor_wheel=request.survivor_wheel)
    project = spec_project(request.project, spec)
    local = local_install(options.survivor_wheel, options.requirements)
    base = base_family(options)
    family = family_name(install_for(spec.job_dir, local), tensorflow_version(local.lock), base)
    compute = connect(project)
    if compute.image_from_family(project, family) is not None:
        return ImageOutcome(None, family)
    if not options.external_ip:  # whether the builder reaches the index, before it is made
        from survivor.operator import preflight

        for finding in preflight.package_route(compute, options.network, region_of_zone(request.zone)):
            progress(str(finding))
    install = stage_install(spec.job_dir, local)
    name = make_image(
        compute,
        install,
        family,
        zone=request.zone,
        progress=progress,
        deadline=request.deadline,
        poll=request.poll_seconds,
        keep_builder=request.keep_builder,
        machine_type=request.machine_type,
        disk_gb=request.disk_gb,
        service_account=options.service_account,
        base=base,
        external_ip=options.external_ip,
        network=options.network,
    )
    return ImageOutcome(name, family)


def base_family(options) -> str:
    """The Deep Learning VM family survivor's image is built on: the job's own (compute.image_family)
    when it is one of Google's, else the default (BUILDER_IMAGE_FAMILY)."""
    if options.image_project == DLVM_PROJECT and options.image_family:
        return options.image_family
    return BUILDER_IMAGE_FAMILY
