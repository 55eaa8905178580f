"""``conf_vars``: set Airflow config options for the duration of a ``with`` block (core's and the Task SDK's)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any


def _configs() -> list[Any]:
    from airflow.configuration import conf

    configs = [conf]
    try:
        from airflow.sdk.configuration import conf as sdk_conf  # Airflow 3: sensors read this one
    except ImportError:
        return configs
    return configs if sdk_conf is conf else [*configs, sdk_conf]


@contextlib.contextmanager
def conf_vars(overrides: Mapping[tuple[str, str], str | None]) -> Iterator[None]:
    saved = []
    for conf in _configs():
        for (section, key), value in overrides.items():
            had = conf.has_option(section, key)
            saved.append((conf, section, key, conf.get(section, key) if had else None, had))
            if value is None:
                if had:
                    conf.remove_option(section, key)
                continue
            if not conf.has_section(section):
                conf.add_section(section)
            conf.set(section, key, value)
    try:
        yield
    finally:
        for conf, section, key, value, had in reversed(saved):
            if had:
                conf.set(section, key, value)
            elif conf.has_option(section, key):
                conf.remove_option(section, key)
