#!/bin/bash
# survivor's VM startup script: runs as root on every boot (Compute Engine's startup-script).
#
# 1. reads what to install from metadata: survivor-wheel and survivor-lock (gs:// URLs that
#    `survivor make-template` uploaded to the job's bucket) with their sha256;
# 2. if /opt/survivor/venv already holds exactly that wheel and lock (a second boot of the same
#    disk, or a custom image from `survivor make-image`), installs nothing; otherwise downloads
#    both through the Cloud Storage JSON API and pip installs them in hash-checking mode (every
#    package pinned with its sha256; a package the lock does not name is refused): never a bare
#    name from the package index;
# 3. writes the survivor-agent systemd unit (the one shipped in the wheel) and starts it. The
#    long-running agent is a unit, not this script, so google-startup-scripts.service is not held up.
#
# A boot that cannot install says why, in three places: this script's output (google-startup-scripts.service
# has StandardOutput=journal+console, so it reaches the journal and the serial console:
# github.com/GoogleCloudPlatform/guest-agent google-startup-scripts.service, google_metadata_script_runner/main.go),
# the guest attributes survivor/state and survivor/install-error, and a record under
# <job dir>/survivor/boots/ when the bucket answers. After 3 such boots in a row the VM leaves its MIG
# (instanceGroupManagers.deleteInstances) instead of idling: the MIG recreates a VM with a fresh disk,
# so the streak is counted in the job dir (and on this disk, for when the bucket is what fails).
#
# With survivor-mode=build (the builder VM of `survivor make-image`), it installs, reports
# survivor/build=done (or failed: REASON) and powers off, so the disk can become an image.
#
# No metadata value is ever part of a command string: each is read into a variable, checked against
# a strict pattern, and passed as one argument, or through a file or stdin.
set -Eeuo pipefail
umask 022

# Overridable only so the test suite can run this script in a sandbox root (and point it at
# stand-ins: GCE_METADATA_HOST as google-auth honours it, STORAGE_EMULATOR_HOST as
# google-cloud-storage does, SURVIVOR_COMPUTE_ENDPOINT as survivor/cloud/compute.py does).
readonly ROOT="${SURVIVOR_ROOT:-}"
readonly OPT="${ROOT}/opt/survivor"
readonly VENV="${OPT}/venv"
readonly INSTALLED="${OPT}/installed"       # "wheel=SHA lock=SHA requirements=SHA|none": what VENV holds
readonly DOWNLOADS="${OPT}/downloads"
readonly DISK_STREAK="${OPT}/failed-boots"  # install failures in a row on this disk
readonly UNIT="${ROOT}/etc/systemd/system/survivor-agent.service"
readonly MAX_FAILED_BOOTS=3

readonly GS_URL='^gs://([a-z0-9][a-z0-9._-]{1,61}[a-z0-9])/([A-Za-z0-9._~/+=-]+)$'
readonly SHA256='^[0-9a-f]{64}$'
readonly WHEEL_FILE='^survivor_train-[0-9A-Za-z.+!]+-py3-none-any\.whl$'

log() { echo "survivor-startup: $*"; }

endpoint() {  # $1: a host[:port] or URL from the environment, $2: the default; prints a checked URL
  local value="${1:-$2}"
  [[ "${value}" == http://* || "${value}" == https://* ]] || value="http://${value}"
  if [[ ! "${value}" =~ ^https?://[A-Za-z0-9.-]+(:[0-9]+)?/?$ ]]; then
    log "refusing endpoint ${value}: expected a host[:port]" >&2
    exit 1
  fi
  echo "${value%/}"
}
MD="$(endpoint "${GCE_METADATA_HOST:-}" metadata.google.internal)/computeMetadata/v1"
GCS="$(endpoint "${STORAGE_EMULATOR_HOST:-}" https://storage.googleapis.com)"
COMPUTE="$(endpoint "${SURVIVOR_COMPUTE_ENDPOINT:-}" https://compute.googleapis.com)/compute/v1"
readonly MD GCS COMPUTE
WORK="$(mktemp -d)"
readonly WORK
trap 'rm -rf "${WORK}"' EXIT

# -- the outside world: metadata server, Cloud Storage, Compute Engine --------------------------

metadata() {  # $1: a path under computeMetadata/v1; prints the value, or nothing when it is not set
  curl --silent --fail --max-time 10 --retry 5 --retry-connrefused -H "Metadata-Flavor: Google" "${MD}/$1" || true
}

guest_attribute() {  # $1: key under survivor/, $2: value (best effort: needs enable-guest-attributes)
  printf '%s' "$2" | curl --silent --fail --max-time 10 --retry 3 -X PUT -H "Metadata-Flavor: Google" \
    --data-binary @- "${MD}/instance/guest-attributes/survivor/$1" >/dev/null || true
}

authorize() {  # writes the Authorization header for Google APIs into ${WORK}/auth (not on a command line)
  local token
  token="$(metadata instance/service-accounts/default/token \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])' 2>/dev/null || true)"
  if [[ ! "${token}" =~ ^[A-Za-z0-9._~+/=-]+$ ]]; then
    return 1
  fi
  printf 'Authorization: Bearer %s\n' "${token}" > "${WORK}/auth"
}

quote_object() {  # percent-encodes an object name already checked against GS_URL's character set
  local name="${1//\//%2F}"
  name="${name//+/%2B}"
  echo "${name//=/%3D}"
}

google_api() {  # curl with the VM's token: the Cloud Storage JSON API
  # (https://cloud.google.com/storage/docs/reference-uris) and Compute Engine's
  [[ -f "${WORK}/auth" ]] || authorize || return 1
  curl --silent --show-error --fail --retry 4 --retry-connrefused --connect-timeout 10 -H @"${WORK}/auth" "$@"
}

download() {  # $1: gs://BUCKET/OBJECT (checked), $2: local path
  [[ "$1" =~ ${GS_URL} ]] || return 1
  google_api --max-time 1800 -o "$2" "${GCS}/storage/v1/b/${BASH_REMATCH[1]}/o/$(quote_object "${BASH_REMATCH[2]}")?alt=media"
}

# -- the job dir's boot records: survivor/boots/<time>-<instance>-<outcome>.json ----------------

job_bucket="" job_prefix=""
record() {  # $1: outcome (failed | installed; a builder's built | not-built), $2: reason
  [[ -n "${job_bucket}" ]] || return 1
  local name
  name="$(quote_object "${job_prefix}survivor/boots/$(date -u +%Y%m%dT%H%M%S%N)-${instance}-$1.json")"
  OUTCOME="$1" REASON="$2" INSTANCE="${instance}" WANTED="${wanted:-}" python3 -c '
import datetime, json, os
print(json.dumps({"outcome": os.environ["OUTCOME"], "reason": os.environ["REASON"], "instance": os.environ["INSTANCE"],
                  "install": os.environ["WANTED"], "time": datetime.datetime.now(datetime.timezone.utc).isoformat()}))' \
    | google_api --max-time 30 --retry 1 -X POST -H "Content-Type: application/json" --data-binary @- \
      "${GCS}/upload/storage/v1/b/${job_bucket}/o?uploadType=media&name=${name}" >/dev/null
}

job_streak() {  # prints the install failures in a row recorded in the job dir, newest last; fails when unreachable
  [[ -n "${job_bucket}" ]] || return 1
  google_api --max-time 30 --retry 1 "${GCS}/storage/v1/b/${job_bucket}/o?prefix=$(quote_object "${job_prefix}survivor/boots/")" \
    | python3 -c '
import json, sys
names = sorted(item["name"] for item in json.load(sys.stdin).get("items", []))
streak = 0
for name in reversed(names):
    if not name.endswith("-failed.json"):
        break
    streak += 1
print(streak)'
}

leave_group() {  # deletes this VM through its MIG (created-by), which lowers the target size
  local created_by project zone kind
  created_by="$(metadata instance/attributes/created-by)"
  project="$(metadata project/project-id)"
  zone="$(metadata instance/zone)"
  zone="${zone##*/}"
  if [[ ! "${created_by}" =~ ^projects/[^/]+/(zones|regions)/([a-z0-9-]+)/instanceGroupManagers/([a-z0-9-]+)$ ]]; then
    log "not in a managed instance group (no created-by): powering off instead"
    power_off
    return 0
  fi
  kind="${BASH_REMATCH[1]}"
  local where="${BASH_REMATCH[2]}" group="${BASH_REMATCH[3]}"
  if [[ ! "${project}" =~ ^[a-z][a-z0-9.:-]{2,62}$ || ! "${zone}" =~ ^[a-z0-9-]+$ ]]; then
    log "cannot leave ${group}: project or zone missing from metadata"
    return 1
  fi
  log "leaving managed instance group ${group} after ${MAX_FAILED_BOOTS} boots in a row that could not install"
  # https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/deleteInstances
  # (regionInstanceGroupManagers for a regional MIG); needs the compute scope the template asks for.
  local resource="instanceGroupManagers"
  [[ "${kind}" == regions ]] && resource="regionInstanceGroupManagers"
  printf '{"instances": ["zones/%s/instances/%s"]}' "${zone}" "${instance}" \
    | google_api --max-time 60 -X POST -H "Content-Type: application/json" --data-binary @- \
      "${COMPUTE}/projects/${project}/${kind}/${where}/${resource}/${group}/deleteInstances" >/dev/null
}

systemd_running() {  # as sd_booted(3) decides; never the host's systemd for a sandbox root
  [[ -z "${ROOT}" && -d /run/systemd/system ]]
}

power_off() {
  if systemd_running; then
    systemctl poweroff
  else
    log "no running systemd here (or a sandbox root): not powering off"
  fi
}

# -- failure: reported before anything exits ---------------------------------------------------

fail() {  # $1: why this boot cannot install; reports it everywhere it can, then exits 1
  trap - ERR
  set +e
  ((BASH_SUBSHELL == 0)) || exit 1  # inside $(...): the caller reports it
  local reason="$1"
  log "FAILED: ${reason}"
  if [[ "${mode}" == build ]]; then
    guest_attribute build "failed: ${reason}"
    record not-built "${reason}" || log "could not record the build's outcome in the job dir"
    power_off
    exit 1
  fi
  guest_attribute state install-failed
  guest_attribute install-error "${reason}"
  local disk=0 job=0
  [[ -f "${DISK_STREAK}" ]] && disk="$(cat "${DISK_STREAK}")"
  [[ "${disk}" =~ ^[0-9]+$ ]] || disk=0
  disk=$((disk + 1))
  mkdir -p "${OPT}" && echo "${disk}" > "${DISK_STREAK}"
  if record failed "${reason}"; then
    job="$(job_streak)" || job=0
    [[ "${job}" =~ ^[0-9]+$ ]] || job=0
    log "recorded in ${job_dir}/survivor/boots/ (${job} failed boots in a row)"
  else
    log "could not record this boot in the job dir (${job_dir:-none given})"
  fi
  local streak=$((disk > job ? disk : job))
  if ((streak >= MAX_FAILED_BOOTS)); then
    leave_group || log "could not leave the managed instance group"
  else
    log "${streak} of ${MAX_FAILED_BOOTS} failed boots in a row before this VM leaves its group"
  fi
  exit 1
}

mode="" instance="" job_dir="" wanted=""
trap 'fail "line ${LINENO}: unexpected failure of: ${BASH_COMMAND}"' ERR

# -- what to install ----------------------------------------------------------------------------

mode="$(metadata instance/attributes/survivor-mode)"
instance="$(metadata instance/name)"
wheel="$(metadata instance/attributes/survivor-wheel)"
wheel_sha="$(metadata instance/attributes/survivor-wheel-sha256)"
lock="$(metadata instance/attributes/survivor-lock)"
lock_sha="$(metadata instance/attributes/survivor-lock-sha256)"
requirements="$(metadata instance/attributes/survivor-requirements)"
requirements_sha="$(metadata instance/attributes/survivor-requirements-sha256)"
job_dir="$(metadata instance/attributes/survivor-job-dir)"
[[ -n "${job_dir}" ]] || job_dir="$(metadata instance/attributes/jobDir)"  # the recipe's flat keys

if [[ "${job_dir}" =~ ^gs://([a-z0-9][a-z0-9._-]{1,61}[a-z0-9])(/[A-Za-z0-9._~/+=-]*)?$ ]]; then
  job_bucket="${BASH_REMATCH[1]}"
  job_prefix="${BASH_REMATCH[2]#/}"
  job_prefix="${job_prefix%/}"
  [[ -z "${job_prefix}" ]] || job_prefix="${job_prefix}/"
else
  job_dir=""  # not a bucket (or not a valid one): no boot records
fi
if [[ ! "${instance}" =~ ^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$ ]]; then
  instance="unknown"
  fail "instance/name missing or not an instance name (is the metadata server reachable?)"
fi
[[ "${mode}" == "" || "${mode}" == build ]] || fail "refusing survivor-mode: expected build or nothing"
if [[ -n "${wheel}${lock}" ]]; then
  [[ "${wheel}" =~ ${GS_URL} && "${wheel##*/}" =~ ${WHEEL_FILE} ]] \
    || fail "refusing survivor-wheel: expected gs://BUCKET/.../survivor_train-VERSION-py3-none-any.whl"
  [[ "${wheel_sha}" =~ ${SHA256} ]] || fail "refusing survivor-wheel-sha256: expected 64 hex digits"
  [[ "${lock}" =~ ${GS_URL} && "${lock}" == *.txt ]] || fail "refusing survivor-lock: expected gs://BUCKET/....txt"
  [[ "${lock_sha}" =~ ${SHA256} ]] || fail "refusing survivor-lock-sha256: expected 64 hex digits"
fi
if [[ -n "${requirements}" ]]; then
  [[ "${requirements}" =~ ${GS_URL} && "${requirements}" == *.txt ]] \
    || fail "refusing survivor-requirements: expected gs://BUCKET/....txt"
  [[ "${requirements_sha}" =~ ${SHA256} ]] || fail "refusing survivor-requirements-sha256: expected 64 hex digits"
fi

# -- install ------------------------------------------------------------------------------------

fetch() {  # $1: gs:// URL, $2: sha256, $3: local path; fails naming what went wrong
  download "$1" "$3" || fail "cannot download $1 (is the bucket reachable, and may the VM's service account read it?)"
  local got
  got="$(sha256sum "$3")"
  got="${got%% *}"
  [[ "${got}" == "$2" ]] || fail "$1 has sha256 ${got}, not the ${2} make-template recorded: upload it again"
}

# The venv, with pip. Debian and Ubuntu ship python3 without ensurepip unless python3-venv (or
# pythonX.Y-venv) is installed, and `python3 -m venv` then fails ("ensurepip is not available",
# https://github.com/pypa/packaging.python.org/issues/399): install that package with apt-get
# and try again, saying so; an image without apt-get, or an apt-get that cannot, is one reason.
#
# On a first Ubuntu boot unattended-upgrades often holds the dpkg lock for minutes, and apt-get
# without DPkg::Lock::Timeout exits 100 at once on a held lock (apt(8) waits 120 s by default,
# apt-get not at all: measured on noble in infrahouse/puppet-code#290; "apt(8) now waits for the
# dpkg locks ... for 120s otherwise", apt 1.9.11's news, quoted in r-lib/filelock#24): wait up to
# 10 minutes.
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
}

make_venv() {
  if python3 -m venv "${VENV}" > "${WORK}/venv.log" 2>&1; then
    return 0
  fi
  if grep -q ensurepip "${WORK}/venv.log" && command -v apt-get > /dev/null; then
    local version package
    version="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    package="python${version}-venv"
    log "this image's python3 has no ensurepip (Debian/Ubuntu without ${package}): installing ${package} with apt-get"
    rm -rf "${VENV}"
    if apt_get install -y -q "${package}" > "${WORK}/apt.log" 2>&1 \
        || { apt_get update -q >> "${WORK}/apt.log" 2>&1 \
             && apt_get install -y -q "${package}" >> "${WORK}/apt.log" 2>&1; }; then
      if python3 -m venv "${VENV}" > "${WORK}/venv.log" 2>&1; then
        log "installed ${package}; the venv is made"
        return 0
      fi
    else
      cat "${WORK}/apt.log"
      fail "python3 -m venv needs ${package}, and apt-get could not install it: $(tail -n 1 "${WORK}/apt.log")"
    fi
  fi
  cat "${WORK}/venv.log"
  fail "python3 -m venv ${VENV} failed: $(grep -v '^\s*$' "${WORK}/venv.log" | head -n 1) (is python3-venv installed on the image? survivor's image has it)"
}

install() {
  rm -rf "${DOWNLOADS}"
  mkdir -p "${DOWNLOADS}"
  local wheel_path="${DOWNLOADS}/${wheel##*/}"
  fetch "${wheel}" "${wheel_sha}" "${wheel_path}"
  fetch "${lock}" "${lock_sha}" "${DOWNLOADS}/lock.txt"
  local files=(-r "${DOWNLOADS}/survivor.txt" -r "${DOWNLOADS}/lock.txt")
  if [[ -n "${requirements}" ]]; then
    fetch "${requirements}" "${requirements_sha}" "${DOWNLOADS}/requirements.txt"
    files+=(-r "${DOWNLOADS}/requirements.txt")
  fi
  # the wheel itself, pinned by its sha256 like everything else
  printf 'survivor-train @ file://%s --hash=sha256:%s\n' "${wheel_path}" "${wheel_sha}" > "${DOWNLOADS}/survivor.txt"
  if [[ ! -x "${VENV}/bin/python" ]]; then
    make_venv
  fi
  log "installing $(basename "${wheel_path}") with its lock into ${VENV}"
  # Hash-checking mode, not constraints: each file must match a sha256 of the lock, and a
  # dependency the lock does not name is an error instead of a download by bare name
  # (https://pip.pypa.io/en/stable/topics/secure-installs/). Wheels only: nothing is built on the VM.
  if ! "${VENV}/bin/python" -m pip install --no-input --disable-pip-version-check --progress-bar off \
      --require-hashes --only-binary :all: "${files[@]}" > "${WORK}/pip.log" 2>&1; then
    cat "${WORK}/pip.log"
    local why
    why="$(grep -E '^ERROR:' "${WORK}/pip.log" | tail -n 1 || true)"
    rm -f "${INSTALLED}"
    fail "pip install failed: ${why:-see the log above}"
  fi
  tail -n 1 "${WORK}/pip.log"
  echo "${wanted}" > "${INSTALLED}"
  rm -rf "${DOWNLOADS}"
  log "installed ${wanted}"
}

if [[ -n "${wheel}" ]]; then
  wanted="wheel=${wheel_sha} lock=${lock_sha} requirements=${requirements_sha:-none}"
  if [[ -f "${INSTALLED}" && "$(cat "${INSTALLED}")" == "${wanted}" ]]; then
    log "nothing to install: ${VENV} already holds ${wanted}"
  else
    guest_attribute state installing
    install
  fi
elif [[ -x "${VENV}/bin/survivor" ]]; then
  log "no survivor-wheel in metadata: using the survivor already in ${VENV} ($(cat "${INSTALLED}" 2>/dev/null || echo unknown))"
else
  fail "no survivor-wheel in metadata and no survivor in ${VENV}: make the template with survivor make-template"
fi

if [[ "${mode}" == build ]]; then
  guest_attribute build "done"
  record built "installed ${wanted:-the venv as it was}" || fail "could not record the build's outcome in ${job_dir:-the job dir}"
  log "build done: powering off so the disk can become an image"
  power_off
  exit 0
fi

# -- the agent's unit ---------------------------------------------------------------------------

echo 0 > "${DISK_STREAK}"
if [[ -n "${job_dir}" ]] && streak="$(job_streak 2>/dev/null)" && [[ "${streak}" =~ ^[1-9][0-9]*$ ]]; then
  record installed "installed after ${streak} failed boots" || true  # ends the streak
fi

# -- the trainer's user, to whom the metadata server is closed ----------------------------------

# Any process on a VM may ask the metadata server for the token of the VM's service account, which
# may create and delete instance groups. The trainer is the job author's code: the agent (root, the
# unit has no User=) runs it as survivor-trainer (the unit's --trainer-user), and that user gets no
# answer from the metadata server, as GKE closes it to Pods (metadata concealment "firewalls traffic
# from user Pods to the cluster metadata server",
# https://cloud.google.com/kubernetes-engine/docs/how-to/metadata-concealment); the agent serves it a
# token that only reads its data bucket instead (survivor/agent/trainer_metadata.py).
# The rule matches the owner of the connecting socket: iptables-extensions(8), module "owner",
# "--uid-owner: Matches if the packet socket's file structure (if it has one) is owned by the given
# user", valid in the OUTPUT chain. metadata.google.internal is 169.254.169.254
# (https://cloud.google.com/compute/docs/metadata/querying-metadata), over HTTP (80) and HTTPS (443);
# port 53 of the same address, the VM's DNS resolver, stays open. -C before -I: once per boot, and
# the rules are gone after a reboot, when this script runs again. The agent adds the same rule
# (survivor/agent/metadata_firewall.py) for a job spec's own user.
readonly TRAINER_USER=survivor-trainer
readonly METADATA_IP=169.254.169.254

conceal_metadata() {  # $1: a user name; rejects its TCP connections to the metadata server
  local uid
  uid="$(id -u "$1")" || return 1
  local rule=(OUTPUT -d "${METADATA_IP}/32" -p tcp -m multiport --dports "80,443"
              -m owner --uid-owner "${uid}" -j REJECT --reject-with tcp-reset)
  iptables -w -C "${rule[@]}" 2>/dev/null || iptables -w -I "${rule[@]}"
}

if ! id "${TRAINER_USER}" >/dev/null 2>&1; then
  useradd --system --create-home --home-dir "/home/${TRAINER_USER}" --shell /usr/sbin/nologin "${TRAINER_USER}"
  log "created user ${TRAINER_USER}"
fi
if [[ -n "${ROOT}" ]]; then
  log "a sandbox root: the host's firewall is left as it is"
elif ! command -v iptables >/dev/null; then
  fail "no iptables on this image: the metadata server cannot be closed to ${TRAINER_USER}"
elif ! conceal_metadata "${TRAINER_USER}"; then
  fail "iptables refused the rule that closes the metadata server to ${TRAINER_USER}"
else
  log "the metadata server is closed to ${TRAINER_USER}"
fi

# -- the state disk (a job with state_disk_gb): the group keeps it when it recreates this VM ------

# The template names it by device name (survivor/cloud/template.py STATE_DISK_DEVICE), which
# Compute Engine shows as /dev/disk/by-id/google-<device name>.
readonly STATE_DEVICE="${ROOT}/dev/disk/by-id/google-survivor-state"
# The mount point lies where only root can write (/var/lib): no other user's process can swap it
# for a link between boots, and it is never followed (refused if a link, `chown -h`), and checked to
# be the disk's mount after mounting. The disk is the agent's (root's) alone: the trainer never
# writes there (survivor/jobdir/disk_tier.py copies its files onto it).
readonly STATE_DIR="${ROOT}/var/lib/survivor-state-disk"

mount_state_disk() {  # formats the disk only when blkid finds no filesystem on it; idempotent
  [[ -b "${STATE_DEVICE}" ]] || return 0
  if [[ -L "${STATE_DIR}" ]] || { [[ -e "${STATE_DIR}" ]] && [[ ! -d "${STATE_DIR}" ]]; }; then
    log "${STATE_DIR} is a link or not a directory: not mounting the state disk there"
    return 1
  fi
  mkdir -p "${STATE_DIR}"
  if ! mountpoint --quiet "${STATE_DIR}"; then
    local found=0
    blkid "${STATE_DEVICE}" >/dev/null 2>&1 || found=$?
    if ((found == 2)); then  # blkid(8): exit 2, no filesystem could be identified: a new, blank disk
      log "formatting the new state disk"
      # https://cloud.google.com/compute/docs/disks/format-mount-disk-linux
      mkfs.ext4 -q -m 0 -E lazy_itable_init=0,lazy_journal_init=0,discard "${STATE_DEVICE}" || return 1
    elif ((found != 0)); then
      log "blkid cannot read the state disk (exit ${found}): not formatting it"
      return 1
    fi
    mount -o discard,defaults "${STATE_DEVICE}" "${STATE_DIR}" || return 1
  fi
  # later boots of this boot disk mount it before the agent's unit starts (nofail: never blocks a boot)
  local uuid
  uuid="$(blkid -s UUID -o value "${STATE_DEVICE}")" || return 1
  if [[ "${uuid}" =~ ^[0-9a-fA-F-]+$ ]] && ! grep -q "^UUID=${uuid} /var/lib/survivor-state-disk " "${ROOT}/etc/fstab" 2>/dev/null; then
    if [[ -f "${ROOT}/etc/fstab" ]]; then  # an older line for this disk (another mount point) goes
      sed -i "/^UUID=${uuid} /d" "${ROOT}/etc/fstab"
    fi
    printf 'UUID=%s %s ext4 discard,defaults,nofail 0 2\n' "${uuid}" "/var/lib/survivor-state-disk" >> "${ROOT}/etc/fstab"
  fi
  if [[ -L "${STATE_DIR}" ]] || ! mountpoint --quiet "${STATE_DIR}"; then
    log "${STATE_DIR} is not the state disk's mount after mounting it: not using it"
    return 1
  fi
  # root's, 0755, also on a disk an earlier version gave to the agent's user `survivor`
  chown -h root:root "${STATE_DIR}" && chmod 0755 "${STATE_DIR}" || return 1
  # the agent uses the disk only where this file is: on the disk's own filesystem, so an empty
  # mount point (on the boot disk, which a recreation replaces) never passes for it; a link
  # left in its place is removed, not followed
  rm -f "${STATE_DIR}/.survivor-state-disk" && : > "${STATE_DIR}/.survivor-state-disk" || return 1
  log "state disk mounted at ${STATE_DIR}"
}
if ! mount_state_disk; then  # the agent then commits to Cloud Storage only; training goes on
  log "the state disk could not be mounted: a state too large for the notice is not kept on it"
  guest_attribute state-disk "not mounted"
fi

# The unit shipped in the installed wheel: one copy of its text, survivor/startup/survivor-agent.service.
mkdir -p "$(dirname "${UNIT}")"
"${VENV}/bin/python" -c 'import importlib.resources as r, sys
sys.stdout.write(r.files("survivor").joinpath("startup").joinpath("survivor-agent.service").read_text())' > "${UNIT}.new" \
  || fail "the installed survivor has no startup/survivor-agent.service"
if ! cmp --silent "${UNIT}.new" "${UNIT}"; then
  mv "${UNIT}.new" "${UNIT}"
  log "wrote ${UNIT}"
else
  rm -f "${UNIT}.new"
fi

if ! systemd_running; then
  log "no running systemd here (or a sandbox root): the unit is written, not started"
  exit 0
fi
systemctl daemon-reload
systemctl enable survivor-agent.service >/dev/null 2>&1 || true
systemctl start survivor-agent.service
log "survivor-agent started"
