"""Schema Registry schemas from files (``--schemas DIR``) and from a log directory's ``_schemas`` topic."""

from __future__ import annotations

import pytest

from kafkafs.errors import InvalidName
from kafkafs.storage.schemas import load_registry, registry_from_dir

AVRO = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}'
JSON_SCHEMA = '{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}'


@pytest.mark.allow_warnings("a file that is not JSON is skipped with a warning")
def test_a_directory_of_schemas_by_id(tmp_path):
    (tmp_path / "1.avsc").write_text(AVRO)
    (tmp_path / "2.json").write_text(JSON_SCHEMA)
    (tmp_path / "3.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "x.avsc").write_text(AVRO)
    registry = registry_from_dir(tmp_path)
    assert len(registry) == 2
    with pytest.raises(InvalidName):
        registry_from_dir(tmp_path / "missing")


def test_load_registry_is_none_without_schemas(tmp_path):
    (tmp_path / "orders-0").mkdir()
    assert load_registry(tmp_path) is None
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "7.avsc").write_text(AVRO)
    registry = load_registry(tmp_path, schemas)
    assert registry is not None and len(registry) == 1
