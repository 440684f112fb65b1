"""The client's typed shapes against the OpenAPI document a live daemon
serves: the same keys, and the same ones required. A field added to or
renamed in memd fails here until the client follows."""

from __future__ import annotations

from typing import Any, Dict

import httpx
import pytest

from memd._types import SCHEMAS

from .conftest import Daemon


def _object(schema: Dict[str, Any], schemas: Dict[str, Any]) -> Dict[str, Any]:
    """A schema's properties and required keys, through `allOf`."""
    properties: Dict[str, Any] = dict(schema.get("properties", {}))
    required = set(schema.get("required", []))
    for part in schema.get("allOf", []):
        if "$ref" in part:
            part = schemas[part["$ref"].rsplit("/", 1)[1]]
        inner = _object(part, schemas)
        properties.update(inner["properties"])
        required |= inner["required"]
    return {"properties": properties, "required": required}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_shape_has_the_documents_keys(daemon: Daemon, name: str) -> None:
    document = httpx.get(f"{daemon.url}/api/v1/openapi.json").json()
    schemas = document["components"]["schemas"]
    assert name in schemas, f"the document has no {name}"
    expected = _object(schemas[name], schemas)
    shape = SCHEMAS[name]
    keys = set(shape.__required_keys__) | set(shape.__optional_keys__)
    assert keys == set(expected["properties"]), name
    assert set(shape.__required_keys__) == expected["required"], name
