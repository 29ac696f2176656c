"""The OpenAPI 3.1 description of calmon's HTTP API, served at ``GET /v1/openapi.json``.

The document is generated: paths from the application's routes and the ``Operation`` declared
beside each (``service.web.operations``), reply and query schemas from their pydantic
declarations, request body schemas from the body declarations the operations name, roles from
the permission each route enforces. Every operation lists each status and content type it can
answer with.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from werkzeug.routing import Rule

from service.auth.tokens import GRANTS, Permission
from service.common.declared import Declared
from service.web.operations import ARROW_STREAM, JSON, Operation, operation, operation_of
from service.web.replies import Error
from service.web.route_names import route_template, rule_converters

bp = Blueprint("openapi", __name__, url_prefix="/v1")

REF_TEMPLATE = "#/components/schemas/{model}"

_ERROR_TEXT = {
    400: "malformed body (NaN/Infinity tokens: details name their fields)",
    401: "missing or invalid token",
    403: "role not allowed",
    404: "unknown model, contract or route (also a path segment holding a NUL)",
    409: "conflicts with stored state",
    413: "body over CALMON_MAX_BODY_BYTES",
    415: "neither JSON nor (where accepted) an Arrow IPC stream",
    422: "invalid fields or parameters; details name each item and field",
    503: "database unavailable (Retry-After)",
}

#: An Arrow IPC stream body: columns named as the JSON items' fields.
_ARROW_BODY = {
    "type": "string",
    "contentMediaType": ARROW_STREAM,
    "description": "an Arrow IPC stream: id, ts, logits (fixed-size list) or score, and one"
    " column per cohort key; labels: id, label, ts. The batch's model (and contract_id) go in"
    " the query string.",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF_TEMPLATE.format(model=name)}


def _errors(*codes: int) -> dict[str, Any]:
    return {
        str(c): {"description": _ERROR_TEXT[c], "content": {JSON: {"schema": _ref("Error")}}}
        for c in codes
    }


def _roles(permission: Permission | None) -> list[str]:
    if permission is None:
        return []
    return sorted(str(role) for role, granted in GRANTS.items() if permission in granted)


def _query_parameters(query: type[BaseModel] | None) -> list[dict[str, Any]]:
    if query is None:
        return []
    schema = query.model_json_schema(ref_template=REF_TEMPLATE)
    required = set(schema.get("required", ()))
    out = []
    for name, declared in schema["properties"].items():
        parameter = {k: v for k, v in declared.items() if k not in ("title", "description")}
        parameter.pop("default", None)
        entry: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": parameter,
        }
        if "description" in declared:
            entry["description"] = declared["description"]
        out.append(entry)
    return out


def _operation(
    op: Operation, path_schemas: dict[str, dict[str, Any]], permission: Permission | None
) -> dict:
    success: dict[str, Any] = {}
    if op.reply is not None:
        success[JSON] = {"schema": _ref(op.reply.__name__)}
    success.update({media: {"schema": schema} for media, schema in op.media.items()})
    responses: dict[str, Any] = {
        str(op.status): {"description": op.reply_description, "content": success}
    }
    if op.links:
        responses[str(op.status)]["links"] = dict(op.links)
    roles = _roles(permission)
    out: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary}
    if roles:
        out["description"] = f"Roles: {', '.join(roles)}."
        out["x-roles"] = roles
        responses.update(_errors(401, 403))
    else:
        out["security"] = []
    responses.update(_errors(*op.errors))
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": schema}
        for name, schema in path_schemas.items()
    ] + _query_parameters(op.query)
    if parameters:
        out["parameters"] = parameters
        if op.query is not None:
            responses.update(_errors(422))
        if path_schemas:
            responses.update(_errors(404))
    if op.body is not None:
        content = {JSON: {"schema": _ref(op.body.name)}}
        if ARROW_STREAM in op.body_media:
            content[ARROW_STREAM] = {"schema": _ARROW_BODY}
        out["requestBody"] = {"required": True, "content": content}
        responses.update(_errors(400, 413, 415, 422))
    out["responses"] = dict(sorted(responses.items()))
    return out


def _path_schemas(app: Flask, rule: Rule) -> dict[str, dict[str, Any]]:
    """The schema of each of the rule's variables, in path order: a string, with the pattern
    of a converter that narrows a path segment (the default converter takes any segment)."""
    schemas: dict[str, dict[str, Any]] = {}
    for name, converter in rule_converters(rule).items():
        schemas[name] = {"type": "string"}
        if converter != "default":
            schemas[name]["pattern"] = f"^{app.url_map.converters[converter].regex}$"
    return schemas


def _documented_routes(
    app: Flask,
) -> list[tuple[str, str, Operation, Any, dict[str, dict[str, Any]]]]:
    found = []
    for rule in app.url_map.iter_rules():
        view = app.view_functions.get(rule.endpoint)
        op = None if view is None else operation_of(view)
        if op is None:
            continue
        template = (route_template(rule) or rule.rule).replace("<", "{").replace(">", "}")
        schemas = _path_schemas(app, rule)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            found.append((template, method.lower(), op, view, schemas))
    return found


def _schemas(replies: set[type[BaseModel]], bodies: dict[str, Declared[Any]]) -> dict[str, Any]:
    declared = sorted(replies, key=lambda model: model.__name__)
    _, top = models_json_schema(
        [(model, "serialization") for model in declared], ref_template=REF_TEMPLATE
    )
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    schemas.update({name: body.schema() for name, body in bodies.items()})
    return dict(sorted(schemas.items()))


def document(app: Flask) -> dict[str, Any]:
    """The whole OpenAPI document of ``app``'s declared routes."""
    paths: dict[str, dict[str, Any]] = {}
    replies: set[type[BaseModel]] = {Error}
    bodies: dict[str, Declared[Any]] = {}
    routes = sorted(_documented_routes(app), key=lambda r: (r[0], r[1]))
    for template, method, op, view, schemas in routes:
        permission = getattr(view, "required_permission", None)
        paths.setdefault(template, {})[method] = _operation(op, schemas, permission)
        if op.reply is not None:
            replies.add(op.reply)
        if op.body is not None:
            bodies[op.body.name] = op.body
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "calmon",
            "version": "1",
            "description": "Calibration monitoring: contracts, streams, readings, gate.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": _schemas(replies, bodies),
        },
        "paths": paths,
    }


@bp.get("/openapi.json")
@operation(
    operation_id="openapi",
    media={JSON: {"type": "object"}},
    reply_description="OpenAPI 3.1",
)
def openapi() -> Response:
    """This document.

    The OpenAPI description of this API (built once per application), served without a token:
    it describes the API and holds no data.
    """
    app = current_app
    if "calmon.openapi" not in app.extensions:
        app.extensions["calmon.openapi"] = document(app)
    return jsonify(app.extensions["calmon.openapi"])
