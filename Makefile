# The two commands of README: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 6006

.PHONY: venv test test-pure asan fuzz native lint demo bench clean

# The demo needs the package alone; the tests add their extras (jax, torch, playwright, XProf).
# The install builds the native scanner (tb_reduce_plugin/_scan.c) in place.
$(VENV)/.installed-demo: setup.py tb_reduce_plugin/_scan.c tb_reduce_plugin/_guard.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed: $(VENV)/.installed-demo
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(VENV)/bin/ruff check .

# A worker a core (`-n auto`). A third worker on 2 cores filled the quarter of the suite's time
# spent waiting (1,092 s against 1,171 s here) but starved the suites that record real JAX and
# PyTorch profiles while they run: their recordings then hold other shapes (more slices at least
# a bucket long) than the suites were written against.
test: venv lint
	$(PY) -m pytest -q -rs -n auto tests

# The same tests with the native code switched off (`TB_REDUCE_NATIVE=0`: the scanner of
# Chrome JSON and XSpace, the busy digits of summaries, level 2's check of args, the guard
# of mapped index files): the pure-Python paths must give the same results (CI runs both).
# What they can change is how a trace is read into its table, what a plan's summaries hold
# and how a cut index file is met, so this run keeps the suites of those: readers, the
# corpus sweep (every level and a window, each output compared byte for byte with the native
# paths' where the scanner is built: 37 s against 63 s for the oracle's verdict on three of the
# six), pipeline, CLI, index store, hostile files, plan memory. It leaves
# out the suites whose concern is above the table and the same whichever path parsed it:
# the browser (the dashboard draws the same routes), the live sidecar (the loop, its files
# and signals), the object store (bucket I/O), HTTP routes, budgets, caches, discovery,
# workers, scalars, waveforms, queries over a table (search, range tables, their chunks),
# window plans, the prepared state made in chunks, the fold on two threads and the chunked
# fold (`test_plan_memory`'s, compared against a whole-track fold on the same busy path);
# and the suites that switch the native code on and off themselves (both ways, the scan in
# pieces, the fuzzer, the plan's native steps, first instants and summaries' writer, which
# turn it on "also where the suite runs pure": the very runs of `make test`, and `make asan`
# runs them again). The index store meets a third of the corpus here (`corpus_for_this_run`
# in tests/index_support.py), the sweep all of it; the JAX profile of over a million events
# is read natively only (43 s pure, for the count `make test` checks; the pure XSpace reader
# meets every corpus XSpace in the sweep). It takes ~300-350 s of a 2-core machine alone;
# `.ci/run` runs it beside `make test` at nice 10, in the CPU `make test` leaves idle (CI as
# a whole took 1,857 s at its last landing with the two one after the other). PYTEST_EXTRA:
# more pytest options (`.ci/run`: no cache, a temporary directory of its own).
PURE_SKIP := tests/*browser*.py tests/frontend/*.py tests/live/*.py tests/formats/test_objectstore_s3.py \
	tests/test_budget*.py tests/test_package_layers.py tests/serve/test_cache.py tests/serve/test_discovery.py \
	tests/serve/test_gate.py tests/serve/test_plugin_*.py tests/serve/test_runs_etag.py \
	tests/serve/test_tensorboard_e2e.py tests/multihost/test_multihost_[!r]*.py tests/profile_tab/*.py \
	tests/query/*.py tests/reduce/test_view_resolution.py tests/reduce/test_window_plans.py \
	tests/reduce/test_fold_threads.py tests/reduce/test_binding_ahead.py tests/index/test_prepared_in_chunks.py \
	tests/waveforms/*.py tests/formats/test_jax_export_cap.py \
	tests/test_native_scanner.py tests/test_scan_pieces.py tests/test_native_fuzz.py tests/formats/test_xspace_native.py \
	tests/reduce/test_fold_steps.py tests/reduce/test_points.py tests/reduce/test_summary_json.py
test-pure: venv
	TB_REDUCE_NATIVE=0 $(PY) -m pytest -q -rs -n auto $(PYTEST_EXTRA) tests $(foreach g,$(PURE_SKIP),--ignore-glob='$(g)') \
		--deselect tests/reduce/test_plan_memory.py::test_folding_tracks_in_chunks_of_any_size_gives_the_plan_of_whole_tracks \
		--deselect tests/formats/test_xspace.py::test_a_profile_over_a_million_events_is_read_whole_where_jaxs_json_stops

# Rebuild the native scanner in place after editing _scan.c.
native: venv
	$(PY) setup.py -q build_ext --inplace --force

# The scanner built with AddressSanitizer and UBSan (build/asan, the installed one is
# untouched), run over its tests, the fuzzer (FUZZ_SECONDS) and every corpus trace.
FUZZ_SECONDS ?= 60
ASAN_SO = build/asan/tb_reduce_plugin/_scan$(shell $(PY) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
asan: venv
	TB_REDUCE_SANITIZE=1 $(PY) setup.py -q build_ext --build-lib build/asan --build-temp build/asan-tmp --force
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	TB_REDUCE_SCAN_PATH=$(CURDIR)/$(ASAN_SO) TB_REDUCE_FUZZ_SECONDS=$(FUZZ_SECONDS) \
	$(PY) -m pytest -q -rs -p no:cacheprovider -n auto tests/test_native_scanner.py tests/test_native_fuzz.py tests/test_scan_pieces.py tests/formats/test_xspace_native.py \
		tests/reduce/test_summary_json.py tests/reduce/test_fold_steps.py tests/reduce/test_points.py tests/model/test_search_through.py

# A longer fuzzing run of the native scanner against the pure-Python path.
fuzz: venv
	TB_REDUCE_FUZZ_SECONDS=$(FUZZ_SECONDS) $(PY) -m pytest -q -rs tests/test_native_fuzz.py

# TensorBoard on the bundled real profiles (a JAX XSpace run, a PyTorch
# trace-handler run, a plain Chrome JSON run): open the Trace Reduce tab.
demo: $(VENV)/.installed-demo
	@echo "Open http://127.0.0.1:$(PORT)/#tb_reduce (Ctrl+C to stop)"
	$(VENV)/bin/tensorboard --logdir demo_logdir --host 127.0.0.1 --port $(PORT) --load_fast=false

bench: venv
	$(PY) bench/bench_reduce.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
