"""Renderers: functions that return strings (terminal tables, markdown, JSON). Adapters print."""
