"""BackoffSensor at DAG parse: argument validation, shippability, mapped and unmapped alike."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from airflow_smart_ext.backoff import BackoffPolicy, default_max_wait
from airflow_smart_ext.sensors.base import BackoffSensor
from tests.unit.clock import FakeClock
from tests.unit.sensors.helpers import (
    Deferred,
    PathSensor,
    RenamedFieldSensor,
    ScriptedSensor,
    capture_defer,
    make_context,
)


# ------------------------------------------------------------------ validation (DAG parse)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backoff_factor": 0.5}, "backoff_factor must be a finite number >= 1"),
        ({"backoff_factor": "2"}, "backoff_factor must be a finite number >= 1"),
        (
            {"jitter": "random"},
            "jitter must be one of none, full, equal, decorrelated, or None for the default; got 'random'",
        ),
        ({"poke_interval": 10, "max_wait": 5}, "max_wait (5s) must be >= poke_interval (10s)"),
        ({"splay": -1}, "splay must be >= 0 seconds"),
        ({"splay": "soon"}, "splay must be >= 0 seconds (a number or a datetime.timedelta), or None"),
        ({"poke_interval": -1}, "poke_interval must be >= 0 seconds"),
        ({"deferrable_fallback": "poke"}, "deferrable_fallback must be one of None, 'reschedule'"),
        ({"deferrable": "yes"}, "deferrable must be True or False, or None"),
        ({"jitter": "decorrelated", "backoff_factor": 1}, "factor=1 (fixed interval) cannot be combined"),
        (
            {"jitter": "decorrelated", "poke_interval": 0.01, "timeout": 7 * 86400},
            "jitter='decorrelated' is replayed check by check and supports at most 20,000 checks",
        ),
    ],
)
def test_invalid_parameters_raise_at_construction_naming_the_parameter(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        ScriptedSensor(task_id="s", **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"jitter": "bogus"},
            "jitter must be one of none, full, equal, decorrelated, or None for the default; got 'bogus'",
        ),
        ({"poke_interval": 10, "max_wait": 5}, "max_wait (5s) must be >= poke_interval (10s)"),
        ({"default_args": {"backoff_factor": 0.5}}, "backoff_factor must be a finite number >= 1"),
    ],
)
def test_mapped_sensor_partial_is_checked_at_parse(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        PathSensor.partial(task_id="mapped", **kwargs)
    assert message in str(err.value)


def test_mapped_sensor_with_valid_partial_expands() -> None:
    from airflow import DAG

    with DAG("mapped_dag", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        mapped = PathSensor.partial(task_id="mapped", poke_interval=10, jitter="equal").expand(
            path=["/a", "/b"]
        )
        # None means "the default", as in the constructor
        PathSensor.partial(task_id="defaults", backoff_factor=None, jitter=None, splay=None).expand(
            path=["/c"]
        )
    assert mapped.partial_kwargs["jitter"] == "equal"


def test_negative_poke_interval_is_rejected_by_airflow_itself() -> None:
    with pytest.raises(Exception, match="poke_interval"):
        ScriptedSensor(task_id="s", poke_interval=-1)


def test_defaults_build_the_documented_policy() -> None:
    sensor = ScriptedSensor(task_id="s", poke_interval=30, timeout=600)
    # No max_wait: the default cap is 10 x poke_interval (at most 1 h), not the policy's 1-day fallback.
    assert sensor.backoff_policy == BackoffPolicy(initial=30, factor=2.0, cap=300, jitter="full", splay=30)
    sensor = ScriptedSensor(
        task_id="s2",
        poke_interval=datetime.timedelta(seconds=5),
        max_wait=datetime.timedelta(minutes=1),
        backoff_factor=1.5,
        jitter="equal",
        splay=datetime.timedelta(seconds=2),
    )
    assert sensor.backoff_policy == BackoffPolicy(initial=5, factor=1.5, cap=60, jitter="equal", splay=2)


def test_explicit_exponential_backoff_false_means_a_fixed_interval() -> None:
    sensor = ScriptedSensor(task_id="s", exponential_backoff=False, poke_interval=10)
    assert (sensor.backoff_policy.factor, sensor.backoff_policy.jitter) == (1.0, "none")
    assert sensor.exponential_backoff is False
    # explicit backoff arguments still win
    sensor = ScriptedSensor(task_id="s2", exponential_backoff=False, backoff_factor=3, jitter="equal")
    assert (sensor.backoff_policy.factor, sensor.backoff_policy.jitter) == (3.0, "equal")
    # not passing it keeps the backoff defaults
    assert ScriptedSensor(task_id="s3").backoff_policy.factor == 2.0


def test_exponential_backoff_is_accepted_and_our_policy_governs() -> None:
    sensor = ScriptedSensor(task_id="s", exponential_backoff=True, poke_interval=10)
    assert sensor.exponential_backoff is True  # as given: a subclass reading it sees what the DAG says
    assert sensor.backoff_policy.factor == 2.0  # a growing interval: ours, not Airflow's series


# ------------------------------------------------------------------ shippability (DAG parse)
def test_unshippable_class_fails_at_construction_with_advice() -> None:
    class LocalSensor(BackoffSensor):
        def poke(self, context: Any) -> bool:
            return False

    with pytest.raises(ValueError, match="cannot be imported by name in the triggerer.*deferrable_fallback"):
        LocalSensor(task_id="s", deferrable=True)
    assert LocalSensor(task_id="s2", deferrable=False).deferrable is False


def test_unserializable_argument_fails_at_construction() -> None:
    with pytest.raises(
        ValueError, match="constructor argument 'path'=.* does not travel to the triggerer as JSON unchanged"
    ):
        PathSensor(task_id="s", path={1, 2}, deferrable=True)  # type: ignore[arg-type]


def test_fallback_to_reschedule_mode_when_asked() -> None:
    sensor = PathSensor(task_id="s", path={1, 2}, deferrable=True, deferrable_fallback="reschedule")  # type: ignore[arg-type]
    assert (sensor.deferrable, sensor.mode) == (False, "reschedule")
    assert "does not travel to the triggerer as JSON unchanged" in (sensor.deferrable_fallback_reason or "")


def test_default_deferrable_comes_from_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert PathSensor(task_id="s", path="/p").deferrable is True
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert PathSensor(task_id="s2", path="/p").deferrable is False


# ------------------------------------------------------------------ parse-time truth (issue 14, part 5)
class _LocalSensorFactory:
    @staticmethod
    def make() -> type[BackoffSensor]:
        class LocalSensor(BackoffSensor):  # defined in a function: not importable in the triggerer
            def poke(self, context: Any) -> bool:
                return False

        return LocalSensor


BAD_FOR_BOTH = [
    (
        {"deferrable": "yes"},
        "deferrable must be True or False, or None for [operators] default_deferrable; got 'yes'",
    ),
    ({"deferrable_fallback": "poke"}, "deferrable_fallback must be one of None, 'reschedule'; got 'poke'"),
    ({"transient_errors": ["no.such.Error"]}, "transient_errors: cannot import 'no.such.Error'"),
    ({"check_timeout": -5}, "check_timeout must be > 0 seconds"),
    ({"rate_limit": 0}, "rate_limit must be a number of checks per second > 0"),
    ({"timeout": 60, "splay": 1e308}, "splay (1e+308s) must be <= timeout"),
    ({"backoff_factor": 1e308}, "backoff_factor must be a finite number >= 1 and <= 10"),
    # arguments that would change on the way to the triggerer are refused, not silently altered
    ({"deferrable": True, "min_size": {1: "a"}}, "constructor argument 'min_size'={1: 'a'} does not travel"),
    ({"deferrable": True, "min_size": {1: "a", "b": 2}}, "constructor argument 'min_size'="),
    ({"deferrable": True, "min_size": (1, 2)}, "arrives as [1, 2]"),
    ({"start_from_trigger": "yes"}, "start_from_trigger must be None, True or False; got 'yes'"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_FOR_BOTH)
def test_mapped_and_unmapped_sensors_get_identical_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as unmapped:
        PathSensor(task_id="s", path="/p", **kwargs)
    with pytest.raises(ValueError) as mapped:
        PathSensor.partial(task_id="s", **kwargs)
    assert message in str(unmapped.value)
    assert str(mapped.value) == str(unmapped.value)


def test_mapped_unshippable_class_fails_at_parse_like_unmapped() -> None:
    local = _LocalSensorFactory.make()
    with pytest.raises(ValueError) as unmapped:
        local(task_id="s", deferrable=True)
    with pytest.raises(ValueError) as mapped:
        local.partial(task_id="s", deferrable=True)
    assert "cannot be imported by name in the triggerer" in str(mapped.value)
    assert str(mapped.value) == str(unmapped.value)
    local.partial(task_id="ok", deferrable=True, deferrable_fallback="reschedule")  # the fallback is allowed


@pytest.mark.parametrize(("kwargs", "message"), BAD_FOR_BOTH)
def test_literal_expand_values_get_the_constructors_validation(kwargs: dict, message: str) -> None:
    from airflow import DAG

    name, value = list(kwargs.items())[-1]
    fixed = {key: item for key, item in kwargs.items() if key != name}
    with pytest.raises(ValueError) as unmapped:
        PathSensor(task_id="s", path="/p", **kwargs)
    with DAG("mapped_literal", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        partial = PathSensor.partial(task_id="s", **fixed)
        with pytest.raises(ValueError) as mapped:
            partial.expand(**{name: [None if name != "min_size" else 1, value]})
        partial.expand(path=["/a"])  # Airflow would warn about a partial never expanded
    assert str(mapped.value) == f"Task 's', .expand({name}=...) item 1: {unmapped.value}"
    with DAG("mapped_literal_kwargs", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        partial = PathSensor.partial(task_id="s", **fixed)
        with pytest.raises(ValueError) as mapped_kwargs:
            partial.expand_kwargs([{"path": "/a"}, {"path": "/b", name: value}])
        partial.expand(path=["/a"])
    assert str(mapped_kwargs.value) == f"Task 's', .expand_kwargs(...) item 1: {unmapped.value}"


def test_values_from_an_upstream_xcom_are_checked_when_the_task_runs() -> None:
    from airflow import DAG

    from airflow_smart_ext.compat.locations import task

    with DAG("mapped_json", schedule=None, start_date=datetime.datetime(2026, 1, 1)):

        @task
        def paths() -> list[str]:
            return ["/a", "/b"]

        @task
        def sizes() -> list[Any]:
            return [1, {1: "a"}]

        PathSensor.partial(task_id="mapped", deferrable=True).expand(path=["/a", "/b"])
        PathSensor.partial(task_id="from_xcom", deferrable=True).expand(path=paths())
        # An XCom's values are unknown at parse: the bad one below passes the parse unchecked ...
        sized = PathSensor.partial(task_id="sized", path="/p", deferrable=True).expand(min_size=sizes())
    # ... and is refused when the task runs: Airflow unmaps each item into the sensor with its resolved value,
    # and the constructor checks it exactly as it checks an unmapped sensor's.
    assert sized.unmap({"min_size": 1}).min_size == 1
    with pytest.raises(ValueError) as at_run:
        sized.unmap({"min_size": {1: "a"}})
    with pytest.raises(ValueError) as unmapped:
        PathSensor(task_id="sized", path="/p", deferrable=True, min_size={1: "a"})
    assert "constructor argument 'min_size'={1: 'a'} does not travel" in str(at_run.value)
    assert str(at_run.value) == str(unmapped.value)


def test_default_cap_bounds_detection_latency_after_a_base_class_swap() -> None:
    # Airflow's defaults after swapping the base class: poke_interval=60, no max_wait, 7-day timeout.
    sensor = PathSensor(task_id="s", path="/p", poke_interval=60, timeout=7 * 86400, jitter="none", splay=0)
    policy = sensor.backoff_policy
    assert policy.cap_seconds == 600  # 10 x poke_interval
    day2 = [policy.offset("x", k) for k in range(140, 150)]
    assert all(b - a <= 600 for a, b in zip(day2, day2[1:], strict=False))
    # Large intervals: never below poke_interval, never above an hour unless poke_interval is.
    assert default_max_wait(600) == 3600
    assert default_max_wait(7200) == 7200
    assert default_max_wait(5) == 50
    # An explicit max_wait still wins.
    assert PathSensor(task_id="s2", path="/p", poke_interval=60, max_wait=86400).backoff_policy.cap == 86400


def test_decorrelated_range_is_narrowed_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="supports at most 20,000 checks"):
        PathSensor(task_id="s", path="/p", jitter="decorrelated", poke_interval=1, timeout=86400)
    # The default timeout at Airflow's default poke_interval stays accepted.
    PathSensor(task_id="s2", path="/p", jitter="decorrelated", poke_interval=60, timeout=7 * 86400)


def test_rate_limited_deferrable_sensor_leaves_check_0_to_the_triggerer(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    sensor = PathSensor(task_id="task", path="/p", deferrable=True, rate_limit=1.0, poke_interval=10)
    pokes: list[Any] = []
    monkeypatch.setattr(sensor, "poke", lambda context: pokes.append(context) or True)
    capture_defer(sensor, monkeypatch)
    with pytest.raises(Deferred) as err:
        sensor.execute(make_context())
    assert pokes == []  # no worker check: the triggerer paces it with the connection's other checks
    _, kwargs = err.value.kwargs["trigger"].serialize()
    assert kwargs["after"] == -1 and kwargs["rate_limit"] == 1.0
    event = {"status": "success", "check_index": 0, "xcom_value": None, "message": "ok", "pokes": 1}
    sensor.execute_complete(make_context(), event, **err.value.kwargs["kwargs"])


def test_transient_error_types_must_be_importable_by_the_triggerer() -> None:
    class LocalError(Exception):  # defined in a function, like a class in a DAG file
        pass

    with pytest.raises(ValueError, match="transient_errors: .*LocalError cannot be imported by name"):
        PathSensor(task_id="s", path="/p", deferrable=True, transient_errors=[LocalError])
    with pytest.raises(ValueError, match="transient_errors: .*LocalError cannot be imported by name"):
        PathSensor.partial(task_id="s", deferrable=True, transient_errors=[LocalError])
    PathSensor(task_id="s2", path="/p", transient_errors=[LocalError])  # poke mode: fine, no shipping


def test_a_template_field_not_named_after_its_constructor_argument_cannot_defer() -> None:
    # The triggerer re-creates the sensor from its constructor arguments: 'filepath' would stay unrendered.
    with pytest.raises(ValueError, match=r"template field\(s\) \['filepath'\] are not constructor arguments"):
        RenamedFieldSensor(task_id="s", path="/data/{{ ds }}/done", deferrable=True)
    fallback = RenamedFieldSensor(
        task_id="f", path="/data/{{ ds }}/done", deferrable=True, deferrable_fallback="reschedule"
    )
    assert fallback.mode == "reschedule" and "unrendered" in str(fallback.deferrable_fallback_reason)
    # Nothing to render: nothing is lost.
    assert RenamedFieldSensor(task_id="ok", path="/data/fixed", deferrable=True).deferrable is True
