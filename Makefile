# One check before a push: what CI runs (.ci/run), with the fast test tier instead of every test.
PY := .venv/bin/python

.PHONY: check lint types docs test test-all setup

setup:
	python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt

check: lint types docs test

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports

types:
	.venv/bin/mypy

docs:
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet

test:
	$(PY) -m pytest -m "not slow" -q

test-all:
	$(PY) -m pytest
