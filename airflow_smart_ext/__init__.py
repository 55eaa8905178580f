"""airflow-smart-ext: timetables, backoff-aware sensors and a de-duplicating deferrable trigger.

Importing the package is cheap on purpose: the scheduler and dag-processor import the plugin module for
every parse loop, so nothing heavy is imported here.
"""

__version__ = "0.2.0"
