"""A logdir on S3 (`s3://bucket/prefix`) is listed and served as the same files on disk are.

Against a real S3-compatible server: moto in server mode on a loopback port, spoken to
by s3fs over HTTP (the endpoint and fake credentials set in the environment for these
tests only, as a user configures a MinIO or Ceph endpoint). The objects are real traces
from the corpus: JAX's XSpace and capped export in `plugins/profile/<ts>/`, a PyTorch
trace-handler file, the eight ranks of a DLRM job. What is checked: the run list, every
host's reduced trace and stats, a merged view of the ranks, all equal to a local logdir's
of the same files; a replaced object read anew; a deleted one a clear one-line error; an
object over the input limit refused before a byte of it is fetched; a missing bucket said
in one line; a real `tensorboard --logdir s3://…` process listing and serving the traces.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from tb_reduce_plugin.errors import FileChanged, InputTooLarge
from tb_reduce_plugin.formats import objectstore
from tb_reduce_plugin.formats.sources import FileIdentity
from tb_reduce_plugin.serve.discovery import Catalog
from tests.plugin_support import (
    CORPUS,
    JAX_HOST,
    JAX_RUN,
    TORCH_FILE,
    TORCH_HOST,
    TORCH_RUN,
    assert_json_error,
    body_json,
    client,
    get,
    make_logdir,
    make_plugin,
)
from tests.tensorboard_process import start_tensorboard

s3fs = pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'tb-reduce-plugin[s3]')")
moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed (the test extra)")

RANKS = sorted((CORPUS / "public" / "param").glob("*dlrm_kineto__worker*_step_12.*.pt.trace.json"))
# What differs between two computations of the same reduction: how long they took, and
# whether the answer came from the cache.
UNSTABLE = frozenset({"timings_s", "cached"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def store() -> Iterator[Any]:
    """A moto S3 server on a free loopback port, the S3 client pointed at it through the
    environment (`AWS_ENDPOINT_URL`, fake credentials), for this module's tests only."""
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "HTTP_PROXY", "http_proxy"):
            env.delenv(name, raising=False)
        env.setenv("NO_PROXY", "127.0.0.1")
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        try:
            yield fs
        finally:
            server.stop()


def _bucket(fs: Any) -> str:
    name = f"tb-reduce-{uuid.uuid4().hex[:12]}"
    fs.mkdir(name)
    return name


def _upload(fs: Any, local: Path, root: str) -> None:
    """Every file under `local` as an object under `root` (`bucket/prefix`), same relative names."""
    for path in sorted(local.rglob("*")):
        if path.is_file():
            fs.pipe(f"{root}/{path.relative_to(local).as_posix()}", path.read_bytes())
    fs.invalidate_cache()


def _logdir_with_ranks(root: Path) -> Path:
    if len(RANKS) != 8:
        pytest.skip("the corpus's DLRM ranks are not here")
    logdir = make_logdir(root)  # JAX's XSpace + its capped export, a PyTorch trace-handler file
    (logdir / "dlrm").mkdir()
    for p in RANKS:
        shutil.copyfile(p, logdir / "dlrm" / p.name)
    return logdir


def _stable(doc: Any) -> Any:
    """`doc` without what two computations of one reduction may differ in (`UNSTABLE`)."""
    if isinstance(doc, dict):
        return {k: _stable(v) for k, v in doc.items() if k not in UNSTABLE}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


def _trace_bytes(c: Any, **params: Any) -> bytes:
    """A `trace` answer's JSON bytes (gunzipped if it came gzipped)."""
    resp = get(c, "trace", **params)
    assert resp.status_code == 200, (params, resp.status_code, resp.get_data()[:300])
    data = resp.get_data()
    return gzip.decompress(data) if resp.headers.get("Content-Encoding") == "gzip" else data


def _trace(c: Any, **params: Any) -> dict:
    return json.loads(_trace_bytes(c, **params))


@pytest.fixture(scope="module")
def twins(store: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, str]:
    """The same traces twice: a local logdir, and its copy on S3; a plugin on each."""
    root = tmp_path_factory.mktemp("s3twins")
    logdir = _logdir_with_ranks(root)
    bucket = _bucket(store)
    _upload(store, logdir, f"{bucket}/team/logs")
    url = f"s3://{bucket}/team/logs"
    # The S3 twin computes merged views in-process (`local:0`): a worker pool's processes come
    # from one fork server, whose environment is the one it started with, maybe before this
    # module's endpoint was set. The TensorBoard process test below covers S3 through workers.
    remote = make_plugin(url, root / "cache-s3", "--tb_reduce_workers", "local:0")  # type: ignore[arg-type]
    return client(make_plugin(logdir, root / "cache-local")), client(remote), url


def _uncounted(runs: list) -> list:
    """A listing as an object store gives it: a JAX export's events are counted on disk only (a
    store's object would be downloaded whole to count them), so a store lists it unchecked."""
    out = []
    for r in runs:
        hosts = []
        for h in r["hosts"]:
            h = dict(h)
            if "export" in h:
                h.pop("export")
                h.pop("capped", None)
            hosts.append(h)
        out.append(dict(r, hosts=hosts))
    return out


def _same_listing(remote: list, local: list) -> None:
    assert _uncounted(remote) == _uncounted(local)
    for r in remote:
        for h in r["hosts"]:
            if "export" in h:  # said, not hidden: not checked against the cap, so marked as it may be
                assert h["export"]["events"] is None and h["capped"]["checked"] is False


def test_is_url_names_object_stores_and_never_a_local_path() -> None:
    assert objectstore.is_url("s3://bucket/prefix") and objectstore.is_url("gs://bucket")
    assert not objectstore.is_url("/tmp/logs") and not objectstore.is_url("logs/s3:/x")
    assert not objectstore.is_url("file:///tmp/logs")  # local files are read in place, not copied


def test_an_s3_logdir_lists_the_same_runs_as_the_same_files_on_disk(twins) -> None:
    local, remote, _ = twins
    runs = body_json(get(local, "runs"))
    assert {r["run"] for r in runs} == {JAX_RUN, TORCH_RUN, "dlrm"}
    assert [h.get("rank") for h in next(r for r in runs if r["run"] == "dlrm")["hosts"]] == list(range(8))
    _same_listing(body_json(get(remote, "runs")), runs)


def test_a_bucket_s_root_or_a_trailing_slash_names_the_same_runs_under_their_prefix(twins) -> None:
    local, _, url = twins
    runs = body_json(get(local, "runs"))
    bucket = url[len("s3://"):].split("/")[0]
    _same_listing(Catalog(url + "/", max_age_s=0).runs(), runs)
    _same_listing(Catalog(f"s3://{bucket}", max_age_s=0).runs(), [dict(r, run="team/logs/" + r["run"]) for r in runs])


def test_the_store_walk_is_bounded_in_entries_and_depth_as_the_local_walk(twins) -> None:
    _, _, url = twins
    whole = objectstore.walk(url, 1000, 16)
    assert not whole.truncated and len(whole.entries) == 11 and not whole.skipped
    cut = objectstore.walk(url, 4, 16)
    assert cut.truncated and len(cut.entries) < 4 and "stops after 4 entries" in cut.skipped[-1][1]
    shallow = objectstore.walk(url, 1000, 1)  # `jax/plugins` is two folders down: not entered
    assert {name for _, name, _ in shallow.entries} == {p.name for p in RANKS} | {TORCH_FILE}
    assert [why for where, why in shallow.skipped] == ["deeper than 1 folders: not walked"]
    assert shallow.skipped[0][0] == url + "/jax/plugins"


def test_every_host_s_trace_and_stats_from_s3_are_what_the_local_logdir_serves(twins) -> None:
    local, remote, _ = twins
    pairs = [(r["run"], h["host"]) for r in body_json(get(local, "runs")) for h in r["hosts"]]
    assert (JAX_RUN, JAX_HOST) in pairs and (TORCH_RUN, TORCH_HOST) in pairs and len(pairs) == 11
    for run, host in pairs:
        for level in ("auto", 0):
            mine = _trace_bytes(remote, run=run, host=host, level=level)
            assert mine == _trace_bytes(local, run=run, host=host, level=level), (run, host, level)
            assert len(json.loads(mine)["traceEvents"]) > 0
        stats = [body_json(get(c, "stats", run=run, host=host, level=2)) for c in (remote, local)]
        assert _stable(stats[0]) == _stable(stats[1]), (run, host)


def test_the_other_routes_over_an_s3_logdir_answer_as_over_the_local_one(twins) -> None:
    local, remote, _ = twins
    asks = [("tags", {"run": TORCH_RUN}), ("waveforms", {"run": TORCH_RUN, "host": TORCH_HOST}),
            ("search", {"run": JAX_RUN, "host": JAX_HOST, "q": "dot"}), ("event", {"run": TORCH_RUN, "host": TORCH_HOST, "i": 3}),
            ("aggregate", {"run": "dlrm", "host": body_json(get(local, "runs"))[0]["hosts"][2]["host"]})]
    for route, params in asks:
        mine, theirs = get(remote, route, **params), get(local, route, **params)
        assert mine.status_code == theirs.status_code == 200, (route, mine.status_code, mine.get_data()[:300])
        assert _stable(body_json(mine)) == _stable(body_json(theirs)), route


def test_a_merged_view_of_the_ranks_on_s3_is_the_local_merged_view(twins) -> None:
    local, remote, _ = twins
    mine = _trace_bytes(remote, run="dlrm", hosts="*")
    doc = json.loads(mine)
    assert doc["tb_reduce"]["merged"] is True and len(doc["tb_reduce"]["hosts"]) == 8
    assert not any(h.get("error") for h in doc["tb_reduce"]["hosts"])
    assert mine == _trace_bytes(local, run="dlrm", hosts="*")


def test_every_walk_lists_the_store_as_it_is_now_not_an_earlier_listing(store: Any, tmp_path: Path) -> None:
    logdir = make_logdir(tmp_path)
    bucket = _bucket(store)
    _upload(store, logdir, f"{bucket}/logs")
    catalog = Catalog(f"s3://{bucket}/logs", max_age_s=0)
    sizes = {(r["run"], h["host"]): h["bytes"] for r in catalog.runs() for h in r["hosts"]}
    assert sizes[(TORCH_RUN, TORCH_HOST)] == (logdir / TORCH_RUN / TORCH_FILE).stat().st_size
    rewritten = gzip.compress(RANKS[1].read_bytes(), mtime=0)
    store.pipe(f"{bucket}/logs/{TORCH_RUN}/{TORCH_FILE}", rewritten)  # two folders down, nothing read between
    store.pipe(f"{bucket}/logs/{JAX_RUN.split('/')[0]}/plugins/profile/{JAX_RUN.split('/')[1]}/extra.xplane.pb",
               (CORPUS / "generated" / "jax_cpu_mlp_small" / "vm.xplane.pb").read_bytes())
    now = {(r["run"], h["host"]): h["bytes"] for r in catalog.runs() for h in r["hosts"]}
    assert now[(TORCH_RUN, TORCH_HOST)] == len(rewritten) and (JAX_RUN, "extra") in now


def test_a_replaced_object_is_read_anew_and_its_old_copy_removed(store: Any, tmp_path: Path) -> None:
    bucket = _bucket(store)
    key = f"{bucket}/logs/{TORCH_RUN}/{TORCH_FILE}"
    first, second = make_logdir(tmp_path / "a"), tmp_path / "b" / "logdir"
    (second / TORCH_RUN).mkdir(parents=True)
    (second / TORCH_RUN / TORCH_FILE).write_bytes(gzip.compress(RANKS[0].read_bytes(), mtime=0))
    store.pipe(key, (first / TORCH_RUN / TORCH_FILE).read_bytes())
    plugin = make_plugin(f"s3://{bucket}/logs", tmp_path / "cache")  # type: ignore[arg-type]
    c = client(plugin)
    before = _trace_bytes(c, run=TORCH_RUN, host=TORCH_HOST)
    store.pipe(key, (second / TORCH_RUN / TORCH_FILE).read_bytes())
    after = _trace_bytes(c, run=TORCH_RUN, host=TORCH_HOST)
    assert after == _trace_bytes(client(make_plugin(second, tmp_path / "cache-b")), run=TORCH_RUN, host=TORCH_HOST)
    assert after != before
    copies = [p for p in Path(plugin.service.stage_dir).rglob("*") if p.is_file()]
    assert [p.name for p in copies] == [TORCH_FILE]  # the earlier version's copy is gone
    assert copies[0].stat().st_size == len((second / TORCH_RUN / TORCH_FILE).read_bytes())


def _served(store: Any, tmp_path: Path) -> tuple[Any, Any, str]:
    """The test logdir uploaded to a new bucket and served from there, listed once: plugin, client, bucket."""
    bucket = _bucket(store)
    _upload(store, make_logdir(tmp_path), f"{bucket}/logs")
    plugin = make_plugin(f"s3://{bucket}/logs", tmp_path / "cache")  # type: ignore[arg-type]
    c = client(plugin)
    assert len(body_json(get(c, "runs"))) == 2
    return plugin, c, bucket


def test_an_object_deleted_after_listing_is_a_clear_error_and_the_server_goes_on(store: Any, tmp_path: Path) -> None:
    plugin, c, bucket = _served(store, tmp_path)
    plugin.service.catalog.max_age_s = 3600  # the listing still names the object once it is gone
    store.rm(f"{bucket}/logs/{TORCH_RUN}/{TORCH_FILE}")
    message = assert_json_error(get(c, "trace", run=TORCH_RUN, host=TORCH_HOST), 404)
    assert TORCH_FILE in message and "no longer listed" in message, message
    assert [r["run"] for r in body_json(get(c, "runs"))] == [JAX_RUN]  # listed again, without it
    assert _trace(c, run=JAX_RUN, host=JAX_HOST)["traceEvents"]


def test_an_object_over_the_input_limit_is_refused_before_a_byte_of_it_is_fetched(store: Any, tmp_path: Path) -> None:
    logdir = make_logdir(tmp_path)
    bucket = _bucket(store)
    _upload(store, logdir, f"{bucket}/logs")
    xplane = logdir / "jax" / "plugins" / "profile" / JAX_RUN.split("/")[1] / "vm.xplane.pb"
    limit_mb = 0.1
    assert xplane.stat().st_size > limit_mb * 1024 * 1024
    plugin = make_plugin(f"s3://{bucket}/logs", tmp_path / "cache", "--tb_reduce_max_input_mb", str(limit_mb))  # type: ignore[arg-type]
    message = assert_json_error(get(client(plugin), "trace", run=JAX_RUN, host=JAX_HOST), 413)
    assert "vm.xplane.pb" in message and "input limit" in message, message
    stage = Path(plugin.service.stage_dir)
    assert not stage.exists() or not [p for p in stage.rglob("*") if p.is_file()]
    # `local_copy` itself refuses by the listed size before asking the store anything: a
    # bucket that does not exist gives the size refusal, not the store's error.
    too_big = FileIdentity(0, 1, 10 * 1024 * 1024, 0)
    with pytest.raises(InputTooLarge, match="over the input limit"):
        objectstore.local_copy("s3://no-such-bucket-tb-reduce/x.xplane.pb", too_big, str(stage), 1024 * 1024)


def test_a_copy_is_refused_when_the_object_changed_since_it_was_listed(store: Any, tmp_path: Path) -> None:
    bucket = _bucket(store)
    url = f"s3://{bucket}/logs/{TORCH_RUN}/{TORCH_FILE}"
    store.pipe(url[5:], b"version one")
    listed = objectstore.stat(url).identity()
    store.pipe(url[5:], b"version two")  # same size, another ETag
    stage = tmp_path / "stage"
    with pytest.raises(FileChanged, match="changed since it was listed"):
        objectstore.local_copy(url, listed, str(stage), 1024)
    assert not stage.exists() or not [p for p in stage.rglob("*") if p.is_file()]  # no copy, no temporary file
    now = objectstore.stat(url).identity()
    copy = objectstore.local_copy(url, now, str(stage), 1024)
    assert Path(copy).read_bytes() == b"version two" and os.stat(copy).st_mtime_ns == now.mtime_ns
    assert objectstore.local_copy(url, now, str(stage), 1024) == copy  # the same version is not fetched again


def test_a_store_that_cannot_be_reached_is_a_one_line_502_and_not_remembered(
        store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin, c, bucket = _served(store, tmp_path)
    plugin.service.catalog.max_age_s = 3600  # listed while the store answered
    with monkeypatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
        message = assert_json_error(get(c, "trace", run=TORCH_RUN, host=TORCH_HOST), 502)
    assert "cannot read" in message and TORCH_FILE in message, message
    assert _trace(c, run=TORCH_RUN, host=TORCH_HOST)["traceEvents"]  # the store is back: read, not refused again


def test_a_missing_bucket_lists_nothing_and_says_why_in_one_line(store: Any, tmp_path: Path) -> None:
    catalog = Catalog(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/logs", max_age_s=0)
    assert catalog.runs() == []
    skipped = catalog.discovery()["skipped"]
    assert len(skipped) == 1 and "no such bucket" in skipped[0]["reason"] and "\n" not in skipped[0]["reason"]
    c = client(make_plugin(catalog.logdir, tmp_path / "cache"))  # type: ignore[arg-type]
    assert body_json(get(c, "runs")) == []
    assert_json_error(get(c, "trace", run=JAX_RUN, host=JAX_HOST), 404)


def test_tensorboard_itself_started_on_an_s3_logdir_lists_and_serves_its_traces(twins, tmp_path: Path) -> None:
    local, _, url = twins
    tb = start_tensorboard(url, tmp_path / "cache", cwd=tmp_path)
    try:
        _same_listing(tb.json("data/plugin/tb_reduce/runs"), body_json(get(local, "runs")))
        assert tb.json("data/plugins_listing")["tb_reduce"]["enabled"] is True
        status, headers, data = tb.get("data/plugin/tb_reduce/trace", run=TORCH_RUN, host=TORCH_HOST)
        assert status == 200, (data[:300], tb.tail())
        body = gzip.decompress(data) if headers.get("content-encoding") == "gzip" else data
        assert body == _trace_bytes(local, run=TORCH_RUN, host=TORCH_HOST)
        # A merged view: each rank reduced by a worker process, which copies its object itself.
        status, headers, data = tb.get("data/plugin/tb_reduce/trace", run="dlrm", hosts="*")
        assert status == 200, (data[:300], tb.tail())
        body = gzip.decompress(data) if headers.get("content-encoding") == "gzip" else data
        assert body == _trace_bytes(local, run="dlrm", hosts="*")
    finally:
        tb.stop()
