"""Names the dead-code check (vulture, run by ``scripts/dev.py test``) must not report.

Each is used by something vulture cannot see: Airflow (entry points, operator/trigger/timetable hooks it
calls by name), subclass registration, or introspection that tests read. Anything else it reports is dead:
delete it rather than adding it here.
"""

# ruff: noqa: B018, F821
# Airflow entry points and hooks called by name
SmartExtPlugin  # plugin entry point
timetables  # AirflowPlugin.timetables
deadline_references  # AirflowPlugin.deadline_references (3.3+)
# BaseDeadlineReference hooks (deadlines.py): Airflow's scheduler calls them by name
required_kwargs
_.deserialize_reference
_.serialize_reference
_._evaluate_with
get_provider_info  # provider entry point
_.execute  # BaseOperator.execute
template_ext  # BaseOperator templating
ui_color  # BaseOperator UI
_.cleanup  # BaseTrigger.cleanup
_.on_kill  # BaseTrigger.on_kill
_.start_trigger_args  # read by Airflow's scheduler (start_from_trigger: the zero-worker path)
_.description  # Timetable.description
_.deserialize  # Timetable.deserialize
_.summary  # Timetable.summary
_.infer_manual_data_interval  # Timetable.infer_manual_data_interval
_.iter_runs  # timetable helper for users (docs/timetables.md)
_._connection  # read by common-sql's DbApiHook.connection
# check types register themselves by subclassing (conditions/spec.py)
SensorCheck
SqlCheck
# public API read by users and tests
leaks  # triggers/registries.py: the soak benchmark and tests/unit/triggers/test_trigger_registries.py
_.holidays_in
calendar_from_dict
reason  # errors.ErrorClass.reason
_.subscriber_count  # SharingRegistry introspection (tests, O(1) gauge)
difference  # calendars.difference(a, b): public API (docs/timetables.md), the named form of a - b
_.evaluate  # RetryPolicy.evaluate: called by Airflow's task runner (retries.py, the compat.retry_policies stand-in)
dag_policy  # policy.dag_policy: called by Airflow through the airflow.policy entry point (pluggy hook)
# Airflow >= 3.2 partition hooks (timetables/local_day.py): called by the scheduler, backfill and manual triggers
_.next_dagrun_info_v2
_.iter_partition_dagrun_infos
_._decode_partition_date
# BaseEventTrigger shared-stream hooks (Airflow >= 3.3): called by the triggerer (triggers/condition_watcher.py)
_.shared_stream_key
_.open_shared_stream
_.filter_shared_stream
# AirflowPlugin attributes read by Airflow's plugins manager (plugin.py: ui_parts)
_.fastapi_apps
_.external_views
_.flask_blueprints
_.appbuilder_menu_items
bad_query  # ui/web_fastapi.py: registered with @app.exception_handler
# Attributes of Airflow's DbApiHook / LoggingMixin our SQL check sets (conditions/sql.py fetch_first_row)
_.log_sql
_._log
# Read by Airflow's DAG serializer by name (sensors/base.py get_serialized_fields: timetables.due.SERIALIZED_KEY)
_.smart_ext_due
