"""`edgepack bench` on the host board with a real package, the result schema, `edgepack report` (HTML, Markdown,
regression check) and the HTML rendered by headless Chromium."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import have, run_cli
from edgepack.board import load_board
from edgepack.deploy.device import BenchSettings, open_device
from edgepack.errors import DimError
from edgepack.report import grid
from edgepack.errors import SchemaError
from edgepack.report.schema import JSON_SCHEMA, Stats, load_run, save_run, validate

pytestmark = pytest.mark.e2e

SIZES = [1, 8, 32]


@pytest.fixture(scope="module")
def run_json(encoder_bundle, tmp_path_factory):
    """A real bench run through the CLI: 1 thread (steady on a shared machine), profiled, with onnxruntime."""
    out = tmp_path_factory.mktemp("bench") / "run.json"
    r = run_cli("bench", str(encoder_bundle.path), "--board", "host", "--sizes", "seq=" + ",".join(map(str, SIZES)),
                "--threads", "1", "--warmup", "2", "--repeat", "6", "--min-time", "5", "--profile",
                "--baseline", "onnxruntime", "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def slow_json(run_json):
    """The same run with every edgepack sample scaled by 1.5 (stats recomputed). A really slower package would
    do too, but on a shared 2-core machine its margin over a 1.10 limit would be noise-dependent; scaling gives
    the regression check a known answer (x1.5 per size)."""
    doc = json.loads(run_json.read_text())
    for s in doc["sizes"]:
        s["samples"] = [round(v * 1.5) for v in s["samples"]]
        s["stats"] = vars(Stats.of(s["samples"]))
    out = run_json.with_name("slow.json")
    out.write_text(json.dumps(doc))
    return out


def test_local_device_bench(encoder_bundle):
    dev = open_device(load_board("host"))
    res = dev.bench(encoder_bundle, {"seq": 4}, BenchSettings(warmup=1, repeat=3, min_time_ms=0, threads=1))
    assert res.dims == {"seq": 4} and res.threads == 1 and res.unit == "ns" and res.calls == []
    assert len(res.samples_ns) == 3 and all(s > 0 for s in res.samples_ns)
    with pytest.raises(DimError, match="outside"):  # the bench program's exit 3
        dev.bench(encoder_bundle, {"seq": 300}, BenchSettings(repeat=1))


def test_local_device_profile_times_every_call(encoder_bundle):
    dev = open_device(load_board("host"))
    res = dev.bench(encoder_bundle, {"seq": 16}, BenchSettings(warmup=1, repeat=2, threads=1, profile=True))
    plan_calls = [c["kernel"] for c in json.loads((encoder_bundle.path / "plan.json").read_text())["calls"]]
    assert [c["name"] for c in res.calls] == plan_calls
    assert all(c["ns"] > 0 for c in res.calls)


def test_bench_result(run_json, encoder_bundle):
    doc = json.loads(run_json.read_text())
    validate(doc)
    m = encoder_bundle.manifest
    assert doc["schema_version"] == 1 and doc["package"]["model"] == m["model"] and doc["package"]["tuned"] is False
    assert doc["memory"] == m["memory"] and doc["machine"]["board"] == "host"
    assert doc["machine"]["os"].startswith("Linux") and doc["machine"]["cores"] >= 1
    assert [s["dims"] for s in doc["sizes"]] == [{"seq": v} for v in SIZES]
    for s in doc["sizes"]:
        st = s["stats"]
        assert st["n"] == len(s["samples"]) >= 6 and s["threads"] == 1
        assert st["min"] <= st["p10"] <= st["median"] <= st["p90"] <= st["max"]
        assert st == pytest.approx(vars(Stats.of(s["samples"])))
    med = {s["dims"]["seq"]: s["stats"]["median"] for s in doc["sizes"]}
    assert med[32] > 3 * med[1]  # 32x the work; ~35x measured


def test_bench_profile_breakdown(run_json, encoder_bundle):
    kernels = set(encoder_bundle.manifest["kernels"])
    for s in json.loads(run_json.read_text())["sizes"]:
        ops = s["operators"]
        assert {o["name"] for o in ops} <= kernels and sum(o["calls"] for o in ops) == len(s["calls"]) == 15
        assert sum(o["share"] for o in ops) == pytest.approx(1.0)
        assert [o["ns"] for o in ops] == sorted((o["ns"] for o in ops), reverse=True)


def test_bench_baseline_onnxruntime(run_json):
    doc = json.loads(run_json.read_text())
    cores = load_board("host").target.cores
    assert doc["baseline"]["name"] == "onnxruntime" and doc["baseline"]["threads"] == sorted({1, cores})
    for s in doc["sizes"]:
        assert set(s["baselines"]) == {f"onnxruntime_{t}t" for t in doc["baseline"]["threads"]}
        for b in s["baselines"].values():
            assert len(b["samples"]) == len(s["samples"])  # interleaved rounds, as many calls as edgepack
            assert b["speedup"] == pytest.approx(b["stats"]["median"] / s["stats"]["median"])
            assert 0 < b["call_cost_ns"] < b["stats"]["median"]
            assert b["speedup_without_call_cost"] < b["speedup"]


def test_baseline_round_ends_when_onnxruntime_threads_are_idle(tmp_path):
    """After a round of a 2-thread onnxruntime session its workers spin; the round returns only once they have
    stopped (this process under 5% of a core), so edgepack's next run does not share a core with them."""
    import threading
    import time

    from edgepack.examples import EXAMPLES
    from edgepack.report.baseline import OrtBaseline, wait_until_idle

    base = OrtBaseline(EXAMPLES["encoder"].path, [2])
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 64, 64)).astype(np.float32)}  # x[1, seq, 64]
    for _ in range(2):  # the first round also makes the call-cost probe's session, which takes a while
        base.measure(feeds, repeat=5, warmup=1)
    c0 = time.process_time()
    time.sleep(0.05)
    assert time.process_time() - c0 < 0.05 * 0.05 * 4, "onnxruntime's threads still busy after the round"
    stop = time.monotonic() + 0.15

    def spin():  # a thread of our own, busy for 150 ms: waited for, within the cap
        while time.monotonic() < stop:
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    waited = wait_until_idle(max_s=1.0)
    spinner.join()
    assert 0.1 <= waited < 1.0, waited


def test_schema_round_trip(run_json, tmp_path):
    doc = json.loads(run_json.read_text())
    run = load_run(run_json)
    assert run.to_dict() == doc
    assert load_run(save_run(run, tmp_path / "again.json")).to_dict() == doc
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, JSON_SCHEMA)  # the documented schema is real JSON Schema and the file meets it


def test_report_refuses_unknown_schema_version(run_json, tmp_path):
    doc = json.loads(run_json.read_text()) | {"schema_version": 99}
    bad = tmp_path / "future.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match="schema version 99 is not supported"):
        load_run(bad)
    r = run_cli("report", str(bad), "-o", str(tmp_path / "index.html"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "schema version 99 is not supported" in r.stderr and not (tmp_path / "index.html").exists()


def test_schema_rejects_damaged_file(run_json):
    doc = json.loads(run_json.read_text())
    doc["sizes"][0]["stats"].pop("median")
    with pytest.raises(SchemaError, match=r"sizes\[0\]\.stats: missing 'median'"):
        validate(doc)


@pytest.fixture(scope="module")
def report(run_json, slow_json, tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    r = run_cli("report", str(run_json), str(slow_json), "-o", str(d / "index.html"), "--markdown", str(d / "out.md"),
                "--at", "seq=8")
    assert r.returncode == 0, r.stderr
    return d / "index.html", d / "out.md"


def test_report_html_self_contained(report):
    text = report[0].read_text()
    for plot in ("plot-latency", "plot-speedup", "plot-operators", "plot-memory"):
        assert f'id="{plot}"><svg' in text
    assert "Per-operator breakdown at seq=8" in text and text.count("<svg") == 4
    low = text.lower()
    assert "http://" not in low and "https://" not in low and "<script" not in low and " src=" not in low


def test_report_markdown(report):
    md = report[1].read_text()
    assert "| seq=1 |" in md and "vs onnxruntime_1t" in md and "### run vs slow" in md
    comparison = md.split("### run vs slow", 1)[1].split("###", 1)[0]  # not the onnxruntime columns, measured
    assert comparison.count("x1.50 faster") == len(SIZES)  # run vs slow: every size, from the scaled samples


def test_regression_check(run_json, slow_json, tmp_path):
    r = run_cli("report", "--fail-if-slower", "1.10", str(slow_json), str(run_json))
    assert r.returncode == 1
    named = [ln.split(":")[1].strip() for ln in r.stderr.splitlines() if ln.startswith("slower:")]
    assert named == [f"seq={v}" for v in SIZES]
    assert run_cli("report", "--fail-if-slower", "1.10", str(run_json), str(slow_json)).returncode == 0
    assert run_cli("report", "--fail-if-slower", "1.60", str(slow_json), str(run_json)).returncode == 0
    assert run_cli("report", "--fail-if-slower", "1.10", str(run_json), str(run_json)).returncode == 0
    one = json.loads(run_json.read_text())  # only seq=8 slower: only it is named
    s = one["sizes"][1]
    s["samples"] = [v * 2 for v in s["samples"]]
    s["stats"] = vars(Stats.of(s["samples"]))
    (tmp_path / "one.json").write_text(json.dumps(one))
    r = run_cli("report", "--fail-if-slower", "1.10", str(tmp_path / "one.json"), str(run_json))
    assert r.returncode == 1 and "seq=8" in r.stderr and "seq=1:" not in r.stderr and "seq=32" not in r.stderr


def test_bench_bad_sizes_and_model(encoder_bundle):
    from edgepack.examples import EXAMPLES

    r = run_cli("bench", str(encoder_bundle.path), "--sizes", "seq=300", "-o", "/dev/null")
    assert r.returncode == 2 and "outside the package's range 1..256" in r.stderr
    r = run_cli("bench", str(encoder_bundle.path), "--sizes", "seq=1", "--baseline", "onnxruntime",
                "--model", str(EXAMPLES["mlp"].path), "-o", "/dev/null")
    assert r.returncode == 2 and "sha256 differs" in r.stderr


def test_grid():
    m = {"model": {"name": "m"}, "dims": [{"name": "batch", "min": 1, "max": 4}, {"name": "seq", "min": 2, "max": 64}]}
    assert grid.grid(m, grid.parse_sizes(["seq=8,2"])) == [{"batch": 1, "seq": 2}, {"batch": 1, "seq": 8}]
    assert len(grid.grid(m, grid.parse_sizes(["seq=2,8", "batch=1,4"]))) == 4
    assert grid.grid(m, {}) == [{"batch": b, "seq": s} for b in (1, 2, 4) for s in (2, 11, 64)]
    assert grid.geometric(1, 256, 5) == [1, 4, 16, 64, 256]
    with pytest.raises(DimError, match="has dims: batch, seq"):
        grid.grid(m, {"len": [1]})


@pytest.mark.skipif(not have("chromium"), reason="chromium is not installed (Debian package chromium)")
def test_report_renders_in_chromium(report, tmp_path):
    shot = tmp_path / "shot.png"
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
           "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",  # no network, even if asked
           f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--window-size=1200,2400",
           f"--screenshot={shot}", report[0].resolve().as_uri()]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        p.wait(timeout=90)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # chromium's helper processes too
        except ProcessLookupError:
            pass
        p.wait()
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert img.shape[:2] == (2400, 1200) and img.std() > 20  # not blank
    blue = (np.abs(img - [31, 119, 180]).sum(axis=2) < 40)  # matplotlib's first colour: run's edgepack line, bars
    rows = np.nonzero(blue.any(axis=1))[0]
    assert blue.sum() > 2000
    top = rows[rows < 800]  # the latency plot comes first, below the title
    assert top.size > 50, "no plot drawn in the latency figure's region"
    assert (rows > 1200).any(), "no plot drawn further down (operators, memory)"


def test_report_plain_run(run_json, tmp_path):
    """A run without baseline or profile: no speed-up figure, and the report says how to get a breakdown."""
    from edgepack.report.html import render
    from edgepack.report.markdown import markdown
    from edgepack.report.schema import Run

    doc = json.loads(run_json.read_text()) | {"baseline": None}
    for s in doc["sizes"]:
        s.update(calls=[], operators=[], baselines={})
    run = Run.from_dict(doc, "plain.json")
    text = render([run])
    assert 'id="plot-latency"' in text and 'id="plot-memory"' in text and 'id="plot-speedup"' not in text
    assert "edgepack bench --profile" in text and text.count("<svg") == 2
    md = markdown([run])
    assert "onnxruntime" not in md and md.count("| seq=") == len(SIZES)


@pytest.mark.hil
@pytest.mark.skipif(not (have("qemu-aarch64") and have("aarch64-linux-gnu-gcc")),
                    reason="the qemu-aarch64 stand-in needs qemu-user and aarch64-linux-gnu-gcc")
def test_bench_and_report_on_standin(tmp_path):
    """The same commands on the qemu-aarch64 stand-in (SSH device): bench goes through open_device, not local."""
    from edgepack.examples import EXAMPLES

    env = dict(os.environ, EDGEPACK_STATE_DIR=str(tmp_path / "state"))  # a private stand-in, not a user's

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "edgepack.cli", *args], capture_output=True, text=True,
                              env=env, timeout=300)

    r = cli("build", str(EXAMPLES["mlp"].path), "--board", "qemu-aarch64", "--dim", "batch=1:64", "-o",
            str(tmp_path / "mlp"))
    assert r.returncode == 0, r.stderr
    up = cli("standin", "up", "qemu-aarch64")
    try:
        if up.returncode != 0:
            pytest.skip(f"the qemu-aarch64 stand-in cannot start here: {up.stderr.strip()}")
        r = cli("bench", str(tmp_path / "mlp"), "--board", "qemu-aarch64", "--sizes", "batch=1,64", "--repeat", "3",
                "-o", str(tmp_path / "a64.json"))
        assert r.returncode == 0, r.stderr
    finally:
        cli("standin", "down", "qemu-aarch64")
    run = load_run(tmp_path / "a64.json")
    assert run.machine["board"] == "qemu-aarch64" and run.machine["transport"] == "ssh"
    assert run.package["board"]["triple"] == "aarch64-linux-gnu"
    assert [s.dims for s in run.sizes] == [{"batch": 1}, {"batch": 64}]
    assert all(s.stats.n >= 3 and s.unit == "ns" for s in run.sizes)
    r = cli("report", str(tmp_path / "a64.json"), "-o", str(tmp_path / "a64.html"))
    assert r.returncode == 0 and 'id="plot-latency"' in (tmp_path / "a64.html").read_text()
