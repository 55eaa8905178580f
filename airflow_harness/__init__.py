"""The real-Airflow harness that tests, benches and scripts share (not shipped in the wheel).

``airflow_harness.env``: ``AirflowEnv``, one real Airflow. Airflow components import modules of this package
by name (``ui_auth``, ``sqlite_connect``) while Airflow itself is initialising, so this file stays free of
imports.
"""
