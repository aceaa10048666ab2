# The front door. `just` lists the recipes.

set shell := ["bash", "-eu", "-o", "pipefail", "-c"]

default:
    @just --list

# Install the package with its dev tools (into the active Python environment).
install:
    pip install -e '.[dev]'

# Run the demo on the embedded in-memory engine.
demo *ARGS:
    alkstore-trio demo {{ARGS}}

# Run the default test suite (what CI runs).
test *ARGS:
    pytest {{ARGS}}

# Format check, lint, types, import layers.
check:
    ruff format --check .
    ruff check .
    mypy
    lint-imports

# Apply the formatter and the safe lint fixes.
fmt:
    ruff format .
    ruff check --fix .

# Benchmarks (never part of the default test run).
bench *ARGS:
    pytest tests/benchmarks tests/benchmarks/bench_driver.py -m bench -s -n 0 {{ARGS}}

# The worker's instructions per job under callgrind, against other commits: an A/B that
# load cannot disturb (needs valgrind), e.g. `just instructions 172fa40`.
instructions REFS:
    python tests/benchmarks/probe_worker_instructions.py --ab {{REFS}}

# Build the documentation site into site/ (git-ignored); any warning is an error.
docs:
    NO_MKDOCS_2_WARNING=1 mkdocs build --strict

# The table is written even if a test failed (it says so). `just figures -m slow` runs the
# slow ones; the rows a run leaves out keep their earlier figures.
[doc("Run the tests behind docs/explanation/guarantees.md, then write their figures into it.")]
figures *ARGS:
    status=0; pytest tests/faults tests/security tests/stateful tests/runtime/test_history_worker.py -p no:randomly -n 0 --figures {{ARGS}} || status=$?; python tests/tools/guarantees_figures.py; exit $status

# Retake the dashboard's screenshots in docs/images (a real browser: chromium, chromedriver).
screenshots:
    ALKSTORE_SCREENSHOTS=docs pytest tests/dashboard/test_dashboard_browser.py -n 0 -k every_page

# Long soaks and slow tests.
slow *ARGS:
    pytest -m slow {{ARGS}}
