"""Where things are on Compute Engine: a zone's region, a place's region. The one spelling of a
rule every part uses ("us-west1-b" is a zone of the region "us-west1": a zone's name is its
region's and a letter, https://cloud.google.com/compute/docs/regions-zones).

    >>> region_of_zone("us-west1-b")
    'us-west1'
    >>> region_of("zones/us-west1-b"), region_of("regions/europe-west4"), region_of("us-central1")
    ('us-west1', 'europe-west4', 'us-central1')

Like `spec`, `log` and `retry`, it imports nothing else of survivor.
"""

from __future__ import annotations


def region_of_zone(zone: str) -> str:
    """Pure: the region of a zone's name (`us-west1-b` -> `us-west1`)."""
    return zone.rsplit("-", 1)[0]


def is_zone(name: str) -> bool:
    """Pure: whether a bare location name is a zone's (`us-west1-b`), not a region's (`us-west1`)."""
    return name.count("-") >= 2


def region_of(place: str) -> str:
    """Pure: the region of a place: `zones/Z` (or a URL ending in it) -> Z's region, `regions/R` -> R,
    a bare zone's name -> its region, a bare region's name -> itself."""
    parts = place.rstrip("/").split("/")
    kind, name = (parts[-2], parts[-1]) if len(parts) >= 2 else ("", parts[-1])
    if kind == "zones" or (kind != "regions" and is_zone(name)):
        return region_of_zone(name)
    return name
