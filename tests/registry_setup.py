"""A generated Schema Registry setup (SPEC §8) shared by the decoder tests: a ``_schemas`` topic with
several subjects, evolution, a soft delete, a hard delete, a reference and a JSON Schema, and topics
``orders`` (Avro keys and values, unknown ids, damage), ``customers`` (a reference) and ``events``
(JSON Schema)."""

from __future__ import annotations

import base64
import struct
from decimal import Decimal
from io import BytesIO

import fastavro
import orjson

from kafkafs.format.appendlines import ProducerRecord
from kafkafs.storage.logdir import LogDir

ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme",
           "fields": [{"name": "street", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}
CUSTOMER = {"type": "record", "name": "Customer", "namespace": "com.acme",
            "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "com.acme.Address"},
                       {"name": "other", "type": ["null", "com.acme.Address"], "default": None}]}
ORDER_V1 = {"type": "record", "name": "Order", "namespace": "com.acme", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": "double"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "blob", "type": "bytes"},
    {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
    {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "note", "type": ["null", "string", "long"], "default": None},
]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}
ORDER_KEY = {"type": "record", "name": "OrderKey", "namespace": "com.acme", "fields": [{"name": "id", "type": "long"}]}
LEGACY = {"type": "record", "name": "Legacy", "fields": [{"name": "x", "type": "int"}]}
GONE = {"type": "record", "name": "Gone", "fields": [{"name": "y", "type": "string"}]}
EVENT_SCHEMA = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                "properties": {"kind": {"type": "string"}}}


def _key(subject, version, keytype="SCHEMA"):
    return orjson.dumps({"keytype": keytype, "subject": subject, "version": version, "magic": 1})


def _schema_value(subject, version, schema_id, schema, schema_type=None, references=None, deleted=False):
    v = {"subject": subject, "version": version, "id": schema_id, "schema": orjson.dumps(schema).decode()}
    if schema_type:
        v["schemaType"] = schema_type
    if references:
        v["references"] = references
    v["deleted"] = deleted
    return orjson.dumps(v)


SCHEMAS_TOPIC = [
    (orjson.dumps({"keytype": "NOOP", "magic": 0}), None),
    (orjson.dumps({"keytype": "CONFIG", "subject": None, "magic": 0}), orjson.dumps({"compatibilityLevel": "BACKWARD"})),
    (_key("orders-value", 1), _schema_value("orders-value", 1, 1, ORDER_V1)),
    (_key("orders-value", 2), _schema_value("orders-value", 2, 2, ORDER_V2)),
    (_key("orders-key", 1), _schema_value("orders-key", 1, 3, ORDER_KEY)),
    (_key("address-value", 1), _schema_value("address-value", 1, 4, ADDRESS)),
    (_key("customers-value", 1), _schema_value("customers-value", 1, 5, CUSTOMER, references=[
        {"name": "com.acme.Address", "subject": "address-value", "version": 1}])),
    (_key("legacy-value", 1), _schema_value("legacy-value", 1, 6, LEGACY)),
    (_key("gone-value", 1), _schema_value("gone-value", 1, 7, GONE)),
    (_key("events-value", 1), _schema_value("events-value", 1, 8, EVENT_SCHEMA, schema_type="JSON")),
    # soft delete of legacy-value: the version is marked deleted, its id still resolves
    (_key("legacy-value", 1), _schema_value("legacy-value", 1, 6, LEGACY, deleted=True)),
    (orjson.dumps({"keytype": "DELETE_SUBJECT", "subject": "legacy-value", "magic": 0}),
     orjson.dumps({"subject": "legacy-value", "version": 1})),
    # hard delete of gone-value: soft first, then the tombstone
    (_key("gone-value", 1), _schema_value("gone-value", 1, 7, GONE, deleted=True)),
    (_key("gone-value", 1), None),
]


def _avro(schema, datum) -> bytes:
    out = BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


def _framed(schema_id, payload):
    return b"\x00" + struct.pack(">I", schema_id) + payload


def _order(i, v2=False):
    datum = {"id": i, "amount": i * 1.5, "status": "PAID" if i % 2 else "NEW", "tags": ["a", f"t{i}"],
             "attrs": {"k": i}, "blob": bytes([i, 0, 255]), "digest": b"\x01\x02\x03" + bytes([i]),
             "created": 1763700000000 + i, "price": Decimal(f"{i}.25"),
             "note": [None, "text ü", i * 1000][i % 3]}
    if v2:
        datum["coupon"] = None if i % 2 else "SAVE"
    return datum


def plain(obj):
    """fastavro's datum as SPEC §8 JSON: bytes as {"$base64"}, the rest as it is."""
    if isinstance(obj, (bytes, bytearray)):
        return {"$base64": base64.b64encode(obj).decode()}
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return obj


def _customer_schema():
    named = {}
    fastavro.parse_schema(ADDRESS, named_schemas=named)
    return fastavro.parse_schema(CUSTOMER, named_schemas=named)


def build_registry_logdir(tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    with LogDir(tmp_path, writable=True) as logdir:
        logdir.create_partition("_schemas", 0).append_records(
            [ProducerRecord(1, k, v, ()) for k, v in SCHEMAS_TOPIC])
        orders = []
        for i in range(12):
            v2 = i >= 6
            orders.append(ProducerRecord(
                100 + i, _framed(3, _avro(ORDER_KEY, {"id": i})),
                _framed(2 if v2 else 1, _avro(ORDER_V2 if v2 else ORDER_V1, _order(i, v2))), ()))
        # unknown id, hard-deleted id, soft-deleted id, a truncated datum, bytes left over, not framed, null
        orders.append(ProducerRecord(200, None, _framed(99, b"\x02"), ()))
        orders.append(ProducerRecord(201, None, _framed(7, _avro(GONE, {"y": "z"})), ()))
        orders.append(ProducerRecord(202, None, _framed(6, _avro(LEGACY, {"x": 5})), ()))
        orders.append(ProducerRecord(203, None, _framed(1, _avro(ORDER_V1, _order(1))[:-3]), ()))
        orders.append(ProducerRecord(204, None, _framed(6, _avro(LEGACY, {"x": 5}) + b"\x00"), ()))
        orders.append(ProducerRecord(205, b"plain", b'{"not":"framed"}', ()))
        orders.append(ProducerRecord(206, _framed(3, _avro(ORDER_KEY, {"id": 1})), None, ()))
        logdir.create_partition("orders", 0).append_records(orders)
        logdir.create_partition("customers", 0).append_records([
            ProducerRecord(300, None, _framed(5, _avro(_customer_schema(), {
                "name": "ann", "home": {"street": "s", "zip": 1}, "other": {"street": "o", "zip": None}})), ()),
        ])
        logdir.create_partition("events", 0).append_records([
            ProducerRecord(400, None, _framed(8, b'{ "kind" : "click", "n": 1.50 }'), ()),
            ProducerRecord(401, None, _framed(8, b'"just a string"'), ()),
            ProducerRecord(402, None, _framed(8, b"{not json"), ()),
        ])
    return tmp_path


