"""Where a Cloud Storage bucket keeps its data, and which of a job's regions reach it across locations.

A bucket's location is a region, a dual-region (two regions) or a multi-region (a large area such as
the United States) (https://cloud.google.com/storage/docs/locations, "Key concepts"). The google-cloud-
storage client reports it as `bucket.location` (upper case, e.g. `US-WEST1`, `NAM4`, `US`),
`bucket.location_type` (`region`, `dual-region`, `multi-region`) and, for a configurable dual-region,
`bucket.data_locations` (its two regions). What reading costs, by location type (the same page,
"Location considerations", Pricing): a region, no data transfer fee for reads within the same region;
a dual-region, none for reads from either of its regions; a multi-region, data transfer fees always
apply when reading. Since the 2022 change, "Reading data in a Cloud Storage bucket located in a
multi-region from a Google Cloud service located in a region on the same continent will no longer be
free; instead, such moves will be priced the same as general data moves between different locations
on the same continent" (https://cloud.google.com/storage/pricing-announce#network, as quoted in
cockroachdb/cockroach#115009 and lilab-bcb/cumulus#410). So a VM in a region reads a bucket free only
when the bucket is in that region or is a dual-region holding it. docs/bucket-location.md has the
sources and what is assumed (writes, which this module treats as reads are treated).
"""

from __future__ import annotations

#: The predefined dual-regions survivor knows, and the regions each holds. ASIA1 is "Tokyo and Osaka
#: (`ASIA1`)" (https://docs.cloud.google.com/storage/docs/locations.md.txt, "Key concepts"); Tokyo is
#: asia-northeast1 and Osaka asia-northeast2 (Google Cloud's region tables, e.g.
#: https://docs.cloud.google.com/saas-runtime/docs/locations). NAM4 and EUR4: a weak source, the
#: `cloud-storage` crate's docs (https://docs.rs/cloud-storage/0.10.1/cloud_storage/bucket/enum.DualRegion.html:
#: "Nam4: US-CENTRAL1 and US-EAST1", "Eur4: EUROPE-NORTH1 and EUROPE-WEST4"); Google's own table was not
#: found in the stored pages. Any other predefined dual-region is unknown here: preflight says so.
DUAL_REGIONS: dict[str, tuple[str, str]] = {
    "ASIA1": ("asia-northeast1", "asia-northeast2"),
    "EUR4": ("europe-north1", "europe-west4"),
    "NAM4": ("us-central1", "us-east1"),
}

LOCATIONS_DOC = "https://cloud.google.com/storage/docs/locations"
PRICING_DOC = "https://cloud.google.com/storage/pricing"


def held_regions(
    location: str, location_type: str | None, data_locations: tuple[str, ...] | list[str] = ()
) -> frozenset[str] | None:
    """Pure: the regions from which the bucket is read without a data transfer fee (lower case);
    empty for a multi-region (its reads are always charged); None when survivor cannot tell (an
    unknown predefined dual-region, an unknown location type)."""
    kind = (location_type or "").lower()
    if kind == "region":
        return frozenset({location.lower()})
    if kind == "dual-region":
        pair = tuple(data_locations) or DUAL_REGIONS.get(location.upper())
        return frozenset(r.lower() for r in pair) if pair else None
    if kind == "multi-region":
        return frozenset()
    return None


def crossing_regions(
    location: str,
    location_type: str | None,
    regions: tuple[str, ...] | list[str],
    data_locations: tuple[str, ...] | list[str] = (),
) -> tuple[str, ...] | None:
    """Pure: which of the job's `regions` (placement.regions, in order) would read and write the
    bucket across locations, paying data transfer; None when survivor cannot tell."""
    held = held_regions(location, location_type, data_locations)
    if held is None:
        return None
    return tuple(r for r in regions if r.lower() not in held)


def dual_region_for(regions: tuple[str, ...] | list[str]) -> str | None:
    """Pure: the predefined dual-region (of `DUAL_REGIONS`) that holds every one of `regions`."""
    wanted = {r.lower() for r in regions}
    return next((name for name, pair in sorted(DUAL_REGIONS.items()) if wanted <= set(pair)), None)


def crossing_finding(
    bucket: str,
    key: str,
    location: str,
    location_type: str | None,
    regions: tuple[str, ...] | list[str],
    data_locations: tuple[str, ...] | list[str] = (),
) -> tuple[str, str]:
    """Pure: (level, one line) for the bucket of `key` (job_dir, data_dir) against the job's
    placement regions: "ok" when every region reads it within its location, else "warning" naming
    the bucket, its location, the regions that pay data transfer and the fix."""
    where = f"{location.upper()} ({location_type or 'unknown location type'})"
    if data_locations:
        where = f"{location.upper()} (dual-region of {', '.join(r.lower() for r in data_locations)})"
    crossing = crossing_regions(location, location_type, regions, data_locations)
    if crossing is None:
        return (
            "warning",
            f"bucket {bucket} ({key}) is in {where}, whose regions survivor does not know: check "
            f"that it holds {', '.join(regions)} ({LOCATIONS_DOC}), or a job there pays data transfer",
        )
    if not crossing:
        return ("ok", f"bucket {bucket} ({key}) is in {where}, which holds every placement region")
    named = dual_region_for(regions)
    if named:
        fix = f"a bucket in the dual-region {named} (it holds {', '.join(DUAL_REGIONS[named])})"
    elif len(regions) == 1:
        fix = f"a bucket in {regions[0]}"
    elif len(regions) == 2:
        fix = f"a dual-region bucket holding {' and '.join(regions)}, if Cloud Storage pairs them ({LOCATIONS_DOC})"
    else:
        fix = (
            "a dual-region bucket with placement.regions cut to its two regions (no dual-region holds more, "
            "and a multi-region's reads are always charged)"
        )
    if "dual-region" in fix:
        # a dual-region's writes pay replication to its second region and its storage is billed in both
        # (https://cloud.google.com/storage/pricing, docs/bucket-location.md): checkpoints are writes
        fix += (
            " (whose every write, each checkpoint included, pays inter-region replication, and whose storage "
            "costs about twice a region's)"
        )
    why = (
        "reads from a multi-region are charged from every region"
        if (location_type or "").lower() == "multi-region"
        else f"outside {location.upper()}"
    )
    return (
        "warning",
        f"bucket {bucket} ({key}) is in {where}: a job in {', '.join(crossing)} reads and writes it "
        f"across locations ({why}) and pays data transfer per GiB ({PRICING_DOC}); use {fix}, "
        "or accept the data transfer",
    )
