# praxist_fs: `make demo` runs the tour, `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench soak clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/praxist-fs demo --run-dir .demo-run --config fixtures/tasks/example.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Side by side with task-spooler (installed with apt-get when missing): see bench/README.md
bench: $(STAMP)
	$(BIN)/python bench/bench_all.py

# A long seeded soak outside CI: SEED=1 MINUTES=10 make soak (REAL=--real: real processes)
soak: $(STAMP)
	PYTHONPATH=. $(BIN)/python tests/soak.py --seed $${SEED:-1} --minutes $${MINUTES:-10} $${REAL:-}

clean:
	rm -rf $(VENV) .demo-run .pytest_cache bench/results
