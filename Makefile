# srifty: set-up and checks. `make setup` then `make test` is all a fresh machine needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch: a plain `torch` requirement can pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: setup test test-fast demo profiles profiles-cpu corpus repeatability gpu-speed gpu-step gpu-check model accuracy bench evaluate clean

setup:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH_SPEC)" || $(BIN)/pip install --quiet --index-url $(TORCH_INDEX) "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[test]"
	$(BIN)/srifty --version

test:
	$(BIN)/python -m pytest -q

# The inner loop: everything but real torchrun jobs and emulated hosts (no root needed).
test-fast:
	$(BIN)/python -m pytest -q -m "not slow and not cluster"

# The main job on shipped data, no cloud account: the recorded profiles, then the
# configurations to rent for one of them (with the latency model shipped in srifty/data).
demo:
	$(BIN)/srifty show profiles/local
	$(BIN)/srifty recommend --profile profiles/local/cnn_resnet.json --budget 12

# Re-record the shipped profiles of the examples with the real profiler (about 2 minutes).
profiles:
	$(BIN)/srifty profile examples/cnn_resnet.py --nproc 2 --out profiles/local/cnn_resnet.json
	$(BIN)/srifty profile examples/transformer_lm.py --nproc 2 --out profiles/local/transformer_lm.json
	$(BIN)/srifty profile examples/mlp_recsys.py --nproc 2 --out profiles/local/mlp_recsys.json
	$(BIN)/srifty profile --collectives --world-sizes 2 --out profiles/local/collectives.json

# One-worker CPU profiles of the examples at the batches profiles/h200 holds, and of the Pollux
# trace's models at one batch each (about 12 minutes): the CPU side of the CPU-to-GPU transfer
# check (docs/ACCURACY.md, "From a CPU profile to a GPU")
BATCHES ?= cnn_resnet:32,128,512 transformer_lm:8,32,128 mlp_recsys:256,1024,4096 rnn_lm:16,64,256
POLLUX_BATCHES ?= cifar10:32 imagenet:20 ncf:256
profiles-cpu:
	for spec in $(BATCHES); do m=$${spec%%:*}; mkdir -p profiles/cpu/$$m; \
	  for b in $$(echo $${spec#*:} | tr , ' '); do \
	    $(BIN)/srifty profile examples/$$m.py --nproc 1 --batch-size $$b --max-seconds 40 --min-iterations 8 \
	      --out profiles/cpu/$$m/b$$b.json || exit 1; done; done
	for spec in $(POLLUX_BATCHES); do m=$${spec%%:*}; b=$${spec#*:}; mkdir -p profiles/cpu/$$m; \
	  $(BIN)/srifty profile examples/pollux_models.py --model-name $$m --nproc 1 --batch-size $$b \
	    --max-seconds 40 --min-iterations 8 --out profiles/cpu/$$m/b$$b.json -- --model $$m || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# Record the emulated-cluster corpus (needs root; under an hour): configs/corpus-grid.yaml
corpus:
	$(BIN)/python scripts/make_corpus.py

# How far the emulated corpus moves between recordings (needs root; ~5 min): docs/REPEATABILITY.md
repeatability:
	$(BIN)/python scripts/repeatability.py

# Measured factors on the spec speed ratio of GPUs (srifty/data/gpu_speed_corrections.csv), from
# Lambda's compiled single-GPU tables, and how far transfers miss on rates left out of the fit
# (srifty/data/gpu_transfer_error.json); then `make model` (the model card hashes both files).
gpu-speed:
	$(BIN)/python scripts/fit_gpu_speed.py

# The operator model's fixed costs (srifty/data/gpu_step_model.json), fitted on profiles/cpu and
# profiles/h200 with a leave-one-model-out interval; then `make model` and `make accuracy`
gpu-step:
	$(BIN)/python scripts/fit_gpu_step.py

# The profiler on a real CUDA GPU (needs one; ~5 min): the examples at three batch sizes each,
# the refusals, --device cpu, predict/recommend from a GPU profile (docs/gpu-check.md)
gpu-check:
	mkdir -p runs && PY=$(BIN)/python scripts/gpu_check.sh runs/gpu-check 2>&1 | tee runs/gpu-check.log

# The latency model shipped with srifty (srifty/data/latency-model.npz + .card.json), trained on
# the shipped corpus, and its golden predictions (tests/data/golden-predictions.json); rerun after
# changing the corpus, or after raising MODEL_REVISION (tests say when).
model:
	$(BIN)/srifty fit --quick --out srifty/data/latency-model.npz
	$(BIN)/python scripts/golden_predictions.py --write

# Latency-model accuracy on the shipped corpus: writes docs/ACCURACY.md and docs/accuracy.png.
accuracy:
	$(BIN)/srifty validate --out docs/ACCURACY.md --plot docs/accuracy.png --readme README.md

# Benchmark of `srifty recommend` (figures in docs/BENCHMARKS.md)
bench:
	$(BIN)/python scripts/bench_recommend.py

# Recommendations against measured reality on the emulated cluster (root; under an hour): docs/EVALUATION.md
evaluate:
	$(BIN)/python scripts/make_evaluation.py
