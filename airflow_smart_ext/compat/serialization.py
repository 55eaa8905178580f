"""Airflow's own timetable serializer: ``airflow.serialization.encoders``/``decoders`` on 3.2+,
``airflow.serialization.serialized_objects`` on 2.11, 3.0 and 3.1 (``encoders``/``decoders`` arrived in 3.2).

Imported lazily: the serializers are heavy and only tests and docs call these.
"""

from __future__ import annotations

from typing import Any

from airflow_smart_ext.compat.timetables import Timetable
from airflow_smart_ext.compat.versions import AIRFLOW_V_3_2_PLUS

__all__ = ["decode_timetable", "encode_timetable"]


def encode_timetable(timetable: Timetable) -> dict[str, Any]:
    """Airflow's own timetable serializer (what the dag-processor stores), for tests and docs."""
    if AIRFLOW_V_3_2_PLUS:
        from airflow.serialization.encoders import encode_timetable as _encode
    else:
        from airflow.serialization.serialized_objects import encode_timetable as _encode
    return _encode(timetable)


def decode_timetable(data: dict[str, Any]) -> Timetable:
    """Inverse of :func:`encode_timetable` (needs the timetable's plugin to be registered)."""
    if AIRFLOW_V_3_2_PLUS:
        from airflow.serialization.decoders import decode_timetable as _decode
    else:
        from airflow.serialization.serialized_objects import decode_timetable as _decode
    return _decode(data)
