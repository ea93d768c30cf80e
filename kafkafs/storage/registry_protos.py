"""The ``.proto`` files a Confluent Schema Registry resolves by itself: a registered schema may import
them with no ``references`` (the registry's ``ProtobufSchema`` keeps them built in), so protoc needs them
on its include path to compile such a schema (SPEC §8).

These are kafkafs's own minimal definitions, written from the types' documented packages, message
names, field names, numbers and types (what a value's bytes and its JSON conversion depend on): the
Confluent ``confluent/meta.proto`` options (data-contract tags, ``(confluent.field_meta)``),
``confluent/type/decimal.proto`` and ``variant.proto``, and the Google common types
``google/type/*.proto``. The well-known types (``google/protobuf/*.proto``) come with protoc itself.
"""

from __future__ import annotations

__all__ = ["BUILTIN_PROTOS"]


def _google_type(body: str, *imports: str) -> str:
    head = 'syntax = "proto3";\n\npackage google.type;\n\n'
    return head + "".join(f'import "{name}";\n' for name in imports) + ("\n" if imports else "") + body


_MONTHS = ("JANUARY", "FEBRUARY", "MARCH", "APRIL", "MAY", "JUNE", "JULY", "AUGUST", "SEPTEMBER", "OCTOBER",
           "NOVEMBER", "DECEMBER")
_DAYS = ("MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY")
_PERIODS = ("DAY", "WEEK", "FORTNIGHT", "MONTH", "QUARTER", "HALF", "YEAR")


def _enum(name: str, zero: str, values: tuple[str, ...]) -> str:
    lines = [f"  {zero} = 0;"] + [f"  {v} = {i};" for i, v in enumerate(values, 1)]
    return f"enum {name} {{\n" + "\n".join(lines) + "\n}\n"


def _message(name: str, *fields: str) -> str:
    return f"message {name} {{\n" + "".join(f"  {f};\n" for f in fields) + "}\n"


_META_OPTIONS = ("FileOptions file_meta", "MessageOptions message_meta", "FieldOptions field_meta",
                 "EnumOptions enum_meta", "EnumValueOptions enum_value_meta")

#: import name -> text, for every file the registry resolves itself besides the well-known types
BUILTIN_PROTOS: dict[str, str] = {
    "confluent/meta.proto": (
        'syntax = "proto3";\n\npackage confluent;\n\nimport "google/protobuf/descriptor.proto";\n\n'
        + _message("Meta", "string doc = 1", "map<string, string> params = 2", "repeated string tags = 3",
                   "repeated Rule rules = 4")
        + _message("Rule", "string name = 1", "string doc = 2", "string expr = 3", "string sql = 4")
        + "".join(f"extend google.protobuf.{opts.split()[0]} {{\n  Meta {opts.split()[1]} = 1088;\n}}\n"
                  for opts in _META_OPTIONS)),
    "confluent/type/decimal.proto": (
        'syntax = "proto3";\n\npackage confluent.type;\n\n'
        + _message("Decimal", "bytes value = 1", "uint32 precision = 2", "int32 scale = 3")),
    "confluent/type/variant.proto": (
        'syntax = "proto3";\n\npackage confluent.type;\n\n' + _message("Variant", "bytes metadata = 1", "bytes value = 2")),
    "google/type/calendar_period.proto": _google_type(_enum("CalendarPeriod", "CALENDAR_PERIOD_UNSPECIFIED", _PERIODS)),
    "google/type/color.proto": _google_type(
        _message("Color", "float red = 1", "float green = 2", "float blue = 3", "google.protobuf.FloatValue alpha = 4"),
        "google/protobuf/wrappers.proto"),
    "google/type/date.proto": _google_type(_message("Date", "int32 year = 1", "int32 month = 2", "int32 day = 3")),
    "google/type/datetime.proto": _google_type(
        "message DateTime {\n  int32 year = 1;\n  int32 month = 2;\n  int32 day = 3;\n  int32 hours = 4;\n"
        "  int32 minutes = 5;\n  int32 seconds = 6;\n  int32 nanos = 7;\n  oneof time_offset {\n"
        "    google.protobuf.Duration utc_offset = 8;\n    TimeZone time_zone = 9;\n  }\n}\n"
        + _message("TimeZone", "string id = 1", "string version = 2"),
        "google/protobuf/duration.proto"),
    "google/type/dayofweek.proto": _google_type(_enum("DayOfWeek", "DAY_OF_WEEK_UNSPECIFIED", _DAYS)),
    "google/type/decimal.proto": _google_type(_message("Decimal", "string value = 1")),
    "google/type/expr.proto": _google_type(
        _message("Expr", "string expression = 1", "string title = 2", "string description = 3", "string location = 4")),
    "google/type/fraction.proto": _google_type(_message("Fraction", "int64 numerator = 1", "int64 denominator = 2")),
    "google/type/interval.proto": _google_type(
        _message("Interval", "google.protobuf.Timestamp start_time = 1", "google.protobuf.Timestamp end_time = 2"),
        "google/protobuf/timestamp.proto"),
    "google/type/latlng.proto": _google_type(_message("LatLng", "double latitude = 1", "double longitude = 2")),
    "google/type/money.proto": _google_type(
        _message("Money", "string currency_code = 1", "int64 units = 2", "int32 nanos = 3")),
    "google/type/month.proto": _google_type(_enum("Month", "MONTH_UNSPECIFIED", _MONTHS)),
    "google/type/phone_number.proto": _google_type(
        "message PhoneNumber {\n  message ShortCode {\n    string region_code = 1;\n    string number = 2;\n  }\n"
        "  oneof kind {\n    string e164_number = 1;\n    ShortCode short_code = 2;\n  }\n  string extension = 3;\n}\n"),
    "google/type/postal_address.proto": _google_type(_message(
        "PostalAddress", "int32 revision = 1", "string region_code = 2", "string language_code = 3",
        "string postal_code = 4", "string sorting_code = 5", "string administrative_area = 6", "string locality = 7",
        "string sublocality = 8", "repeated string address_lines = 9", "repeated string recipients = 10",
        "string organization = 11")),
    "google/type/quaternion.proto": _google_type(
        _message("Quaternion", "double x = 1", "double y = 2", "double z = 3", "double w = 4")),
    "google/type/timeofday.proto": _google_type(
        _message("TimeOfDay", "int32 hours = 1", "int32 minutes = 2", "int32 seconds = 3", "int32 nanos = 4")),
}
