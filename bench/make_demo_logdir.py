"""(Re)create `demo_logdir/`: small real profiles, one per kind of run.

    python3 bench/make_demo_logdir.py

- `jax_mlp/plugins/profile/<ts>/vm.xplane.pb` (+ JAX's own `vm.trace.json.gz`): the
  JAX CPU profile of `../shared/corpus/generated/jax_cpu_mlp_small/` (XProf layout).
- `pytorch_cnn/<worker>.<id>.pt.trace.json.gz`: a `torch.profiler` run written by
  `tensorboard_trace_handler` (the corpus's `torch_cpu_cnn_small`, gzipped).
- `stalled_step/`: a `torch.profiler` trace of 8 training steps, step 5 stalled 150 ms
  (`tests/fixtures/make_step_traces.py`), beside the scalars `torch.utils.tensorboard`
  wrote (`tests/fixtures/make_eventfiles.py`: a loss with NaN, ±Inf and a restart), so
  the waveform panel shows derived and scalar series at once.
- `torch_export/trace.json`: a plain Chrome JSON file from
  `torch.profiler.profile.export_chrome_trace`, recorded here on the CPU (needs torch).
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "generated"
DEMO = ROOT / "demo_logdir"


def jax_run() -> None:
    run = DEMO / "jax_mlp" / "plugins" / "profile" / "2026_11_30_13_59_00"
    run.mkdir(parents=True, exist_ok=True)
    for name in ("vm.xplane.pb", "vm.trace.json.gz"):
        shutil.copyfile(CORPUS / "jax_cpu_mlp_small" / name, run / name)


def pytorch_run() -> None:
    run = DEMO / "pytorch_cnn"
    run.mkdir(parents=True, exist_ok=True)
    src = next((CORPUS / "torch_cpu_cnn_small").glob("*.pt.trace.json"))
    (run / (src.name + ".gz")).write_bytes(gzip.compress(src.read_bytes(), mtime=0))


def stalled_step_run() -> None:
    run = DEMO / "stalled_step"
    run.mkdir(parents=True, exist_ok=True)
    fixtures = ROOT / "tests" / "fixtures"
    shutil.copyfile(fixtures / "traces" / "torch_stalled_step.pt.trace.json.gz", run / "torch_stalled_step.pt.trace.json.gz")
    shutil.copyfile(fixtures / "eventfiles" / "torch" / "events.out.tfevents.torch", run / "events.out.tfevents.torch")


def torch_export_run() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    run = DEMO / "torch_export"
    run.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(run / "trace.json"))


if __name__ == "__main__":
    jax_run()
    pytorch_run()
    stalled_step_run()
    torch_export_run()
    for path in sorted(DEMO.rglob("*")):
        if path.is_file():
            print(path.relative_to(ROOT), path.stat().st_size)
