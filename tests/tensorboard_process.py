"""A real `tensorboard` process for tests and benchmarks: started on a free port, spoken to
over HTTP, measured (`VmHWM`, `VmRSS`), optionally inside a memory cgroup, and killed
with whatever it started."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, whatever http_proxy says
URL_LINE = re.compile(r"TensorBoard \S+ at (http://\S+) ")
START_TIMEOUT_S = 90  # a cold start takes 5-10 s; leave room for a loaded CI machine
CGROUP_V1 = Path("/sys/fs/cgroup/memory")


class StartFailed(RuntimeError):
    pass


@dataclass
class TensorBoard:
    proc: subprocess.Popen
    url: str = ""  # as TensorBoard prints it, with the path prefix and a trailing slash
    log: list[str] = field(default_factory=list)
    cgroup: Optional[Path] = None

    def get(self, path: str, gz: bool = False, timeout: float = 120, headers: Optional[dict] = None,
            **params: Any) -> tuple[int, dict[str, str], bytes]:
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        h = dict(headers or {})
        if gz:
            h["Accept-Encoding"] = "gzip"
        req = urllib.request.Request(self.url + path + query, headers=h)
        try:
            with NO_PROXY.open(req, timeout=timeout) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def json(self, path: str, **params: Any) -> Any:
        status, _, data = self.get(path, **params)
        assert status == 200, (path, status, data[:300], self.tail())
        return json.loads(data)

    def wait_index_saved(self, timeout: float = 60) -> None:
        """Until the plugin's index store has saved an index (its writer runs beside the requests)."""
        deadline = time.monotonic() + timeout
        while self.json("data/plugin/tb_reduce/info")["index_store"]["saved"] < 1:
            assert time.monotonic() < deadline, self.tail()
            time.sleep(0.2)

    def children(self) -> list[int]:
        try:
            return [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]
        except (OSError, ValueError):
            return []

    def status_kb(self, key: str) -> int:
        """A `/proc/PID/status` memory figure (VmHWM: the peak RSS; VmRSS: now), in kB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def peak_mb(self) -> float:
        return self.status_kb("VmHWM") / 1024

    def rss_mb(self) -> float:
        return self.status_kb("VmRSS") / 1024

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self) -> str:
        return "".join(self.log[-30:])

    def stop(self) -> None:
        kids = self.children()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        for pid in kids:  # the Rust data server exits when TensorBoard closes its stdin; make sure
            if "tensorboard" in cmdline(pid):  # still ours, not a reused pid
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if self.cgroup is not None:
            try:
                self.cgroup.rmdir()
            except OSError:
                pass


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\x00", b" ").decode()
    except OSError:
        return ""


def memory_cgroup(limit_mb: int, name: str) -> Optional[Path]:
    """A cgroup-v1 memory cgroup capping its processes at `limit_mb` (root only), so a server
    that would take the machine down is killed alone; None where this machine has none."""
    if os.geteuid() != 0 or not (CGROUP_V1 / "cgroup.procs").exists():
        return None
    group = CGROUP_V1 / f"tb-reduce-{name}-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "memory.limit_in_bytes").write_text(str(limit_mb * 1024 * 1024))
        return group
    except OSError:
        return None


def _drain(stream: Any, sink: list[str], found: Callable[[str], None]) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
        found(line)


def start_tensorboard(logdir: Union[Path, str], cache_dir: Optional[Path], *flags: str,
                      pythonpath: Optional[str] = None, cgroup_mb: Optional[int] = None,
                      order: Optional[str] = None, cwd: Optional[Path] = None) -> TensorBoard:
    """`tensorboard --logdir LOGDIR` on a free port with the plugin's cache in `cache_dir`.

    `logdir`: a folder, or a URL (`s3://…`: then give `cwd`, where TensorBoard starts).
    `pythonpath`: import `tb_reduce_plugin` from another tree (a benchmark's baseline).
    `cgroup_mb`: run inside a memory cgroup of that size, where the machine allows it.
    `order`: load XProf's and tb-reduce's plugins in that order (`tensorboard_with_order.py`);
    `xprof-only` leaves tb-reduce out (then `cache_dir` is None).
    """
    launcher = (["-m", "tensorboard.main"] if order is None
                else [str(Path(__file__).resolve().parent / "tensorboard_with_order.py"), order])
    cache = ["--tb_reduce_cache_dir", str(cache_dir)] if cache_dir is not None else []
    cmd = [sys.executable, *launcher, "--logdir", str(logdir), "--port", "0", "--host", "127.0.0.1",
           "--reload_interval", "0", *cache, *flags]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    group = memory_cgroup(cgroup_mb, Path(str(logdir)).name) if cgroup_mb else None
    preexec = None
    if group is not None:
        procs = str(group / "cgroup.procs")

        def preexec() -> None:  # joins the cgroup before exec, so nothing escapes it
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

    # Started outside any checkout: `python -m` puts the working directory first on sys.path,
    # which would shadow `pythonpath`.
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True, preexec_fn=preexec,
                            cwd=str(cwd or Path(logdir).parent))
    tb = TensorBoard(proc, cgroup=group)
    ready = threading.Event()

    def found(line: str) -> None:
        m = URL_LINE.search(line)
        if m and not tb.url:
            tb.url = m.group(1)
            ready.set()

    threading.Thread(target=_drain, args=(proc.stdout, tb.log, found), daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready.wait(0.2):
        if proc.poll() is not None or time.monotonic() > deadline:
            tb.stop()
            raise StartFailed(f"tensorboard did not start (exit {proc.poll()}):\n{tb.tail()}")
    return tb


def storm(tb: TensorBoard, ask: Callable[[int], None], n: int, poll_path: str) -> list[float]:
    """`ask(0)` … `ask(n-1)` all at once, each on its own thread, while `poll_path` is asked
    every 0.1 s (it must answer 200 throughout); returns how long each poll took."""
    stop = threading.Event()
    polls: list[float] = []

    def poll() -> None:
        while not stop.is_set():
            began = time.monotonic()
            assert tb.get(poll_path)[0] == 200
            polls.append(time.monotonic() - began)
            time.sleep(0.1)

    poller = threading.Thread(target=poll)
    poller.start()
    askers = [threading.Thread(target=ask, args=(k,)) for k in range(n)]
    for t in askers:
        t.start()
    for t in askers:
        t.join(600)
    stop.set()
    poller.join(120)
    return polls
