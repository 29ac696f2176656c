"""RFC 3339 leap seconds are accepted wherever a timestamp is (as the microsecond before)."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.integration.conftest import Auth
from tests.integration.factories import fit_body
from tests.integration.test_stream import ok, post

LEAP = "2016-12-31T23:59:60Z"


def test_a_leap_second_is_a_timestamp_in_bodies_and_queries(
    client: FlaskClient, auth: Auth
) -> None:
    body = fit_body("glyphs", data_window={"start": "2016-06-30T23:59:60Z", "end": LEAP})
    contract = ok(post(client, auth, "/v1/contracts/fit", body, role="admin"))
    assert contract["data_window"]["end"].startswith("2016-12-31T23:59:59.999999")
    predictions = [
        {"id": "leap", "ts": LEAP, "logits": [2.0, 0.0, 0.0]},
        {"id": "leap-fraction", "ts": "2016-12-31T23:59:60.25Z", "logits": [2.0, 0.0, 0.0]},
    ]
    for items in (predictions, [{**predictions[0], "id": "slow", "cohort": None}]):
        accepted = ok(
            post(client, auth, "/v1/predictions", {"model": "glyphs", "predictions": items})
        )
        assert accepted["accepted"] == len(items)
    labels = [{"id": "leap", "label": "a", "ts": LEAP}]
    assert (
        ok(post(client, auth, "/v1/labels", {"model": "glyphs", "labels": labels}))["joined"] == 1
    )
    # The labels are years late and alone in their buckets: consistent=true folds them first.
    window = "start=2016-12-31T23:55:00Z&end=2016-12-31T23:59:60Z&consistent=true"
    got = ok(client.get(f"/v1/models/glyphs/calibration?{window}", headers=auth.headers()))
    assert got["window"]["end"].startswith("2017-01-01T00:00:00")
    assert (got["n_predictions"], got["n_labeled"]) == (3, 1)
    events = client.get(f"/v1/audit/events?since={LEAP}", headers=auth.headers())
    assert events.status_code == 200, events.get_json()


def test_a_label_counts_in_its_prediction_s_bucket_at_the_last_microsecond(
    client: FlaskClient, auth: Auth
) -> None:
    """A prediction in the last millisecond of a bucket keeps its label in that bucket."""
    ok(post(client, auth, "/v1/contracts/fit", fit_body("glyphs"), role="admin"))
    items = [{"id": "p", "ts": "2016-12-31T23:59:59.9996Z", "logits": [2.0, 0.0, 0.0]}]
    ok(post(client, auth, "/v1/predictions", {"model": "glyphs", "predictions": items}))
    labels = [{"id": "p", "label": 0, "ts": "2017-01-01T00:00:01Z"}]
    ok(post(client, auth, "/v1/labels", {"model": "glyphs", "labels": labels}))
    window = "start=2016-12-31T23:55:00Z&end=2017-01-01T00:00:00Z&consistent=true"
    got = ok(client.get(f"/v1/models/glyphs/calibration?{window}", headers=auth.headers()))
    assert (got["n_predictions"], got["n_labeled"]) == (1, 1)
