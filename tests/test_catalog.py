"""Prices from Google's Cloud Billing Catalog: the real google-cloud-billing client against
survivor's stand-in, the day's cache, the overrides, and the offline table as the fallback."""

from __future__ import annotations

import datetime as _dt
import os

import pytest

from survivor.cloud import catalog, pricing
from survivor.cloud.catalog import Machine, hourly_prices
from survivor.local.catalog_server import CatalogServer

DAY = _dt.date(2026, 3, 1)


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    """The catalog stand-in, named by SURVIVOR_CATALOG_ENDPOINT; the cache in a temporary dir."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with CatalogServer(page_size=4) as server:
        monkeypatch.setenv(catalog.ENDPOINT_ENV, server.endpoint)
        yield server


def test_the_real_client_pages_through_the_stand_ins_compute_engine_skus(stand_in):
    skus = catalog.fetch_skus()
    assert len(skus) == len(stand_in.skus)
    assert stand_in.requests.count(f"/v1/services/{catalog.COMPUTE_SERVICE.split('/')[1]}/skus") > 1  # paged
    t4 = next(s for s in skus if s.description == "Nvidia Tesla T4 GPU running in Americas")
    assert (t4.resource_group, t4.usage_type, t4.unit, t4.usd) == ("GPU", "OnDemand", "h", 0.35)
    assert "us-central1" in t4.regions


def test_a_machine_is_priced_from_its_vcpu_ram_gpu_and_disk_skus(stand_in):
    prices = hourly_prices(
        Machine("n1-standard-8", "nvidia-tesla-t4", 1, disk_gb=100, disk_type="pd-balanced"), "us-central1", today=DAY
    )
    disk = 0.10 * 100 / 730
    assert prices.on_demand == pytest.approx(8 * 0.031611 + 30 * 0.004237 + 0.35 + disk, abs=1e-6)
    assert prices.spot == pytest.approx(8 * 0.00698 + 30 * 0.000936 + 0.14 + disk, abs=1e-6)
    assert prices.basis == "Cloud Billing Catalog list prices, us-central1, fetched 2026-03-01"
    g2 = hourly_prices(Machine("g2-standard-8", None, 0), "us-central1", today=DAY)  # its L4 is a SKU of its own
    assert g2.on_demand == pytest.approx(8 * 0.02492 + 32 * 0.002919 + 0.5599, abs=1e-6)


def test_the_catalog_is_read_once_a_day_and_cached_with_its_date(stand_in, monkeypatch):
    hourly_prices(Machine("n1-standard-4", None, 0), "us-central1", today=DAY)
    assert os.path.exists(catalog.cache_path(DAY))
    before = len(stand_in.requests)
    again = hourly_prices(Machine("n1-standard-4", None, 0), "us-central1", today=DAY)
    assert len(stand_in.requests) == before  # from the cache
    assert "fetched 2026-03-01" in again.basis
    monkeypatch.setenv(catalog.ENDPOINT_ENV, "http://127.0.0.1:1")  # the catalog is down the next day
    offline = hourly_prices(Machine("n1-standard-4", None, 0), "us-central1", today=DAY + _dt.timedelta(days=1))
    assert "fetched 2026-03-01" in offline.basis  # yesterday's prices beat the table when the catalog is down


def test_without_the_catalog_the_offline_table_is_used_and_said(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with CatalogServer() as server:
        endpoint = server.endpoint
    monkeypatch.setenv(catalog.ENDPOINT_ENV, endpoint)  # nothing listens there any more
    prices = hourly_prices(Machine("n1-standard-8", None, 0), "us-central1", today=DAY)
    assert (prices.on_demand, prices.spot) == pricing.MACHINES["n1-standard-8"]
    assert prices.basis.startswith(pricing.TABLE_BASIS) and "could not be read" in prices.basis


def test_prices_given_on_the_command_line_replace_the_catalogs(stand_in):
    both = hourly_prices(
        Machine("n1-standard-8", None, 0), "us-central1", today=DAY, spot_price=0.1, on_demand_price=0.5
    )
    assert (both.on_demand, both.spot) == (0.5, 0.1) and stand_in.requests == []
    one = hourly_prices(Machine("n1-standard-8", None, 0), "us-central1", today=DAY, spot_price=0.1)
    assert one.spot == 0.1 and one.on_demand == pytest.approx(8 * 0.031611 + 30 * 0.004237)
    assert one.basis.startswith("Spot given on the command line, the rest Cloud Billing Catalog")


def test_a_region_or_gpu_without_a_sku_falls_back_to_the_table(stand_in):
    prices = hourly_prices(Machine("n1-standard-8", None, 0), "europe-west4", today=DAY)
    assert prices.basis.startswith(pricing.TABLE_BASIS) and "no price for n1-standard-8" in prices.basis


def test_the_vm_never_installs_the_catalog_client():
    lock = open(os.path.join(os.path.dirname(catalog.__file__), "..", "startup", "vm-lock.txt")).read()
    assert "google-cloud-billing" not in lock and "matplotlib" not in lock


def test_the_dws_defined_duration_gpu_sku_is_never_taken_for_the_on_demand_price():
    """The catalog lists the flex-start GPU SKU as OnDemand too, and its description
    starts like the standard one's; listed first, it priced on-demand up to 53% low."""
    from survivor.cloud.catalog import Sku, catalog_hourly

    def sku(description, group, usage, unit, usd):
        return Sku(description, "Compute", group, usage, ("us-central1",), unit, usd)

    skus = [
        sku(
            "Nvidia Tesla A100 GPU attached to DWS Defined Duration VMs running in Americas",
            "GPU",
            "OnDemand",
            "h",
            1.38,
        ),
        sku("DWS Defined Duration A2 Core running in Americas", "CPU", "OnDemand", "h", 0.015),
        sku("Nvidia Tesla A100 GPU running in Americas", "GPU", "OnDemand", "h", 2.93),
        sku(
            "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas",
            "GPU",
            "Preemptible",
            "h",
            1.17,
        ),
        sku("A2 Instance Core running in Americas", "CPU", "OnDemand", "h", 0.031611),
        sku("A2 Instance Ram running in Americas", "RAM", "OnDemand", "GiBy.h", 0.004237),
        sku("Spot Preemptible A2 Instance Core running in Americas", "CPU", "Preemptible", "h", 0.0095),
        sku("Spot Preemptible A2 Instance Ram running in Americas", "RAM", "Preemptible", "GiBy.h", 0.0013),
    ]
    on_demand, spot = catalog_hourly(skus, "us-central1", Machine("a2-highgpu-1g", None, 0))
    assert on_demand == pytest.approx(12 * 0.031611 + 85 * 0.004237 + 2.93, abs=1e-6)
    assert spot == pytest.approx(12 * 0.0095 + 85 * 0.0013 + 1.17, abs=1e-6)


def test_flex_start_is_priced_from_the_dws_defined_duration_skus_of_the_catalog(stand_in):
    """docs/flex-start.md F9: the catalog lists flex-start as "DWS Defined Duration" SKUs (usage
    OnDemand); an a2-highgpu-1g's vCPUs, memory and A100 at those prices, not the list ones."""
    prices = hourly_prices(Machine("a2-highgpu-1g", None, 0), "us-central1", today=DAY)
    assert prices.flex_start == pytest.approx(12 * 0.01739 + 85 * 0.00233 + 1.61365, abs=1e-6)
    assert prices.on_demand == pytest.approx(12 * 0.031611 + 85 * 0.004237 + 2.933908, abs=1e-6)
    assert prices.flex_start < prices.on_demand
    assert hourly_prices(Machine("n1-standard-8", "nvidia-tesla-t4", 1), "us-central1", today=DAY).flex_start is None


def test_without_the_catalog_flex_start_comes_from_the_offline_table(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    prices = hourly_prices(Machine("a2-highgpu-1g", None, 0), "us-central1", today=DAY, online=False)
    assert prices.flex_start == pricing.flex_start_hourly("a2-highgpu-1g") == 2.02 and "offline table" in prices.basis
