# The README's two commands: `make run` (the demo, end to end) and `make test` (the suite).
# Each installs what it needs into .venv at the repository root on first use.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
NODE_INSTALLED := node_modules/.installed

.PHONY: run test check clean browser containers spark-classes docs test-deps

# The whole suite in parallel processes: most tests wait (on leases, processes, servers) rather than compute, so
# six processes share two cores. The Spark tests, the reliability scenarios, the console's and the container tests
# each run as a group on one process (tests/tiers.py), and the rest on the two left and on each as it finishes its
# group: with four, the last two minutes were tests that wait, four at a time, on a machine half idle.
# --durations keeps the slowest tests in sight.
TEST_PROCESSES ?= 6
PYTEST_PARALLEL := -n $(TEST_PROCESSES) --dist loadgroup --durations=25
# Python writes its byte-code caches (into __pycache__, which git ignores) even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): each of the suite's processes, and the hundreds of worker processes the tests start,
# otherwise compiles every test module, test app and pipeline step again, and pytest rewrites every test module's
# asserts again, which was half of each test process's collection (4.3 s of CPU, 2.1 s with the caches).
PYTEST_ENV := PYTHONDONTWRITEBYTECODE=
# The fast tier: what needs no emulator, test server, Spark or worker process, in two processes.
FAST_TIER := not (azurite or oci or sqs or spark or subprocess or slow or container)
# What the formatter and the linter read; mypy reads what [tool.mypy] in pyproject.toml names (worker/).
LINTED := worker tests functions bench docs examples

$(INSTALLED): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,spark,connect,oci,sqs,otel,browser,docs]'
	touch $@

# Azurite, the Azure Storage emulator the tests run against, pinned in package-lock.json.
$(NODE_INSTALLED): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Chromium and its driver (Debian's packages), which the console's browser tests drive: installed with apt-get when
# missing and this runs as root; otherwise make test stops here, naming the command.
BROWSER_INSTALL := apt-get update && apt-get install -y chromium chromium-driver
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else \
		echo "make test: the console's browser tests need Chromium and its driver; run as root: $(BROWSER_INSTALL)" >&2; \
		exit 1; \
	fi

# podman with runc, mmdebstrap and podman-compose (Debian's packages), which the container tests (tests/container) make
# the base image with, build and run the images with, and run deploy/compose.yaml with: installed with apt-get when
# missing and this runs as root; otherwise make test stops here, naming the command. The tests' own containers.conf is
# tests/container/containers.conf: the machine's is left as it is.
CONTAINER_TOOLS := podman runc mmdebstrap podman-compose
containers:
	@if command -v podman >/dev/null && command -v runc >/dev/null && command -v mmdebstrap >/dev/null \
		&& command -v podman-compose >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CONTAINER_TOOLS); \
	else \
		echo "make test: the container tests need $(CONTAINER_TOOLS); run as root: apt-get update && apt-get install -y $(CONTAINER_TOOLS)" >&2; \
		exit 1; \
	fi

# The archive of Spark's classes every JVM of the suite maps instead of loading them again (tests/spark/jvm.py):
# made once into .venv for the installed pyspark and JDK, in about half a minute; a JVM start then costs about a
# third less CPU.
spark-classes: $(INSTALLED)
	@start=$$(date +%s); $(PY) -m tests.spark.jvm >/dev/null && \
	echo "make test: Spark's class archive ready in $$(( $$(date +%s) - start )) s"

run: $(INSTALLED)
	$(PY) -m functions.demo

test: $(INSTALLED) $(NODE_INSTALLED) browser containers spark-classes
	@start=$$(date +%s); status=0; $(PYTEST_ENV) $(PY) -m pytest $(PYTEST_PARALLEL) || status=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s wall time"; exit $$status

# The formatter's check, the linter and the type checker, then the fast tier. .pre-commit-config.yaml runs the same
# checks before each commit (after `.venv/bin/pre-commit install`); tests/unit/test_check_hooks.py keeps them the same.
check: $(INSTALLED)
	@start=$$(date +%s); status=0; \
	$(PY) -m ruff format --check $(LINTED) && \
	$(PY) -m ruff check $(LINTED) && \
	$(PY) -m mypy && \
	$(PYTEST_ENV) $(PY) -m pytest -n 2 -m "$(FAST_TIER)" --durations=10 -q || status=$$?; \
	echo "make check: $$(( $$(date +%s) - start )) s wall time"; exit $$status

# Declared ranges are tested ranges (not part of make test): the fast tier, the conformance suite on Azurite, OCI
# Queue's test server and moto, and the Spark tests on a local master, in venvs of their own under .venv-deps, once
# with azure-storage-queue, azure-core, botocore, oci, azure-functions, pyspark, structlog and tenacity at the lower
# bounds pyproject.toml declares, once at the newest releases pip finds; a table at the end (tests/dependencies.py).
# TEST_DEPS="--each" also runs each package alone at its lower bound. It needs Azurite there, not installed afresh:
# npm ci runs only when node_modules has none (a node_modules shared by a link stays as it is).
test-deps:
	test -x node_modules/.bin/azurite || $(MAKE) $(NODE_INSTALLED)
	$(PYTHON) -m tests.dependencies $(TEST_DEPS)

# The documentation site, into site/ (open site/index.html), with every warning an error. Its console screenshots come
# from a worker it runs and Chromium (the browser target); DOCS_SCREENSHOTS=0 builds without them. The docs extra alone
# builds it too (pip install -e '.[docs]'; mkdocs build --strict), skipping the screenshots when Chromium is missing.
docs: $(INSTALLED) browser
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --clean --site-dir site

clean:
	rm -rf $(VENV) .venv-deps node_modules .worker .pytest_cache site

# Benchmarks (about forty minutes): worker throughput on Azurite beside a raw-SDK ceiling and a naive loop
# (directly, then at the host's default settings with 10 and 25 ms added to every request as a storage
# account's round trip; at 10 ms 9 rounds, for the CPU per message against the raw loop, on the fast path and the SDK's public calls), idle pick-up on the embedded queue and on OCI Queue's test server, CPU-bound
# handlers on one process and two, lease renewal at scale on the embedded SQLite queue, then the pipeline
# one message per file versus batched, Spark's first job with and without starting it with the host, then the
# web console at 10,000 leases in flight (the first run also sets the worker beside itself with traces and with the
# console open). See the docstrings in bench/.
.PHONY: bench
bench: $(INSTALLED) $(NODE_INSTALLED)
	$(PY) bench/throughput.py --otel --console
	$(PY) bench/throughput.py --default-settings --latency-ms 10 --rounds 9 --naive-rounds 3 --public-path
	$(PY) bench/throughput.py --default-settings --latency-ms 25
	$(PY) bench/pickup.py
	$(PY) bench/pickup.py --oci
	$(PY) bench/processes.py --rounds 5
	$(PY) bench/processes.py --rounds 5 --handler-threads 1
	$(PY) bench/processes.py --rounds 5 --handler-threads 1 --batch-size 1
	$(PY) bench/renewals.py
	$(PY) bench/pipeline.py
	$(PY) bench/spark_start.py
	$(PY) bench/console.py
	$(PY) bench/sqs_throughput.py
