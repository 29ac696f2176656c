"""Type confusion: every field of every request body and every query and path parameter, given
every JSON type and edge value, gets a 4xx naming it, and never a 5xx.

For each known body (every operation of the OpenAPI document that takes one must have one here)
each field in turn is replaced by each value of ``VALUES``, written as raw JSON text so that
``NaN``, numbers beyond float64 and lone surrogates reach the server as a client could send them.
A field is every key of every object and the first item of every list (the other items are the
same field). A reply must be:

* a 4xx in the error envelope whose details name the field: the field itself, one inside it, or
  the list holding it (``fit.logits[0]`` for ``fit.logits[0][1]``), and for a batch item its
  index too; or a 404 when the value is a well-formed reference to nothing (a model, a contract);
* or a 2xx, only where the value is valid for the field (``ACCEPTED``): a rejected valid value
  fails the test as surely as an accepted invalid one.

Query parameters (every one the document lists) and path parameters get the same values as text;
a query parameter may also be accepted (200, a filter matching nothing), else the 4xx names it.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient

from service.gate.requests import DEFAULT_GATE_POLICY
from service.web.routes import api_document
from tests.integration.conftest import Auth
from tests.integration.factories import (
    REFERENCE_EVAL_LABELS,
    REFERENCE_EVAL_LOGITS,
    binary_fit_body,
    fit_body,
    registration_body,
)

#: Raw JSON text of each substituted value.
VALUES: dict[str, str] = {
    "object": '{"k": {"n": 1}}',
    "list": '[["a"], {"k": ["a"]}]',
    "null": "null",
    "true": "true",
    "zero": "0",
    "minus_one": "-1",
    "max_float": "1e308",
    "min_float": "-1e308",
    "huge_int": "1" + "0" * 400,
    "subnormal": "1e-320",
    "nan": "NaN",
    "infinity": "Infinity",
    "empty": '""',
    "surrogate": '"\\ud800"',
    "nul": '"a\\u0000b"',
    "newline": '"a\\nb"',
    "long": json.dumps("x" * 10_240),
}
#: The same values in a URL (a lone surrogate as the bytes a careless client would encode).
URL_VALUES: dict[str, str] = {
    **{name: quote(text, safe="") for name, text in VALUES.items()},
    "empty": "",
    "surrogate": "%ED%A0%80",
    "nul": "a%00b",
    "newline": "a%0Ab",
    "long": "x" * 10_240,
}

_TEXT = {"newline"}
_UNIT = {"zero", "subnormal"}
_ANY = r"[\w ]+: "
_LOGIT = r"predictions\[0\]\.logits\[0\]|(fit|eval|evaluation)\.logits\[0\]\[0\]"
_READING = r"register [\w ]+: baseline\.\w+\.\w+\."
#: (pattern of "body: field", values valid there): a 2xx for any other pair is a failure, and so
#: is a 4xx that blames the field for one of these. ``null`` is "absent" where that is allowed.
ACCEPTED: list[tuple[str, set[str]]] = [
    (_ANY + r"(checkpoint|population|outcome|split\.method|reason|classes\[0\])", _TEXT),
    (_ANY + r"(predictions\[0\]\.(id|cohort\.region)|labels\[0\]\.id)", _TEXT),
    (r"(register|fit) binary: classes", {"null"}),
    (r"(register|fit) \w+: (bin_edges|policy|split\.\w+_fingerprint)", {"null"}),
    (r"predictions \w+: (contract_id|predictions\[0\]\.cohort)", {"null"}),
    (r"gate \w+: (policy|evaluation|policy\.max_ece|policy\.max_ece_ci_upper)", {"null"}),
    (_ANY + f"({_LOGIT})", {"zero", "minus_one", "subnormal"}),
    (_ANY + r"(predictions\[0\]\.score|(fit|eval|evaluation)\.scores\[0\])", _UNIT),
    (_ANY + r"(labels\[0\]\.label|(fit|eval|evaluation)\.labels\[0\])", {"zero"}),
    (_ANY + r"calibrator\.intercept", {"zero", "minus_one", "subnormal"}),
    (_ANY + r"policy\.(max_ece|max_ece_increase|max_ece_ci_upper)", _UNIT),
    (_ANY + r"policy\.(min_labeled|min_eval_samples|min_bin_samples)", {"zero"}),
    (_ANY + r"policy\.require_\w+", {"true"}),
    (_READING + r"(ece|accuracy|mean_confidence|nll|brier|mce|mce_supported)", _UNIT),
    (_READING + r"(prevalence|mean_score|threshold)", _UNIT),
    (_READING + r"(ece_debiased|calibration_p_value|classwise_ece|auc)", {"null", *_UNIT}),
    (_READING + r"(expected_cost)", {"null", *_UNIT}),
    (_READING + r"(mce|mce_n|mce_supported|mce_supported_n)", {"null"}),
    (_READING + r"(ece_ci|bins\[0\]\.ci)\[0\]", _UNIT),
    (_READING + r"bins\[0\]\.(mean_confidence|accuracy)", _UNIT),
    (r"register [\w ]+: baseline\.\w+\.nll_difference\.(mean|sd)", _UNIT),
    (r"register [\w ]+: baseline\.\w+\.nll_difference\.mean", {"minus_one"}),
    (
        r"register [\w ]+: baseline\.\w+\.nll_difference\.lower_bound",
        {"null", "minus_one", *_UNIT},
    ),
]


def accepted(body: str, path: str, value: str) -> bool:
    where = f"{body}: {path}"
    return any(re.fullmatch(pattern, where) and value in ok for pattern, ok in ACCEPTED)


def names_field(detail: dict[str, Any], path: str) -> bool:
    """Whether an error detail names the field at ``path`` (module docstring)."""
    named = detail.get("field", "")
    if not path:
        return True
    if named == path or named.startswith((f"{path}.", f"{path}[")):
        return True
    field = re.sub(r"(\[\d+\])+$", "", path)
    return path.startswith(named) and path[len(named)] in ".[" and named.startswith(field)


def batch_item(path: str) -> int | None:
    match = re.match(r"(?:predictions|labels)\[(\d+)\]", path)
    return int(match.group(1)) if match else None


_PLACEHOLDER = "__fuzz_value__"


def fields(value: Any, path: str = "") -> Iterator[str]:
    """The body's fields: every key, the first item of every list, and the body itself."""
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from fields(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and value:
        yield from fields(value[0], f"{path}[0]")


def substitute(body: Any, path: str, raw: str) -> str | None:
    """The body as JSON text with the field at ``path`` replaced by the raw JSON ``raw``; None
    when the field already holds that value (no substitution to test)."""
    if not path:
        return raw
    copy = json.loads(json.dumps(body))
    parent, key = _locate(copy, path)
    try:
        if _same(parent[key], json.loads(raw)):
            return None
    except ValueError:
        pass
    parent[key] = _PLACEHOLDER
    return json.dumps(copy).replace(json.dumps(_PLACEHOLDER), raw)


def _same(a: Any, b: Any) -> bool:
    numbers = (int, float)
    same_kind = type(a) is type(b) or (type(a) in numbers and type(b) in numbers)
    return same_kind and a == b


def _locate(body: Any, path: str) -> tuple[Any, Any]:
    steps: list[Any] = [
        int(index) if index else name for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path)
    ]
    node = body
    for step in steps[:-1]:
        node = node[step]
    return node, steps[-1]


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class World:
    """What the bodies refer to: a multiclass and a binary contract, fresh ids on demand."""

    client: FlaskClient
    auth: Auth
    multiclass: dict[str, Any]
    binary: dict[str, Any]
    counter: Iterator[int]

    def fresh(self) -> str:
        return f"fuzz-{next(self.counter)}"

    def post(self, url: str, raw: str) -> Any:
        headers = {**self.auth.headers(), "Content-Type": "application/json"}
        return self.client.post(url, data=raw, headers=headers)


@pytest.fixture
def world(client: FlaskClient, auth: Auth) -> World:
    made = []
    for body in (fit_body("glyphs"), binary_fit_body("churn")):
        response = client.post("/v1/contracts/fit", json=body, headers=auth.headers())
        assert response.status_code == 201, response.get_json()
        made.append(response.get_json())
    return World(client, auth, made[0], made[1], itertools.count())


def _prediction_batch(w: World, binary: bool) -> tuple[str, dict[str, Any]]:
    contract = w.binary if binary else w.multiclass
    item: dict[str, Any] = {
        "id": w.fresh(),
        "ts": iso(datetime.now(UTC) - timedelta(minutes=1)),
        "cohort": {"region": "emea"},
    }
    item.update({"score": 0.7} if binary else {"logits": [1.0, 2.0, 0.5]})
    body = {"model": contract["model"], "contract_id": contract["id"], "predictions": [item]}
    return "/v1/predictions", body


def _label_batch(w: World) -> tuple[str, dict[str, Any]]:
    label = {"id": w.fresh(), "label": 1, "ts": iso(datetime.now(UTC))}
    return "/v1/labels", {"model": "glyphs", "labels": [label]}


def _gate_request(w: World, binary: bool) -> tuple[str, dict[str, Any]]:
    policy = {"max_ece": 0.2, **DEFAULT_GATE_POLICY, "max_ece_ci_upper": 0.5}
    if binary:
        evaluation: dict[str, Any] = {"scores": [0.2, 0.9, 0.6, 0.4], "labels": [0, 1, 1, 0]}
    else:
        evaluation = {"logits": REFERENCE_EVAL_LOGITS, "labels": REFERENCE_EVAL_LABELS}
    contract = w.binary if binary else w.multiclass
    return "/v1/gate", {"contract_id": contract["id"], "policy": policy, "evaluation": evaluation}


def _retirement(w: World) -> tuple[str, dict[str, Any]]:
    body = registration_body(w.multiclass, model=w.fresh())
    response = w.post("/v1/contracts", json.dumps(body))
    assert response.status_code == 201, response.get_json()
    return f"/v1/contracts/{response.get_json()['id']}/retire", {"reason": "superseded"}


#: Each known body: (OpenAPI path, a maker of (url, body) given the world; fresh per request).
BODIES: dict[str, tuple[str, Callable[[World], tuple[str, dict[str, Any]]]]] = {
    "register multiclass": (
        "/v1/contracts",
        lambda w: ("/v1/contracts", registration_body(w.multiclass, model="fuzz-registered")),
    ),
    "register binary": (
        "/v1/contracts",
        lambda w: ("/v1/contracts", registration_body(w.binary, model="fuzz-registered-binary")),
    ),
    "fit multiclass": ("/v1/contracts/fit", lambda w: ("/v1/contracts/fit", fit_body("fuzz-fit"))),
    "fit binary": (
        "/v1/contracts/fit",
        lambda w: ("/v1/contracts/fit", binary_fit_body("fuzz-fit-binary")),
    ),
    "predictions multiclass": ("/v1/predictions", lambda w: _prediction_batch(w, False)),
    "predictions binary": ("/v1/predictions", lambda w: _prediction_batch(w, True)),
    "labels": ("/v1/labels", _label_batch),
    "gate multiclass": ("/v1/gate", lambda w: _gate_request(w, False)),
    "gate binary": ("/v1/gate", lambda w: _gate_request(w, True)),
    "retire": ("/v1/contracts/{contract_id}/retire", _retirement),
}
#: Fields whose well-formed value may name nothing stored: 404, not 422.
REFERENCES = {"model", "contract_id"}


def fuzzed_fields(name: str, body: dict[str, Any]) -> list[str]:
    """Every field, but a registration's readings other than ``eval.calibrated`` only as a
    whole: the four readings of a baseline are one schema, fuzzed once per task."""
    skip = re.compile(r"baseline\.(fit\.\w+|eval\.uncalibrated)\.")
    return [p for p in fields(body) if not (name.startswith("register") and skip.match(p))]


def body_failures(w: World, name: str) -> list[str]:
    _, make = BODIES[name]
    _, example = make(w)
    failures = []
    for path in fuzzed_fields(name, example):
        for value, raw in VALUES.items():
            url, body = make(w)
            text = substitute(body, path, raw)
            if text is None:
                continue
            problem = judge(w.post(url, text), name, path, value)
            if problem:
                failures.append(f"{name}: {path or '(body)'} = {value}: {problem}")
    return failures


def judge(response: Any, body: str, path: str, value: str) -> str | None:
    """Why the reply to ``value`` at ``path`` is wrong, or None."""
    status, text = response.status_code, response.get_data(as_text=True)[:300]
    if status >= 500:
        return f"{status} {text}"
    if status < 300:
        return None if accepted(body, path, value) else f"accepted ({status})"
    error = response.get_json()["error"]
    assert {"code", "message", "details"} <= set(error)
    details = [d for d in error["details"] if names_field(d, path)]
    if accepted(body, path, value):
        return f"blamed a valid value: {status} {details}" if details else None
    if status == 404 and path in REFERENCES:
        return None
    if not details:
        return f"{status} does not name the field: {error['details']}"
    item = batch_item(path)
    if item is not None and path.count(".") and all(d.get("item") != item for d in details):
        return f"{status} does not give the item index {item}: {details}"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BODIES))
def test_every_body_field_refuses_every_wrong_type(world: World, name: str) -> None:
    failures = body_failures(world, name)
    assert not failures, "\n".join(failures)


def test_every_operation_with_a_body_is_fuzzed() -> None:
    with_bodies = {
        path
        for path, ops in api_document()["paths"].items()
        for op in ops.values()
        if "requestBody" in op
    }
    assert with_bodies == {path for path, _ in BODIES.values()}


def query_parameters() -> list[tuple[str, str, str]]:
    """(OpenAPI path, method, parameter) of every query parameter the document lists."""
    return [
        (path, method, p["name"])
        for path, ops in api_document()["paths"].items()
        for method, op in ops.items()
        for p in op.get("parameters", [])
        if p["in"] == "query"
    ]


def _url(world: World, path: str) -> str:
    return path.replace("{model}", "glyphs").replace("{contract_id}", world.multiclass["id"])


@pytest.mark.parametrize(
    ("path", "method", "param"), query_parameters(), ids=[":".join(q) for q in query_parameters()]
)
def test_every_query_parameter_refuses_every_wrong_type(
    world: World, path: str, method: str, param: str
) -> None:
    failures = []
    for value, text in URL_VALUES.items():
        url = f"{_url(world, path)}?{param}={text}"
        response = world.client.open(url, method=method.upper(), headers=world.auth.headers())
        status = response.status_code
        if status >= 500:
            failures.append(f"{param} = {value}: {status} {response.get_data(as_text=True)[:200]}")
        elif status >= 400:
            details = response.get_json()["error"]["details"]
            if status != 422 or not any(d["field"] == param for d in details):
                failures.append(f"{param} = {value}: {status} does not name it: {details}")
    assert not failures, "\n".join(failures)


PATH_PARAMETERS = [
    (path, method)
    for path, ops in api_document()["paths"].items()
    for method, op in ops.items()
    if any(p["in"] == "path" for p in op.get("parameters", []))
]


@pytest.mark.parametrize(("path", "method"), PATH_PARAMETERS, ids=[p for p, _ in PATH_PARAMETERS])
def test_every_path_parameter_refuses_every_wrong_type(
    world: World, path: str, method: str
) -> None:
    failures = []
    for value, text in URL_VALUES.items():
        segment = quote(text, safe="%") or "%20"
        url = re.sub(r"\{\w+\}", segment, path)
        response = world.client.open(
            url,
            method=method.upper(),
            json={"reason": "x"} if method == "post" else None,
            headers=world.auth.headers(),
        )
        if response.status_code not in (404, 422):
            failures.append(f"{value}: {response.status_code} {response.get_data()[:200]!r}")
    assert not failures, "\n".join(failures)
