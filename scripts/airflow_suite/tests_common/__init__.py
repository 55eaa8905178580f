"""A stand-in for the parts of Airflow's ``tests_common`` (its unreleased devel-common package) that its sensor tests
import: written here from what those tests use, not copied."""
