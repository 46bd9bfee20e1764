"""A zone's and a place's region, one spelling for every part (survivor/places.py)."""

import pytest

from survivor.places import is_zone, region_of, region_of_zone


@pytest.mark.parametrize(
    "place, region",
    [
        ("zones/us-west1-b", "us-west1"),
        ("regions/us-west1", "us-west1"),
        ("us-central1-a", "us-central1"),
        ("europe-west4", "europe-west4"),
        ("https://www.googleapis.com/compute/v1/projects/p/zones/asia-east1-c", "asia-east1"),
        ("projects/p/regions/us-east4", "us-east4"),
        ("zones/me-central2-a/", "me-central2"),
    ],
)
def test_the_region_of_a_place(place, region):
    assert region_of(place) == region


def test_a_zone_and_a_region_told_apart():
    assert is_zone("us-west1-b") and not is_zone("us-west1")
    assert region_of_zone("northamerica-northeast1-a") == "northamerica-northeast1"
