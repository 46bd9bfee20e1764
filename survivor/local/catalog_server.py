"""A stand-in for the Cloud Billing Catalog API that google-cloud-billing's REST client talks to.

    >>> with CatalogServer() as catalog:                 # then SURVIVOR_CATALOG_ENDPOINT=catalog.endpoint
    ...     client = CloudCatalogClient(transport="rest", credentials=AnonymousCredentials(),
    ...                                 client_options={"api_endpoint": catalog.endpoint})
    ...     skus = list(client.list_skus(parent="services/6F81-5844-456A"))

It serves the two requests the client makes: `GET /v1/services` and `GET /v1/services/{id}/skus`
(the REST paths of google-cloud-billing's `_BaseCloudCatalogRestTransport`), in pages of `page_size`
SKUs with a `nextPageToken`, so the client's paging is exercised. Its SKUs are a small set in the
shape of Google's SKU resource (https://cloud.google.com/billing/docs/reference/rest/v1/services.skus):
description, category {serviceDisplayName, resourceFamily, resourceGroup, usageType: OnDemand |
Preemptible}, serviceRegions, pricingInfo[].pricingExpression {usageUnit, tieredRates[].unitPrice
{currencyCode, units, nanos}}; the figures are near the list prices of us-central1 in 2025-2026,
for tests, not a price list. A committed-use and a sole-tenancy SKU are there because the real list
has them beside the on-demand ones. A GPU's SKUs are spelled with its record's catalog name
(survivor/cloud/hardware.py `Gpu.sku_name`), as survivor's catalog.py looks for them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from survivor.cloud import hardware
from survivor.local.http import LocalService, QuietHandler, send_json

SERVICE_ID = "6F81-5844-456A"
REGIONS = ["us-central1", "us-west1", "us-east1"]


def gpu_rows(gpu_type: str, on_demand: float, spot: float) -> list[tuple]:
    """A GPU's on-demand and Spot SKUs (rows of `ROWS`), named as the catalog names its type."""
    name = hardware.GPUS[gpu_type].sku_name
    return [
        (f"{name} GPU running in Americas", "Compute", "GPU", "OnDemand", "h", on_demand),
        (
            f"{name} GPU attached to Spot Preemptible VMs running in Americas",
            "Compute",
            "GPU",
            "Preemptible",
            "h",
            spot,
        ),
    ]


#: (description, resource family, resource group, usage type, usage unit, USD per unit).
ROWS = [
    ("N1 Predefined Instance Core running in Americas", "Compute", "N1Standard", "OnDemand", "h", 0.031611),
    ("N1 Predefined Instance Ram running in Americas", "Compute", "N1Standard", "OnDemand", "GiBy.h", 0.004237),
    (
        "Spot Preemptible N1 Predefined Instance Core running in Americas",
        "Compute",
        "N1Standard",
        "Preemptible",
        "h",
        0.00698,
    ),
    (
        "Spot Preemptible N1 Predefined Instance Ram running in Americas",
        "Compute",
        "N1Standard",
        "Preemptible",
        "GiBy.h",
        0.000936,
    ),
    ("Commitment v1: N1 Predefined Instance Core in Americas for 1 Year", "Compute", "CPU", "Commit1Yr", "h", 0.019915),
    ("Sole Tenancy Instance Core running in Americas", "Compute", "CPU", "OnDemand", "h", 0.034773),
    ("G2 Instance Core running in Americas", "Compute", "CPU", "OnDemand", "h", 0.02492),
    ("G2 Instance Ram running in Americas", "Compute", "RAM", "OnDemand", "GiBy.h", 0.002919),
    ("Spot Preemptible G2 Instance Core running in Americas", "Compute", "CPU", "Preemptible", "h", 0.009968),
    ("Spot Preemptible G2 Instance Ram running in Americas", "Compute", "RAM", "Preemptible", "GiBy.h", 0.001168),
    ("A2 Instance Core running in Americas", "Compute", "CPU", "OnDemand", "h", 0.031611),
    ("A2 Instance Ram running in Americas", "Compute", "RAM", "OnDemand", "GiBy.h", 0.004237),
    ("Spot Preemptible A2 Instance Core running in Americas", "Compute", "CPU", "Preemptible", "h", 0.012644),
    ("Spot Preemptible A2 Instance Ram running in Americas", "Compute", "RAM", "Preemptible", "GiBy.h", 0.001695),
    # each GPU's SKUs from its record (survivor/cloud/hardware.py `Gpu.catalog_prices`)
    *(row for g in hardware.GPUS.values() if g.catalog_prices for row in gpu_rows(g.name, *g.catalog_prices)),
    # flex-start (docs/flex-start.md F9): listed as OnDemand; a2-highgpu-1g at $2.02/h as recorded 2026-08-02
    ("DWS Defined Duration A2 Core running in Americas", "Compute", "CPU", "OnDemand", "h", 0.01739),
    ("DWS Defined Duration A2 Ram running in Americas", "Compute", "RAM", "OnDemand", "GiBy.h", 0.00233),
    (
        f"{hardware.GPUS['nvidia-tesla-a100'].sku_name} GPU attached to DWS Defined Duration VMs running in Americas",
        "Compute",
        "GPU",
        "OnDemand",
        "h",
        1.61365,
    ),
    ("Storage PD Capacity", "Storage", "PDStandard", "OnDemand", "GiBy.mo", 0.04),
    ("Balanced PD Capacity", "Storage", "SSD", "OnDemand", "GiBy.mo", 0.10),
    ("SSD backed PD Capacity", "Storage", "SSD", "OnDemand", "GiBy.mo", 0.17),
]


def sku(index: int, description: str, family: str, group: str, usage: str, unit: str, usd: float) -> dict[str, Any]:
    """One SKU resource as the API returns it in JSON (int64 `units` as a string, as proto3 JSON does)."""
    sku_id = f"{0xA000 + index:04X}-{0xB000 + index:04X}-{0xC000 + index:04X}"
    units, nanos = int(usd), round((usd - int(usd)) * 1e9)
    return {
        "name": f"services/{SERVICE_ID}/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": family,
            "resourceGroup": group,
            "usageType": usage,
        },
        "serviceRegions": REGIONS,
        "serviceProviderName": "Google",
        "pricingInfo": [
            {
                "summary": "",
                "effectiveTime": "2026-03-01T08:00:00Z",
                "currencyConversionRate": 1,
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "baseUnitConversionFactor": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                        }
                    ],
                },
                "aggregationInfo": {"aggregationLevel": "ACCOUNT", "aggregationInterval": "DAILY"},
            }
        ],
        "geoTaxonomy": {"type": "MULTI_REGIONAL", "regions": REGIONS},
    }


class CatalogServer(LocalService):
    """The catalog's `services.list` and `services.skus.list` on 127.0.0.1; `requests` keeps each path."""

    thread_name = "catalog-stand-in"

    def __init__(self, port: int = 0, page_size: int = 7, rows: list[tuple] | None = None):
        self.skus = [sku(i, *row) for i, row in enumerate(rows if rows is not None else ROWS)]
        self.page_size = page_size
        self.requests: list[str] = []
        self._listen(port, self._handler())

    def _handler(self):
        server = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                server.requests.append(url.path)
                if url.path == "/v1/services":
                    send_json(
                        self,
                        200,
                        {
                            "services": [
                                {
                                    "name": f"services/{SERVICE_ID}",
                                    "serviceId": SERVICE_ID,
                                    "displayName": "Compute Engine",
                                    "businessEntityName": "businessEntities/GCP",
                                }
                            ]
                        },
                    )
                elif url.path == f"/v1/services/{SERVICE_ID}/skus":
                    start = int(query.get("pageToken") or 0)
                    size = min(int(query.get("pageSize") or server.page_size), server.page_size)
                    page = server.skus[start : start + size]
                    body: dict[str, Any] = {"skus": page}
                    if start + size < len(server.skus):
                        body["nextPageToken"] = str(start + size)
                    send_json(self, 200, body)
                else:
                    send_json(
                        self, 404, {"error": {"code": 404, "message": f"{url.path} not found", "status": "NOT_FOUND"}}
                    )

        return Handler
