#!/bin/bash
# survivor's VM startup script: runs as root on every boot (Compute Engine's startup-script).
#
# Installs the pinned survivor into /opt/survivor/venv, writes the systemd unit for the agent and
# starts it. Idempotent: a reboot with the same version changes nothing. The long-running agent is a
# systemd service, not this script, so google-startup-scripts.service is not held up.
#
# No metadata value is ever part of a command line string: values are read into variables,
# checked against a strict pattern, and passed as single quoted arguments.
set -euo pipefail

readonly MD="http://metadata.google.internal/computeMetadata/v1/instance/attributes"
# Overridable only so the test suite can run this script in a sandbox.
readonly VENV="${SURVIVOR_VENV:-/opt/survivor/venv}"
readonly UNIT="${SURVIVOR_UNIT_PATH:-/etc/systemd/system/survivor-agent.service}"
readonly WHEELS="${SURVIVOR_WHEELS:-/opt/survivor/wheels}"

log() { echo "survivor-startup: $*"; }

metadata() {
  # An attribute's value, or empty when it is not set.
  curl --silent --fail --max-time 10 --retry 5 --retry-connrefused -H "Metadata-Flavor: Google" "${MD}/$1" || true
}

version="$(metadata survivor-version)"
wheel="$(metadata survivor-wheel)"

if [[ -n "${version}" && ! "${version}" =~ ^[0-9A-Za-z.+!-]+$ ]]; then
  log "refusing survivor-version: not a version string"
  exit 1
fi
if [[ -n "${wheel}" && ! "${wheel}" =~ ^(gs|https)://[A-Za-z0-9._~/%+=-]+\.whl$ ]]; then
  log "refusing survivor-wheel: expected a gs:// or https:// URL of a .whl"
  exit 1
fi

if ! id survivor >/dev/null 2>&1; then
  useradd --system --create-home --home-dir /home/survivor --shell /usr/sbin/nologin survivor
  log "created user survivor"
fi

if [[ ! -x "${VENV}/bin/python" ]]; then
  python3 -m venv "${VENV}"
fi

# The gpu extra brings TensorFlow's CUDA libraries (tensorflow[and-cuda]).
want="survivor[gpu]"
if [[ -n "${wheel}" ]]; then
  if [[ "${wheel}" == gs://* ]]; then
    mkdir -p "${WHEELS}"
    gcloud storage cp "${wheel}" "${WHEELS}/"
    want="${WHEELS}/$(basename "${wheel}")[gpu]"
  else
    want="${wheel}[gpu]"
  fi
elif [[ -n "${version}" ]]; then
  want="survivor[gpu]==${version}"
fi

installed="$("${VENV}/bin/python" -c 'import survivor; print(survivor.__version__)' 2>/dev/null || true)"
if [[ -n "${version}" && -z "${wheel}" && "${installed}" == "${version}" ]]; then
  log "survivor ${installed} already installed"
else
  "${VENV}/bin/pip" install --quiet --upgrade pip
  "${VENV}/bin/pip" install --quiet --upgrade "${want}"
  log "installed ${want}"
fi

cat > "${UNIT}.new" <<'UNIT'
# survivor agent: resumes training on every boot, saves on a preemption notice, finishes once.
# Installed by startup/startup.sh (the same text is embedded there; a test keeps them identical).
[Unit]
Description=survivor agent (resumable training on this VM)
Wants=network-online.target
After=network-online.target google-guest-agent.service
StartLimitIntervalSec=900
StartLimitBurst=5

[Service]
Type=simple
User=survivor
Group=survivor
StateDirectory=survivor
WorkingDirectory=/var/lib/survivor
Environment=PYTHONUNBUFFERED=1
ExecStart=/opt/survivor/venv/bin/survivor agent --workdir /var/lib/survivor --log-format json
Restart=on-failure
RestartSec=15
# SIGTERM to the agent only; it forwards SIGTERM to the trainer and commits the emergency checkpoint.
KillMode=mixed
# Longer than the agent's grace budget (25 s by default); the hard power-off comes first on Spot anyway.
TimeoutStopSec=120

[Install]
WantedBy=multi-user.target
UNIT

if ! cmp --silent "${UNIT}.new" "${UNIT}"; then
  mv "${UNIT}.new" "${UNIT}"
  systemctl daemon-reload
  log "installed ${UNIT}"
else
  rm -f "${UNIT}.new"
fi

systemctl enable survivor-agent.service >/dev/null 2>&1 || true
systemctl start survivor-agent.service
log "survivor-agent started"
