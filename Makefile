# Two commands: `make run` (the workbench) and `make test` (the tests).
# Both install libtorch 2.11.0 from PyPI into .venv when it is missing.
# To use an existing libtorch 2.11.0 instead: `make run LIBTORCH=/path/to/libtorch`.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
TORCH_VERSION := 2.11.0
STAMP := $(VENV)/.torch-$(TORCH_VERSION)
# The CUDA runtime's remaining headers (crt/, nv/) beside the wheel's, so that
# build.rs compiles c10d's ProcessGroupNCCL in: header-only packages, matched
# to the wheel's nvidia-cuda-runtime 13.0.
CUDA_HEADERS := $(VENV)/.cuda-headers-13.0

ifdef LIBTORCH
TORCH_DEP :=
CARGO_ENV := LIBTORCH="$(LIBTORCH)"
else
TORCH_DEP := $(STAMP) $(CUDA_HEADERS)
CARGO_ENV = LIBTORCH="$$(ls -d $(CURDIR)/$(VENV)/lib/python3*/site-packages/torch)"
endif

.PHONY: run build system-deps nextest docs test fuzz test-slurm test-html test-export lint bench clean gpu-bundle gpu-rehearse golden parity records

run: build
	./target/release/tricklab tui ablations/demo-ladder.toml

build: $(TORCH_DEP) system-deps
	$(CARGO_ENV) cargo build --release

# gloo's headers for c10d's CPU collectives (scripts/system-deps.sh).
system-deps:
	bash scripts/system-deps.sh

# docs/TRICKS.md from the catalog (make test checks it is current).
docs: $(TORCH_DEP)
	$(CARGO_ENV) cargo run --quiet -- tricks --markdown > docs/TRICKS.md.tmp && mv docs/TRICKS.md.tmp docs/TRICKS.md

# cargo-nextest runs every test in a process of its own (.config/nextest.toml):
# no test shares libtorch's process-wide state with another. The pure tests
# take both cores, two at a time, each libtorch op on one thread (with
# libtorch's default of a thread a core, two tests oversubscribed the cores:
# results/reference/ci.md); the scenarios that drive the real binary on both
# cores run alone, with libtorch's default threads. A test past 10 minutes is
# killed and fails by name. The slowest tests are printed at the end, from
# the run's JUnit file (target/nextest/default/junit.xml).
# pyarrow and tensorboard read the results back (tests/it/interop.rs).
test: $(TORCH_DEP) $(VENV)/.py-readers system-deps nextest
	cargo fmt --check
	status=0; \
	OMP_NUM_THREADS=1 TRICKLAB_PYTHON=$(CURDIR)/$(VENV)/bin/python3 TRICKLAB_REQUIRE_PY_TOOLS=1 \
	    $(CARGO_ENV) cargo nextest run --no-fail-fast --lib --bins --test it || status=1; \
	$(PYTHON) scripts/test-times.py target/nextest/default/junit.xml 15; \
	bash scripts/system-deps.sh turbojpeg; \
	if [ -f /usr/include/turbojpeg.h ] && [ -f /usr/include/jpeglib.h ]; then \
	    OMP_NUM_THREADS=1 $(CARGO_ENV) cargo nextest run --profile turbojpeg --no-fail-fast --features turbojpeg --lib -E 'test(/^data::stream::/)' || status=1; \
	else echo "make test: no turbojpeg.h or jpeglib.h, so the turbojpeg feature's tests did not run: sudo apt-get install libturbojpeg0-dev libjpeg62-turbo-dev" >&2; status=1; fi; \
	exit $$status

# make test's runner: on this project's machine image at /usr/local/bin, and
# built from crates.io where it is missing (a few minutes, once).
nextest:
	@command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest

# With LIBTORCH given there is no torch venv to install them into: a bare one.
$(VENV)/.py-readers: $(TORCH_DEP)
	[ -x $(VENV)/bin/pip ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check pyarrow tensorboard
	touch $@

# Mutation fuzzing of the matrix parser and the results reader (tests/it/fuzz.rs),
# 20,000 mutations an input instead of make test's 300.
fuzz: $(TORCH_DEP)
	TRICKLAB_FUZZ_ITERS=20000 $(CARGO_ENV) cargo test --release --test it fuzz -- --test-threads=1

# polars and DuckDB reading a results folder, and MLflow and W&B exports through
# their own libraries (installed into .venv: ~60 packages, so not part of `make test`).
test-export: build
	$(VENV)/bin/pip install --quiet --disable-pip-version-check mlflow-skinny wandb polars duckdb
	bash scripts/test-export.sh ./target/release/tricklab $(VENV)/bin/python3

# A real Slurm (Debian's packages, installed if missing; needs root): a tiny
# matrix as a 4-task array, merged, every run once; runs over ranks srun
# starts; then two more nodes in network namespaces for a two-node run. ~90 s.
# The binary comes from the test build (same features as make test's, so a
# fresh clone does not compile polars a second time for a plain `cargo build`).
test-slurm: $(TORCH_DEP) system-deps
	$(CARGO_ENV) cargo test --no-run --test it
	bash scripts/test-slurm.sh target/debug/tricklab

# report.html in headless Chromium (Debian's package, installed if missing; needs
# root): the DOM the browser builds has a head row in every table, no divider
# row read as data, emphasis rendered and the charts inline. ~1 min once installed.
test-html: $(TORCH_DEP) system-deps
	$(CARGO_ENV) cargo test --no-run --test it
	bash scripts/test-html.sh target/debug/tricklab

# CI runs it after make test (.ci/run): clippy's pedantic too_many_lines
# included (Cargo.toml's [lints], its limit in clippy.toml).
lint: $(TORCH_DEP) system-deps
	cargo fmt --check
	$(CARGO_ENV) cargo clippy --all-targets -- -D warnings

bench: $(TORCH_DEP) $(VENV)/.torchvision system-deps
	bash scripts/system-deps.sh bench
	$(CARGO_ENV) cargo bench --benches

# The GPU path (docs/gpu.md): a folder under .device/ that fits the 64 MiB
# the device tool carries, and its rehearsal on this CPU machine.
gpu-bundle: build
	bash scripts/gpu-bundle.sh

gpu-rehearse: build
	PYTHON="$(CURDIR)/$(VENV)/bin/python3" bash scripts/gpu-rehearse.sh

# The published scripts, fetched unmodified OUTSIDE this repository (docs/recipes-and-fidelity.md):
# PEERS holds cifar10-airbench, cifar10-speedrun, hlb-CIFAR10,
# cifar10-fast and cifar10-fast-simple (and the ImageNet references: ffcv-imagenet,
# imagenet18, training_results_v0.6) at the commits scripts/golden/SOURCES.md pins.
PEERS ?= $(CURDIR)/../peers

# tests/golden/*.json from the references' own code (CPU, ~10 s), and the golden
# trajectories (~2.5 min; the airbench scripts import torchvision).
golden: $(TORCH_DEP) $(VENV)/.torchvision
	$(VENV)/bin/python3 scripts/golden/make_golden.py --airbench $(PEERS)/cifar10-airbench \
	    --speedrun $(PEERS)/cifar10-speedrun --hlb $(PEERS)/hlb-CIFAR10 \
	    --page $(PEERS)/cifar10-fast --ffcv $(PEERS)/ffcv-imagenet --fastai $(PEERS)/imagenet18 \
	    --fujitsu $(PEERS)/training_results_v0.6 --out tests/golden
	$(CARGO_ENV) cargo build
	$(VENV)/bin/python3 scripts/golden/make_trajectory.py --airbench $(PEERS)/cifar10-airbench \
	    --speedrun $(PEERS)/cifar10-speedrun --hlb $(PEERS)/hlb-CIFAR10 --page $(PEERS)/cifar10-fast \
	    --tricklab target/debug/tricklab --out tests/golden/trajectory

# Each recipe beside the script it reproduces: results/reference/parity-DEVICE-DATE.md.
# PARITY passes more arguments (recipes, --seeds, --device cuda, --data).
parity: build $(VENV)/.torchvision
	./target/release/tricklab parity --peers $(PEERS) --python $(VENV)/bin/python3 $(PARITY)

# Each record's leave-one-out in its own code beside the engine's, at CPU scale:
# results/reference/records-cpu-DATE/RECORD.md. RECORDS names some (default: all five).
records: build $(VENV)/.torchvision
	scripts/records-cpu.sh $(RECORDS)

$(VENV)/.torchvision: $(TORCH_DEP)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check torchvision==0.26.0
	touch $@

clean:
	cargo clean

$(STAMP):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check torch==$(TORCH_VERSION)
	touch $@

$(CUDA_HEADERS): $(STAMP)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85
	touch src/native/native.cpp
	touch $@
