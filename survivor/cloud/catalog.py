"""Compute Engine prices from Google's Cloud Billing Catalog, Spot beside on-demand, cached by day.

    >>> prices = hourly_prices(Machine("g2-standard-8", None, 0), "us-central1")
    >>> prices.on_demand, prices.spot, prices.basis
    (0.8536, 0.3414, 'Cloud Billing Catalog, us-central1, fetched 2026-03-01')

The Cloud Billing Catalog API lists every public SKU of a service with its list price
(https://cloud.google.com/billing/docs/how-to/get-pricing-information-api; REST reference
https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list). Compute Engine is the
service `services/6F81-5844-456A`; a machine's hourly price is its vCPU SKU times its vCPUs plus its
RAM SKU times its GiB, plus its GPUs' SKU per GPU, plus its disk's SKU (per GiB-month) per hour.
Spot SKUs carry `usageType: Preemptible` ("Spot prices are variable and can change up to once every
day", https://cloud.google.com/spot-vms/pricing), so the SKUs are fetched at most once a day and kept
in the user's cache dir as `prices-<date>.json` (`$XDG_CACHE_HOME/survivor`, else `~/.cache/survivor`).

Where a price comes from, in order: `--spot-price`/`--on-demand-price` given on the command line;
today's cached catalog (or the catalog fetched now, when the caller allows the network); survivor's
offline table (survivor/cloud/pricing.py). `Prices.basis` says which, and every figure shown with it.

The client is google-cloud-billing's `CloudCatalogClient` over REST, with default credentials; with
`SURVIVOR_CATALOG_ENDPOINT=http://127.0.0.1:PORT` it talks to survivor's stand-in
(survivor/local/catalog_server.py) with anonymous credentials. Only operators' commands use this
module; the VM never imports it (google-cloud-billing is in the `operator` extra, not the VM's lock).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from survivor import log as logs
from survivor.cloud import endpoints, hardware, machines, pricing
from survivor.extras import install_command

log = logs.get("catalog")

#: Compute Engine's service in the catalog (`services.list` returns it as displayName "Compute Engine").
COMPUTE_SERVICE = "services/6F81-5844-456A"
ENDPOINT_ENV = endpoints.CATALOG.env
#: Google's month for per-month SKUs (disks): 730 hours.
HOURS_PER_MONTH = 730.0
#: The largest cache file read: the whole Compute Engine SKU list is a few MB.
MAX_CACHE_BYTES = 64 << 20

#: SKUs priced otherwise than by the hour as listed: commitments, sole tenancy, custom types, and the
#: Dynamic Workload Scheduler's, which the catalog lists as OnDemand too ("Nvidia Tesla A100 GPU
#: attached to DWS Defined Duration VMs running in Americas", discounted up to 53%: flex-start),
#: Calendar Mode and reservations: none is the on-demand list price.
NOT_LIST_PRICE = ("Commitment", "Sole Tenancy", "Custom", "DWS", "Calendar Mode", "Reserved")

#: The SKU description of each persistent disk type's capacity.
DISK_NAMES = {
    "pd-standard": "Storage PD Capacity",
    "pd-balanced": "Balanced PD Capacity",
    "pd-ssd": "SSD backed PD Capacity",
}


class CatalogUnavailable(Exception):
    """The catalog could not be read (no credentials, no network, an API error); the table is used."""


@dataclass(frozen=True)
class Machine:
    """What a VM is made of, for pricing: its type, attached GPUs, and boot disk (0 GB: not priced)."""

    machine_type: str
    gpu_type: str | None
    gpu_count: int
    disk_gb: int = 0
    disk_type: str = "pd-balanced"


@dataclass(frozen=True)
class Sku:
    """One catalog SKU, the fields pricing needs: USD per `unit` of the first tier."""

    description: str
    resource_family: str
    resource_group: str
    usage_type: str
    regions: tuple[str, ...]
    unit: str
    usd: float


@dataclass(frozen=True)
class Prices:
    """USD per hour of the whole VM, on-demand and Spot (None when unknown), and where they come from.
    `fallback_on_demand`: the deadline's on-demand machine when `fallback:` gives it another shape
    (None: the same machine, at `on_demand`). `flex_start`: the deadline's fallback machine on
    flex-start (docs/flex-start.md; None when not known)."""

    on_demand: float | None
    spot: float | None
    basis: str
    fallback_on_demand: float | None = None
    flex_start: float | None = None


def shape(machine_type: str) -> tuple[int, float] | None:
    """(vCPUs, memory GB) of an N1 type or of a shape whose record has both (G2, A2 high-GPU: survivor/
    cloud/hardware.py); None for a type this module cannot price."""
    n1 = machines.n1_shape(machine_type)
    if n1:
        return n1
    found = hardware.shape(machine_type)
    if found and found.vcpus is not None and found.memory_gb is not None:
        return found.vcpus, found.memory_gb
    return None


def gpu_sku_name(gpu_type: str | None) -> str | None:
    """The catalog's name for a GPU type, as its SKU descriptions spell it (None when not known)."""
    found = hardware.gpu(gpu_type)
    return found.sku_name if found else None


def sku_from_message(message: Any) -> Sku | None:
    """A `billing_v1.Sku` (or its JSON dict) as a Sku; None without a price."""
    raw = message if isinstance(message, dict) else type(message).to_dict(message)
    category = raw.get("category") or {}
    infos = raw.get("pricing_info") or raw.get("pricingInfo") or []
    if not infos:
        return None
    expression = infos[0].get("pricing_expression") or infos[0].get("pricingExpression") or {}
    tiers = expression.get("tiered_rates") or expression.get("tieredRates") or []
    if not tiers:
        return None
    prices = [t.get("unit_price") or t.get("unitPrice") or {} for t in tiers]
    price = next((p for p in prices if _usd(p) > 0), prices[-1])  # past a free first tier, if any
    return Sku(
        description=raw.get("description", ""),
        resource_family=category.get("resource_family") or category.get("resourceFamily") or "",
        resource_group=category.get("resource_group") or category.get("resourceGroup") or "",
        usage_type=category.get("usage_type") or category.get("usageType") or "",
        regions=tuple(raw.get("service_regions") or raw.get("serviceRegions") or ()),
        unit=expression.get("usage_unit") or expression.get("usageUnit") or "",
        usd=_usd(price),
    )


def _usd(money: dict) -> float:
    """A google.type.Money as a float: units plus nanos."""
    return float(money.get("units") or 0) + float(money.get("nanos") or 0) / 1e9


def client():
    """A CloudCatalogClient over REST: the stand-in named by SURVIVOR_CATALOG_ENDPOINT, or Google's
    with default credentials (the process's one lookup: a report prices two machines with one)."""
    from google.cloud import billing_v1

    scopes = billing_v1.CloudCatalogClient.get_transport_class("rest").AUTH_SCOPES
    return billing_v1.CloudCatalogClient(**endpoints.client_kwargs(endpoints.CATALOG.endpoint(), scopes=scopes))


def fetch_skus(catalog_client=None, timeout: float = 60.0) -> list[Sku]:
    """Every priced Compute Engine SKU in the catalog (the client pages through them). Raises
    CatalogUnavailable with the reason when the catalog cannot be read."""
    try:
        import google.auth.exceptions
        from google.api_core import exceptions as api_exceptions
        from google.cloud import billing_v1  # noqa: F401 (client() imports it: the demo's install has none)
    except ImportError as exc:  # the operator extra is not installed
        raise CatalogUnavailable(
            f"google-cloud-billing is not installed ({exc}); {install_command('operator')}"
        ) from None
    try:
        catalog_client = catalog_client or client()
        pages = catalog_client.list_skus(parent=COMPUTE_SERVICE, timeout=timeout)
        return [sku for sku in (sku_from_message(m) for m in pages) if sku is not None]
    except (api_exceptions.GoogleAPIError, google.auth.exceptions.GoogleAuthError, OSError, ValueError) as exc:
        log.info("the Cloud Billing Catalog could not be read", error=f"{type(exc).__name__}: {str(exc)[:300]}")
        raise CatalogUnavailable(f"the Cloud Billing Catalog could not be read: {catalog_reason(exc)}") from None


def catalog_reason(exc: BaseException) -> str:
    """Pure: why the catalog could not be read, in a few words for a cost line (the log keeps the
    exception's own sentence): no credentials, credentials refused, permission denied, no network,
    else the exception's type."""
    import google.auth.exceptions
    from google.api_core import exceptions as api_exceptions

    if isinstance(exc, google.auth.exceptions.DefaultCredentialsError):
        return "no credentials"
    if isinstance(exc, google.auth.exceptions.GoogleAuthError):
        return "credentials refused"
    if isinstance(
        exc,
        (
            api_exceptions.PermissionDenied,
            api_exceptions.Forbidden,
            api_exceptions.Unauthenticated,
            api_exceptions.Unauthorized,
        ),
    ):
        return "permission denied"
    if isinstance(
        exc, (OSError, api_exceptions.ServiceUnavailable, api_exceptions.RetryError, api_exceptions.DeadlineExceeded)
    ):
        return "no network"
    return type(exc).__name__


def cache_dir() -> str:
    """Where fetched prices are kept: `$XDG_CACHE_HOME/survivor`, else `~/.cache/survivor`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "survivor")


def cache_path(day: _dt.date) -> str:
    """The cache file of one day's prices."""
    return os.path.join(cache_dir(), f"prices-{day.isoformat()}.json")


def write_cache(day: _dt.date, skus: Iterable[Sku]) -> str:
    """Keeps a day's SKUs (written to a temporary name, then renamed: a reader never sees half)."""
    path = cache_path(day)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    body = {"fetched": day.isoformat(), "service": COMPUTE_SERVICE, "skus": [asdict(s) for s in skus]}
    with open(path + ".tmp", "w") as f:
        json.dump(body, f)
    os.replace(path + ".tmp", path)
    return path


def read_cache(day: _dt.date | None = None) -> tuple[_dt.date, list[Sku]] | None:
    """The SKUs cached for `day` (None: the newest day cached); None when there are none readable."""
    try:
        names = sorted(n for n in os.listdir(cache_dir()) if re.fullmatch(r"prices-\d{4}-\d\d-\d\d\.json", n))
    except OSError:
        return None
    if day is not None:
        names = [n for n in names if n == os.path.basename(cache_path(day))]
    for name in reversed(names):
        path = os.path.join(cache_dir(), name)
        try:
            if os.path.getsize(path) > MAX_CACHE_BYTES:
                continue
            with open(path) as f:
                body = json.load(f)
            skus = [Sku(**{**s, "regions": tuple(s["regions"])}) for s in body["skus"]]
            return _dt.date.fromisoformat(body["fetched"]), skus
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring an unreadable price cache", path=path, reason=str(exc))
    return None


def load_skus(today: _dt.date, *, online: bool, catalog_client=None) -> tuple[_dt.date, list[Sku]]:
    """Today's SKUs: from the cache, else (when `online`) from the catalog, cached; else the newest
    cache of an earlier day. Raises CatalogUnavailable when there are none."""
    cached = read_cache(today)
    if cached:
        return cached
    reason = "not asked to read the catalog"
    if online:
        try:
            skus = fetch_skus(catalog_client)
            write_cache(today, skus)
            return today, skus
        except CatalogUnavailable as exc:
            reason = str(exc)
    older = read_cache()
    if older:
        return older
    raise CatalogUnavailable(reason)


def catalog_hourly(skus: list[Sku], region: str, machine: Machine) -> tuple[float, float] | None:
    """Pure: (on-demand, Spot) USD per hour of `machine` in `region` from the SKUs; None when a part of
    it has no SKU there (a type this module cannot shape, a GPU the region does not offer)."""
    fam = machines.family(machine.machine_type).upper()
    size = shape(machine.machine_type)
    gpu_type, gpu_count = machines.gpus_of(machine.machine_type, machine.gpu_type, machine.gpu_count)
    if size is None:
        return None
    out = []
    for usage in ("OnDemand", "Preemptible"):
        here = [
            s
            for s in skus
            if region in s.regions
            and s.usage_type == usage
            and not any(word in s.description for word in NOT_LIST_PRICE)
        ]
        core = _one(
            here, lambda s: s.unit == "h" and re.search(rf"\b{fam} (Predefined )?Instance Core\b", s.description)
        )
        ram = _one(
            here, lambda s: s.unit == "GiBy.h" and re.search(rf"\b{fam} (Predefined )?Instance Ram\b", s.description)
        )
        if core is None or ram is None:
            return None
        total = core.usd * size[0] + ram.usd * size[1]
        if gpu_count:  # built in (a2, g2) or attached, GPUs are SKUs of their own
            name = gpu_sku_name(gpu_type)
            gpu = _one(
                here,
                lambda s, name=name: (
                    s.resource_group == "GPU" and name is not None and s.description.startswith(name + " GPU")
                ),
            )
            if gpu is None:
                return None
            total += gpu.usd * gpu_count
        if machine.disk_gb:
            on_demand = [s for s in skus if region in s.regions and s.usage_type == "OnDemand"]
            disk = _one(on_demand, lambda s: s.description.startswith(DISK_NAMES.get(machine.disk_type, "?")))
            if disk is None:
                return None
            total += disk.usd * machine.disk_gb / HOURS_PER_MONTH  # Spot VMs' disks cost the same
        out.append(round(total, 6))
    return out[0], out[1]


#: How the catalog spells flex-start's SKUs (docs/flex-start.md F9): "DWS Defined Duration A2 Core running
#: in Americas", "Nvidia Tesla A100 GPU attached to DWS Defined Duration VMs running in Americas", listed
#: with usageType OnDemand; they are kept out of the on-demand price.
FLEX_START_SKU = "DWS Defined Duration"


def catalog_flex_start(skus: list[Sku], region: str, machine: Machine) -> float | None:
    """Pure: flex-start USD per hour of `machine` in `region` from the catalog's DWS Defined Duration
    SKUs (vCPUs, memory and GPUs; the disk at its list price); None when a part has none there."""
    fam = machines.family(machine.machine_type).upper()
    size = shape(machine.machine_type)
    gpu_type, gpu_count = machines.gpus_of(machine.machine_type, machine.gpu_type, machine.gpu_count)
    if size is None:
        return None
    here = [s for s in skus if region in s.regions and s.usage_type == "OnDemand"]
    dws = [s for s in here if FLEX_START_SKU in s.description]
    core = _one(
        dws, lambda s: s.unit == "h" and re.search(rf"^{FLEX_START_SKU} {fam} (Instance )?Core\b", s.description)
    )
    ram = _one(
        dws, lambda s: s.unit == "GiBy.h" and re.search(rf"^{FLEX_START_SKU} {fam} (Instance )?Ram\b", s.description)
    )
    if core is None or ram is None:
        return None
    total = core.usd * size[0] + ram.usd * size[1]
    if gpu_count:
        name = gpu_sku_name(gpu_type)
        gpu = _one(
            dws,
            lambda s: (
                s.resource_group == "GPU"
                and name is not None
                and s.description.startswith(f"{name} GPU attached to {FLEX_START_SKU} VMs")
            ),
        )
        if gpu is None:
            return None
        total += gpu.usd * gpu_count
    if machine.disk_gb:
        disk = _one(here, lambda s: s.description.startswith(DISK_NAMES.get(machine.disk_type, "?")))
        if disk is None:
            return None
        total += disk.usd * machine.disk_gb / HOURS_PER_MONTH
    return round(total, 6)


def _one(skus: list[Sku], match) -> Sku | None:
    """The first SKU that matches."""
    return next((s for s in skus if match(s)), None)


def hourly_prices(
    machine: Machine,
    region: str,
    *,
    today: _dt.date | None = None,
    online: bool = True,
    spot_price: float | None = None,
    on_demand_price: float | None = None,
    catalog_client=None,
) -> Prices:
    """USD per hour of `machine` in `region`, on-demand and Spot: the overrides given, else the catalog
    (today's cache, or fetched now when `online`), else survivor's offline table; `basis` says which."""
    today = today or _dt.date.today()
    if spot_price is not None and on_demand_price is not None:
        return Prices(on_demand_price, spot_price, f"Spot and on-demand {pricing.OVERRIDE_BASIS}")
    found: tuple[float, float] | None = None
    flex: float | None = None
    why = ""
    try:
        day, skus = load_skus(today, online=online, catalog_client=catalog_client)
        found = catalog_hourly(skus, region, machine)
        flex = catalog_flex_start(skus, region, machine) if found else None
        basis = f"Cloud Billing Catalog list prices, {region}, fetched {day.isoformat()}"
        if found is None:
            why = f"the catalog has no price for {machine.machine_type} with its GPUs in {region}"
    except CatalogUnavailable as exc:
        why = str(exc)
    if found is None:
        table = pricing.hourly(machine.machine_type, machine.gpu_type, machine.gpu_count)
        found = table
        basis = f"{pricing.table_basis(region)}; {why}"
        flex = pricing.flex_start_hourly(machine.machine_type, machine.gpu_type, machine.gpu_count)
    on_demand = on_demand_price if on_demand_price is not None else (found[0] if found else None)
    spot = spot_price if spot_price is not None else (found[1] if found else None)
    given = [name for name, price in (("Spot", spot_price), ("on-demand", on_demand_price)) if price is not None]
    if given:
        basis = f"{given[0]} {pricing.OVERRIDE_BASIS}, the rest {basis}"
    return Prices(on_demand, spot, basis, flex_start=flex)
