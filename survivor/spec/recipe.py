"""The survival-training recipe's flat camelCase instance attributes (`jobDir`, `trainSteps`, ...):
which set a spec key, which are hyperparameters (every other camelCase key, passed as
`--kebab-case value`), and which belong to Compute Engine and never are.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from survivor.spec.fields import KEYS


#: Instance attributes that belong to Compute Engine, its guest agent or survivor itself: never
#: hyperparameters. Hyphenated keys are never hyperparameters either (the recipe's keys are camelCase).
RESERVED_ATTRIBUTES = frozenset(
    {
        "sshKeys",
        "startup-script",
        "startup-script-url",
        "shutdown-script",
        "shutdown-script-url",
        "created-by",
        "instance-template",
        "enable-guest-attributes",
        "enable-oslogin",
        "ssh-keys",
        "block-project-ssh-keys",
        "install-nvidia-driver",
        "serial-port-enable",
        "user-data",
    }
)


_CAMEL = re.compile(r"^[a-z][A-Za-z0-9]*$")


#: The recipe's camelCase attribute names and the spec keys they set.
FLAT_KEYS = {key.flat: key.name for key in KEYS if key.flat}


#: The recipe's dummy startup script (ml-on-gcp gce/survival-training/gce/startup.sh) reads `hparam1`
#: and `hparam2` and passes them as `--hyperparameter-1` and `--hyperparameter-2`, the flags its
#: `wrapper/train.py` takes: the same names here, so that trainer runs on the same metadata.
RECIPE_HYPERPARAMETERS = {"hparam1": "hyperparameter-1", "hparam2": "hyperparameter-2"}

#: Flat keys of the recipe that survivor reads but cannot honour as they are; each names the fix.
UNSUPPORTED_FLAT_KEYS = {
    "trainerRepo": "a Cloud Source Repositories name, which survivor does not clone: set trainerGitPath to its "
    "git URL (https://source.developers.google.com/p/PROJECT/r/REPO) or to any other repository",
}


def is_hyperparameter_attribute(key: str) -> bool:
    """True for a flat attribute the trainer should receive: camelCase, not reserved, not ours."""
    return (
        key not in RESERVED_ATTRIBUTES
        and key not in FLAT_KEYS
        and key not in UNSUPPORTED_FLAT_KEYS
        and bool(_CAMEL.match(key))
    )


def kebab(name: str) -> str:
    """`batchNormEpsilon` -> `batch-norm-epsilon`; `weight_decay` -> `weight-decay`."""
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", name).replace("_", "-")
    return name.lower()


def flat_attributes_to_mapping(attributes: Mapping[str, str]) -> dict[str, Any]:
    """Turns the recipe's flat attributes into a spec mapping; hyperparameters get kebab-case names."""
    data: dict[str, Any] = {}
    hparams: dict[str, str] = {}
    for key, value in attributes.items():
        if key in FLAT_KEYS:
            data[FLAT_KEYS[key]] = value
        elif key in UNSUPPORTED_FLAT_KEYS:
            if not attributes.get("trainerGitPath"):
                data.setdefault("_unsupported", {})[key] = value
        elif key in RECIPE_HYPERPARAMETERS:
            hparams[RECIPE_HYPERPARAMETERS[key]] = value
        elif is_hyperparameter_attribute(key):
            hparams[key] = value  # its flag is kebab(key); the validator names the attribute itself
    if hparams:
        data["hyperparameters"] = hparams
    return data
