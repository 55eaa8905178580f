"""Timetables (placeholder until the timetables issue lands)."""

TIMETABLE_CLASSES: tuple[type, ...] = ()
