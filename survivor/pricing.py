"""What a job's compute time cost, Spot beside on-demand.

The prices are list prices in us-central1 (USD per hour) at the time of writing: an estimate for
`survivor status`, not a bill. Spot prices move; `--spot-price`/`--on-demand-price` override them.
"""

from __future__ import annotations

from dataclasses import dataclass

#: (on-demand, spot) USD/hour per vCPU-hour-equivalent machine type.
MACHINES = {
    "n1-standard-4": (0.19, 0.04),
    "n1-standard-8": (0.38, 0.08),
    "n1-standard-16": (0.76, 0.16),
    "n1-standard-32": (1.52, 0.32),
    "n1-highmem-8": (0.47, 0.10),
    "g2-standard-4": (0.71, 0.28),
    "g2-standard-8": (0.85, 0.34),
    "a2-highgpu-1g": (3.67, 1.47),
}
#: (on-demand, spot) USD/hour per GPU.
GPUS = {
    "nvidia-tesla-t4": (0.35, 0.14),
    "nvidia-tesla-v100": (2.48, 0.99),
    "nvidia-tesla-p100": (1.46, 0.58),
    "nvidia-l4": (0.0, 0.0),  # included in the g2 machine price
    "nvidia-tesla-a100": (0.0, 0.0),  # included in the a2 machine price
}


@dataclass(frozen=True)
class Cost:
    hours: float
    spot_usd: float | None
    on_demand_usd: float | None
    spot_rate: float | None = None
    on_demand_rate: float | None = None

    @property
    def saving(self) -> float | None:
        """The share of the on-demand price that Spot saves."""
        if not self.spot_rate or not self.on_demand_rate:
            return None
        return round(1 - self.spot_rate / self.on_demand_rate, 3)


def hourly(machine_type: str, gpu_type: str | None, gpu_count: int) -> tuple[float, float] | None:
    """(on-demand, spot) USD per hour for a machine and its GPUs; None if not in the table."""
    machine = MACHINES.get(machine_type)
    gpu = GPUS.get(gpu_type or "", (0.0, 0.0)) if gpu_count else (0.0, 0.0)
    if machine is None or (gpu_count and gpu_type not in GPUS):
        return None
    return machine[0] + gpu[0] * gpu_count, machine[1] + gpu[1] * gpu_count


def estimate(hours: float, machine_type: str, gpu_type: str | None, gpu_count: int) -> Cost:
    """The cost of `hours` of the machine, Spot and on-demand."""
    rates = hourly(machine_type, gpu_type, gpu_count)
    if rates is None:
        return Cost(hours, None, None)
    return Cost(hours, round(hours * rates[1], 4), round(hours * rates[0], 4), rates[1], rates[0])
