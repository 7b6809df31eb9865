"""test_corpus_tools: the workload corpus's tools without a GPU or torch:
tools/gpu/corpus_tools.py (allocator history -> xseg-trace v1 lines, ids
reused, streams numbered, peak live; trace files; the peers table),
tools/gpu/corpus_table.py, tools/gpu/capture_corpus.py's parent and child
driven through a fake `torch` package, report.py's corpus table (the rows
tools/gpu-check marks "corpus":true), tools/ci/corpus-ratios against
xseg-replay (when the build has it) on synthetic traces, and, where torch
is importable, the hand-written paged-KV server on the CPU (tokens equal
to a full recompute, every block back in the pool)."""
import collections
import contextlib
import gc
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
import warnings
from pathlib import Path

import _common  # noqa: F401 (puts the package's folder on sys.path)

TOOLS = Path(__file__).resolve().parents[2]
GPU = TOOLS / "gpu"
sys.path.insert(0, str(GPU))
import corpus_tools as ct  # noqa: E402
import report  # noqa: E402 (tools/gpu/report.py)

RATIOS = TOOLS / "ci" / "corpus-ratios"


def alloc(addr, size, stream=0):
    return {"action": "alloc", "addr": addr, "size": size, "stream": stream}


def free(addr, action="free_requested"):
    return {"action": action, "addr": addr, "size": 0, "stream": 0}


def replay_binary():
    """BUILD/tools/xseg-replay/xseg-replay next to the library ctest names."""
    lib = os.environ.get("XSEG_LIBRARY")
    if not lib:
        return None
    path = Path(lib).resolve().parents[1] / "tools" / "xseg-replay" / "xseg-replay"
    return str(path) if os.access(path, os.X_OK) else None


class ConvertTest(unittest.TestCase):
    def test_ids_reused_smallest_first(self):
        conv = ct.convert([alloc(0x100, 10), alloc(0x200, 20), alloc(0x300, 30),
                           free(0x200), free(0x100), alloc(0x400, 5), alloc(0x500, 6),
                           alloc(0x600, 7)])
        self.assertEqual(conv.lines, ["a,0,10,0", "a,1,20,0", "a,2,30,0", "f,1", "f,0",
                                      "a,0,5,0", "a,1,6,0", "a,3,7,0"])
        self.assertEqual(conv.max_ids, 4)

    def test_peak_and_counts(self):
        conv = ct.convert([alloc(1, 100), alloc(2, 50), free(1), alloc(3, 40), alloc(4, 30)])
        s = conv.summary()
        self.assertEqual(s["peak_live_bytes"], 150)  # 100 + 50 beats 50 + 40 + 30
        self.assertEqual((s["events"], s["allocs"], s["frees"], s["live_at_end"]),
                         (5, 4, 1, 3))

    def test_streams_numbered_default_zero(self):
        conv = ct.convert([alloc(1, 8, stream=0x7f00aa), alloc(2, 8, stream=0),
                           alloc(3, 8, stream=0x7f00bb), alloc(4, 8, stream=0x7f00aa)])
        self.assertEqual([line.split(",")[3] for line in conv.lines], ["1", "0", "2", "1"])
        self.assertEqual(conv.summary()["streams"], 3)

    def test_free_requested_wins_over_completed(self):
        conv = ct.convert([alloc(1, 64), free(1, "free_requested"), alloc(2, 32),
                           free(1, "free_completed")])
        self.assertEqual(conv.lines, ["a,0,64,0", "f,0", "a,0,32,0"])
        self.assertEqual(conv.free_action, "free_requested")
        self.assertEqual(conv.unknown_frees, 0)

    def test_free_completed_when_no_requested(self):
        conv = ct.convert([alloc(1, 64), free(1, "free_completed")])
        self.assertEqual(conv.lines, ["a,0,64,0", "f,0"])
        self.assertEqual(conv.free_action, "free_completed")

    def test_oddities_counted(self):
        conv = ct.convert([free(0x99), {"action": "segment_alloc", "addr": 0, "size": 2 << 20},
                           {"action": "segment_alloc", "addr": 5, "size": 2 << 20},
                           {"action": "snapshot"}, alloc(7, 0), alloc(1, 10), alloc(1, 20)])
        s = conv.summary()
        self.assertEqual(s["unknown_frees"], 1)
        self.assertEqual(s["ignored_actions"], {"segment_alloc": 2, "snapshot": 1})
        self.assertEqual(s["zero_allocs"], 1)
        self.assertEqual(s["double_allocs"], 1)  # the old block is closed first
        self.assertEqual(conv.lines, ["a,0,10,0", "f,0", "a,0,20,0"])

    def test_trace_facts_agree_and_check(self):
        entries = [alloc(i, 1000 + i) for i in range(50)] + [free(i) for i in range(0, 50, 3)]
        entries += [alloc(100 + i, 7 * i + 1) for i in range(20)]
        conv = ct.convert(entries)
        facts = ct.trace_facts(conv.lines)
        self.assertEqual(facts["peak_live_bytes"], conv.peak_live)
        self.assertEqual(facts["live_at_end"], conv.live_at_end)
        with self.assertRaises(ValueError):
            ct.trace_facts(["a,0,5,0", "f,1"])
        with self.assertRaises(ValueError):
            ct.trace_facts(["a,0,5,0", "a,0,6,0"])
        with self.assertRaises(ValueError):
            ct.trace_facts(["x,1"])


class TraceFileTest(unittest.TestCase):
    def test_write_read_reproducible(self):
        lines = ["a,0,123,0", "a,1,456,1", "f,0"]
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a.csv.gz"), os.path.join(d, "b.csv.gz")
            ct.write_trace(a, ["first", "second"], lines)
            ct.write_trace(b, ["first", "second"], lines)
            self.assertEqual(Path(a).read_bytes(), Path(b).read_bytes())
            self.assertEqual(Path(a).read_bytes()[:2], b"\x1f\x8b")
            got = ct.read_trace(a)
            self.assertEqual(got[0], ct.HEADER)
            self.assertEqual(got[1:3], ["# first", "# second"])
            self.assertEqual(got[3:], lines)
            self.assertFalse(os.path.exists(a + ".tmp"))

    @unittest.skipUnless(replay_binary(), "xseg-replay not built next to XSEG_LIBRARY")
    def test_xseg_replay_reads_it(self):
        conv = ct.convert([alloc(1, 3 << 20), alloc(2, 5 << 20, stream=9), free(1),
                           alloc(3, 1 << 20)])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.csv.gz")
            ct.write_trace(path, ["test"], conv.lines)
            p = subprocess.run([replay_binary(), "-j", "-c", "backend:host", path],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = json.loads(p.stdout.splitlines()[-1])
        self.assertEqual(got["peak_live_bytes"], 8 << 20)
        self.assertEqual((got["allocs"], got["frees"], got["streams"]), (3, 1, 2))


def peers_doc():
    return {"workloads": [
        {"name": "w1", "file": "w1.csv.gz", "description": "first", "events": 1234567,
         "peak_live_bytes": 2_000_000_000,
         "native": {"peak_reserved_bytes": 2_500_000_000, "seconds": 3.25},
         "expandable": {"peak_reserved_bytes": 2_100_000_000}},
        {"name": "w2", "file": "w2.csv.gz", "description": "second", "events": None,
         "error": "RuntimeError: a | b"},
        {"name": "w3", "file": "w3.csv.gz", "description": "third"},
        {"name": "w4", "file": "w4.csv.gz", "description": "fourth", "events": 10,
         "peak_live_bytes": 1_000_000_000, "native": {"peak_reserved_bytes": 1_500_000_000,
                                                      "seconds": 1.0},
         "expandable": {"error": "boom"}}]}


class TableTest(unittest.TestCase):
    def test_rows(self):
        rows = ct.render_table(peers_doc()).splitlines()
        self.assertEqual(rows[:2], ct.TABLE_HEAD)
        self.assertEqual(rows[2], "| `w1.csv.gz` | first | 1,234,567 | 2.00 GB | 2.50 GB, 1.250 | "
                                  "2.10 GB, 1.050 | 3.2 |")
        self.assertEqual(rows[3], "| `w2.csv.gz` | second | error: RuntimeError: a / b | - | - | "
                                  "- | - |")
        self.assertEqual(rows[4], "| `w3.csv.gz` | third | - | - | - | - | - |")
        self.assertIn("| 1.50 GB, 1.500 | error | 1.0 |", rows[5])

    def test_replace_between_markers(self):
        text = "intro\n%s\nold table\n%s\nafter\n" % (ct.BEGIN, ct.END)
        out = ct.replace_table(text, "NEW\n")
        self.assertEqual(out, "intro\n%s\nNEW\n%s\nafter\n" % (ct.BEGIN, ct.END))
        with self.assertRaises(ValueError):
            ct.replace_table("no markers", "x")

    def test_corpus_table_cli_rewrites_readme(self):
        with tempfile.TemporaryDirectory() as d:
            peers, readme = os.path.join(d, "peers.json"), os.path.join(d, "README.md")
            Path(peers).write_text(json.dumps(peers_doc()))
            Path(readme).write_text("# T\n%s\nstale\n%s\ntail\n" % (ct.BEGIN, ct.END))
            p = subprocess.run([sys.executable, str(GPU / "corpus_table.py"), peers, "--readme",
                                readme], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            text = Path(readme).read_text()
            self.assertNotIn("stale", text)
            self.assertIn("| `w1.csv.gz` | first | 1,234,567 |", text)
            self.assertTrue(text.endswith("%s\ntail\n" % ct.END))
            p = subprocess.run([sys.executable, str(GPU / "corpus_table.py"), peers],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.stdout, ct.render_table(peers_doc()))


# A stand-in for torch: the allocator history as capture_corpus.py reads it.
FAKE_TORCH = '''
__version__ = "0.fake"
class version:
    cuda = "fake"
from . import cuda
'''
FAKE_CUDA = '''
import os
from . import memory
def init(): pass
def get_device_name(i=0): return "FakeGPU"
def synchronize(): pass
def current_device(): return 0
def max_memory_reserved(): return memory.STATE["peak"] * 2
def max_memory_allocated(): return memory.STATE["peak"] + 512
def memory_stats(): return {"requested_bytes.all.peak": memory.STATE["peak"]}
def memory_snapshot():
    return [{"is_expandable": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").endswith("True")}]
'''
FAKE_MEMORY = '''
import os
STATE = {"history": None, "skip": [], "live": {}, "peak": 0}
def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=0,
                           skip_actions=None):
    if skip_actions is not None and os.environ.get("FAKE_NO_SKIP"):
        raise TypeError("unexpected keyword argument 'skip_actions'")
    STATE["history"] = [] if enabled else None
    STATE["skip"] = list(skip_actions or [])
def record(action, addr, size, stream=0):
    if STATE["history"] is not None and action not in STATE["skip"]:
        STATE["history"].append({"action": action, "addr": addr, "size": size,
                                 "stream": stream, "time_us": 0})
def fake_alloc(addr, size, stream=0):
    STATE["live"][addr] = size
    STATE["peak"] = max(STATE["peak"], sum(STATE["live"].values()))
    record("alloc", addr, size, stream)
def fake_free(addr):
    size = STATE["live"].pop(addr)
    record("free_requested", addr, size)
    record("free_completed", addr, size)
def _snapshot():
    return {"segments": [], "device_traces": [list(STATE["history"] or [])]}
'''
FAKE_WORKLOADS = '''
import os
def run_serve_dynamic_kv(torch, seed):
    m = torch.cuda.memory
    m.fake_alloc(0x1000, 1000)
    m.fake_alloc(0x2000, 3000, stream=0x7f01)
    m.fake_free(0x1000)
    m.fake_alloc(0x3000, 500)
    return {"seed": seed, "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "_keep": object()}
def run_embed_bert(torch, seed):
    torch.cuda.memory.fake_alloc(0x1000, 10)
    raise RuntimeError("boom in the workload")
def run_heldout_t5_train(torch, seed):
    torch.cuda.memory.fake_alloc(0x1000, 64)
    return {"seed": seed}
'''


class CaptureTest(unittest.TestCase):
    """capture_corpus.py end to end on the fake torch: two workloads, one
    of which fails, both modes, two at a time."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def capture(self, extra_env=None, only="serve_dynamic_kv,embed_bert", which=None):
        fake = Path(self.tmp.name) / "fake"
        (fake / "torch" / "cuda").mkdir(parents=True)
        (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
        (fake / "torch" / "cuda" / "__init__.py").write_text(FAKE_CUDA)
        (fake / "torch" / "cuda" / "memory.py").write_text(FAKE_MEMORY)
        (fake / "fake_workloads.py").write_text(FAKE_WORKLOADS)
        out = Path(self.tmp.name) / "out"
        env = dict(os.environ, PYTHONPATH=str(fake), CORPUS_WORKLOADS="fake_workloads",
                   PYTORCH_CUDA_ALLOC_CONF="garbage", **(extra_env or {}))
        sel = ["--set", which] if which else ["--only", only]
        p = subprocess.run([sys.executable, str(GPU / "capture_corpus.py"), "--out", str(out),
                            "--jobs", "2", "--seed", "7"] + sel,
                           capture_output=True, text=True, env=env, timeout=120)
        return p, out

    def check_trace(self, out):
        lines = ct.read_trace(str(out / "serve_dynamic_kv.csv.gz"))
        self.assertTrue(lines[0].startswith("# xseg-trace v1"))
        self.assertEqual([x for x in lines if not x.startswith("#")],
                         ["a,0,1000,0", "a,1,3000,1", "f,0", "a,0,500,0"])
        self.assertTrue(any("ring of 8000000: nothing dropped" in x for x in lines))
        self.assertTrue(any("peak live bytes 4000" in x for x in lines))

    def test_capture(self):
        p, out = self.capture()
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)  # one workload failed
        self.check_trace(out)
        self.assertFalse((out / "embed_bert.csv.gz").exists())
        doc = json.loads((out / "peers.json").read_text())
        w = {x["name"]: x for x in doc["workloads"]}
        good = w["serve_dynamic_kv"]
        self.assertEqual((good["events"], good["peak_live_bytes"], good["live_at_end"]),
                         (4, 4000, 2))
        self.assertTrue(good["peak_live_equals_requested_peak"])
        self.assertEqual(good["native"]["peak_reserved_bytes"], 8000)
        self.assertAlmostEqual(good["native_ratio"], 2.0)
        self.assertEqual(good["native"]["alloc_conf"], "")  # the caller's conf is dropped
        self.assertEqual(good["expandable"]["alloc_conf"], "expandable_segments:True")
        self.assertTrue(good["expandable"]["expandable_segments_seen"])
        self.assertEqual(good["info"], {"seed": 7, "conf": ""})
        self.assertNotIn("error", good)
        bad = w["embed_bert"]
        self.assertIsNone(bad["events"])
        self.assertIn("boom in the workload", bad["error"])
        self.assertIn("boom in the workload", bad["expandable"]["error"])
        self.assertEqual(doc["gpu"], "FakeGPU")
        self.assertIn("| `serve_dynamic_kv.csv.gz` |", p.stdout)

    def test_capture_without_skip_actions(self):
        p, out = self.capture({"FAKE_NO_SKIP": "1"}, only="serve_dynamic_kv")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.check_trace(out)  # free_completed recorded too, and left out

    def test_heldout_set(self):
        """--set heldout runs every held-out workload and no corpus one; the
        trace says which set it is from."""
        p, out = self.capture(which="heldout")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)  # three have no fake
        doc = json.loads((out / "peers.json").read_text())
        names = [w["name"] for w in doc["workloads"]]
        self.assertEqual(len(names), 4)
        self.assertTrue(all(n.startswith("heldout_") for n in names), names)
        lines = ct.read_trace(str(out / "heldout_t5_train.csv.gz"))
        self.assertTrue(any(x.startswith("# held-out workload heldout_t5_train:")
                            for x in lines), lines[:3])
        self.assertEqual([x for x in lines if not x.startswith("#")], ["a,0,64,0"])
        self.assertFalse((out / "serve_dynamic_kv.csv.gz").exists())

    def test_list_and_bad_name(self):
        p = subprocess.run([sys.executable, str(GPU / "capture_corpus.py"), "--list"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0)
        self.assertGreaterEqual(len(p.stdout.splitlines()), 8)
        sets = collections.Counter(line.split()[1] for line in p.stdout.splitlines())
        self.assertEqual((sets["corpus"], sets["heldout"]), (9, 4))
        p = subprocess.run([sys.executable, str(GPU / "capture_corpus.py"), "--out",
                            self.tmp.name, "--only", "nope"], capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("unknown workload", p.stderr)


def replay_row(alloc, trace, live, own, secs, corpus=False, **extra):
    r = {"alloc": alloc, "test": "replay", "trace": trace, "events": 100, "events_done": 100,
         "partial": False, "replay_s": secs, "replay_s_full": secs, "sampled_in_timed": False,
         "peak_live_bytes": live, "peak_device_bytes": own - 1000, "own_peak_bytes": own,
         "ooms": 0}
    if corpus:
        r["corpus"] = True
    r.update(extra)
    return r


class ReportTest(unittest.TestCase):
    """report.py: corpus rows get their own table and targets and stay out
    of the shared traces' tables."""

    def rows(self):
        g = 10 ** 9
        return [replay_row("xseg", "gpt2_train_s1.csv.gz", g, int(1.01 * g), 0.4),
                replay_row("xseg", "embed_bert.csv.gz", 2 * g, int(2.01 * g), 0.20, True,
                           drv_create=12, drv_map=12, drv_unmap=0, drv_release=3),
                replay_row("async", "embed_bert.csv.gz", 2 * g, int(2.6 * g), 0.90, True),
                replay_row("torch", "embed_bert.csv.gz", 2 * g, int(2.4 * g), 0.25, True),
                replay_row("torch-exp", "embed_bert.csv.gz", 2 * g, int(2.2 * g), 0.30, True),
                replay_row("xseg", "prefill_long.csv.gz", g, int(1.05 * g), 0.5, True,
                           drv_map=0)]

    def test_corpus_section(self):
        md = report.markdown(self.rows(), {"date": "d", "command": "c"}, [])
        corpus = md.split("## Workload corpus")[1]
        self.assertNotIn("embed_bert", md.split("## Workload corpus")[0])
        self.assertIn("| embed_bert | xseg | 2.000 | 2.010 | 1.005 | 0.200 | "
                      "create 12, map 12, release 3 | 0 |", corpus)
        self.assertIn("| embed_bert | PyTorch native | 2.000 | 2.400 | 1.200 | 0.250 | - | 0 |",
                      corpus)
        self.assertIn("| prefill_long | xseg | 1.000 | 1.050 | 1.050 | 0.500 | none | 0 |", corpus)
        self.assertIn("| prefill_long | cudaMallocAsync | n/a |", corpus)
        self.assertIn("| embed_bert | 1.005: met | met (1.100, PyTorch expandable) | "
                      "met (0.200 s vs 0.250 s) |", corpus)
        self.assertIn("| prefill_long | 1.050: NOT met | n/a | n/a |", corpus)
        self.assertIn("| xseg | gpt2_train_s1 |", md)  # the shared table keeps its trace

    def test_no_corpus_no_section(self):
        md = report.markdown(self.rows()[:1], {"date": "d", "command": "c"}, [])
        self.assertNotIn("Workload corpus", md)

    def test_main_writes_everything(self):
        with tempfile.TemporaryDirectory() as d:
            raw = os.path.join(d, "results.jsonl")
            Path(raw).write_text("".join(json.dumps(r) + "\n" for r in self.rows()))
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)  # report.py's own files
                report.main(["report.py", raw, os.path.join(d, "none.tsv"),
                             os.path.join(d, "none.txt"), d, "tools/gpu-check", "OUT"])
                gc.collect()
            self.assertIn("Corpus targets", Path(d, "tables.md").read_text())
            self.assertIn("corpus", Path(d, "results.csv").read_text().splitlines()[0])


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 (any broken install counts as none)
        return False


def math_sdpa(torch):
    """scaled_dot_product_attention for a torch without it (1.x)."""
    def sdpa(q, k, v, attn_mask=None, is_causal=False):
        s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if is_causal:
            n, m = s.shape[-2:]
            s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).tril().logical_not(),
                              float("-inf"))
        if attn_mask is not None:
            s = s.masked_fill(attn_mask.logical_not(), float("-inf"))
        return s.softmax(-1) @ v
    return sdpa


@unittest.skipUnless(have_torch(), "torch is not importable")
class PagedServerTest(unittest.TestCase):
    """corpus_workloads' vLLM-like server, tiny, on the CPU in fp32."""

    D = dict(hidden=32, inter=64, layers=2, heads=4, kv_heads=2, vocab=50, block=4,
             blocks=256, max_running=3, requests=7, max_steps=500, prefills_per_step=2,
             prompt=(3, 13), new=(2, 9))

    def setUp(self):
        import torch
        self.torch = torch
        self.patched = not hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if self.patched:
            torch.nn.functional.scaled_dot_product_attention = math_sdpa(torch)

    def tearDown(self):
        if self.patched:
            del self.torch.nn.functional.scaled_dot_product_attention

    def reference(self, lm, seed, rid, plen, out):
        """The tokens again, each from the whole sequence (no cache read),
        written to blocks the server never used."""
        import corpus_workloads as cw
        torch, b = self.torch, self.D["block"]
        seq = cw.token_ids(torch, seed + 1000 + rid, (plen,), self.D["vocab"], device="cpu")
        got = []
        for _ in out:
            n = seq.shape[0]
            slots = torch.arange(200 * b, 200 * b + n)
            x = lm.forward(seq, torch.arange(n), slots, lm.attend_prefill)
            got.append(lm.next_tokens(x[-1:])[0])
            seq = torch.cat([seq, torch.tensor([got[-1]])])
        return got

    def test_tokens_match_full_recompute(self):
        import corpus_workloads as cw
        torch = self.torch
        lm = cw.PagedLM(torch, 5, self.D, dev="cpu", dtype=torch.float32)
        server = cw.PagedServer(torch, lm, 5)
        with torch.no_grad():
            stats = server.serve()
            self.assertEqual(stats["unfinished"], 0)
            self.assertEqual(stats["prefills"], self.D["requests"])
            self.assertEqual(stats["max_batch"], self.D["max_running"])
            self.assertEqual(sorted(server.free), list(range(self.D["blocks"])))
            self.assertEqual(len(server.done), self.D["requests"])
            for r in server.done:
                plen, new = server.reqs[r["id"]]
                self.assertEqual(len(r["out"]), new)
                self.assertEqual(r["out"], self.reference(lm, 5, r["id"], plen, r["out"]),
                                 "request %d" % r["id"])
        self.assertEqual(stats["decoded_tokens"], sum(n for _, n in server.reqs) - 7)


@unittest.skipUnless(replay_binary(), "xseg-replay not built next to XSEG_LIBRARY")
class CorpusRatiosTest(unittest.TestCase):
    """tools/ci/corpus-ratios on synthetic traces in a temporary folder."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        # many 1-7 MB blocks, half freed: xseg maps close to what is live
        lines = ["a,%d,%d,0" % (i, (i % 7 + 1) * 1000003) for i in range(200)]
        lines += ["f,%d" % i for i in range(0, 200, 2)]
        ct.write_trace(str(self.dir / "many.csv.gz"), ["synthetic"], lines)
        # 3 bytes next to 5 MB: the page rounding alone keeps the ratio above 1
        ct.write_trace(str(self.dir / "tiny.csv.gz"), ["synthetic"],
                       ["a,0,5000000,0", "a,1,3,1", "f,0", "a,0,7000000,0"])

    def tearDown(self):
        self.tmp.cleanup()

    def run_ratios(self, thresholds, *extra):
        (self.dir / "thresholds.tsv").write_text(textwrap.dedent(thresholds))
        return subprocess.run([sys.executable, str(RATIOS), "--dir", str(self.dir), "--replay",
                               replay_binary(), *extra], capture_output=True, text=True,
                              timeout=300)

    def test_within_thresholds(self):
        p = self.run_ratios("# comment\nmany.csv.gz\t1.5\ntiny.csv.gz 5  # generous\n")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("2 passed, 0 failed", p.stdout)

    def test_over_threshold_fails(self):
        p = self.run_ratios("many.csv.gz 1.5\ntiny.csv.gz 0.99\n")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("OVER", p.stdout)
        self.assertIn("1 passed, 1 failed", p.stdout)

    def test_missing_row_fails(self):
        p = self.run_ratios("many.csv.gz 1.5\nother.csv.gz 1.0\n")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("NO THRESHOLD", p.stdout)
        self.assertIn("row for other.csv.gz", p.stdout)

    def test_bad_row_is_a_usage_error(self):
        p = self.run_ratios("many.csv.gz one\n")
        self.assertEqual(p.returncode, 2)

    def test_suggest_passes_its_own_check(self):
        p = self.run_ratios("", "--suggest", "0.001")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.run_ratios(p.stdout)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_no_traces_skips(self):
        empty = self.dir / "empty"
        empty.mkdir()
        p = subprocess.run([sys.executable, str(RATIOS), "--dir", str(empty), "--replay",
                            replay_binary()], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 77, p.stdout + p.stderr)


FAKE_BENCH = """#!/usr/bin/env python3
# a stand-in for tools/gpu/bench: one replay line from the trace's name, the
# allocator and XSEG_BENCH_CONF; a trace named fail*.csv.gz exits 1
import json, os, sys
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
name = os.path.basename(a["--trace"])
if name.startswith("fail"):
    sys.exit("bench: cannot read " + name)
conf = os.environ.get("XSEG_BENCH_CONF", "") if a["--alloc"] == "xseg" else "torch"
if "expected_peak:" in conf:  # corpus_rounds put the trace's peak there: echo it
    print(json.dumps({"alloc": "xseg", "test": "replay", "replay_s": 0.3,
                      "peak_live_bytes": 1000, "own_peak_bytes": 1005, "peak_device_bytes": 1005,
                      "ratio": 1.005, "conf_seen": conf}))
    sys.exit(0)
slow = {"torch": 0.1, "backend:cuda": 0.4, "backend:cuda,x:1": 0.2}[conf]
ratio = {"torch": 1.5, "backend:cuda": 1.008, "backend:cuda,x:1": 1.02}[conf]
if name.startswith("b") and conf != "torch":
    slow /= 8  # trace b: xseg is faster than PyTorch there
# the sampled drop (bench's "ratio") below the own peak on trace c: the
# table must show the larger
sampled = ratio - 0.1 if name.startswith("c") else ratio
print(json.dumps({"alloc": a["--alloc"], "test": "replay", "replay_s": slow,
                  "peak_live_bytes": 1000, "own_peak_bytes": int(ratio * 1000),
                  "peak_device_bytes": sampled * 1000, "ratio": sampled}))
"""


class CorpusRounds(unittest.TestCase):
    """tools/gpu/corpus_rounds.py with a stand-in bench: every mode of every
    trace in every round, the table's medians, ratios, counts and geometric
    mean, and a failed replay reported, not dropped."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.bench = self.dir / "bench"
        self.bench.write_text(FAKE_BENCH)
        self.bench.chmod(0o755)
        self.out = self.dir / "out.jsonl"

    def tearDown(self):
        self.tmp.cleanup()

    def run_rounds(self, *traces, confs=("backend:cuda", "backend:cuda,x:1"), rounds=2):
        cmd = [sys.executable, str(GPU / "corpus_rounds.py"), "run", "--bench", str(self.bench),
               "--out", str(self.out), "--rounds", str(rounds)]
        for c in confs:
            cmd += ["--conf", c]
        return subprocess.run(cmd + [str(self.dir / t) for t in traces], capture_output=True,
                              text=True, timeout=120)

    def test_rounds_and_table(self):
        p = self.run_rounds("a.csv.gz", "b.csv.gz")
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = [json.loads(l) for l in self.out.read_text().splitlines()]
        self.assertEqual(len(rows), 2 * 2 * 3)  # rounds x traces x (torch + 2 confs)
        self.assertEqual({(r["round"], r["tr"], r["conf"]) for r in rows},
                         {(r, t, c) for r in (1, 2) for t in ("a", "b")
                          for c in ("native", "backend:cuda", "backend:cuda,x:1")})
        self.assertIn("| a | 1.5000, 0.100 (0.100-0.100) n=2 | 1.0080, 0.400 (0.400-0.400) n=2 "
                      "| 1.0200, 0.200 (0.200-0.200) n=2 |", p.stdout)
        self.assertIn("- `backend:cuda`: ratio <= 1.01 on 2 of 2 traces; replay time <= PyTorch "
                      "native's on 1 (b); geometric mean of the medians against "
                      "`backend:cuda`: 1.000", p.stdout)
        self.assertIn("- `backend:cuda,x:1`: ratio <= 1.01 on 0 of 2 traces; replay time <= "
                      "PyTorch native's on 1 (b); geometric mean of the medians against "
                      "`backend:cuda`: 0.500", p.stdout)
        t = subprocess.run([sys.executable, str(GPU / "corpus_rounds.py"), "table",
                            str(self.out)], capture_output=True, text=True, timeout=60)
        self.assertEqual(t.stdout.strip(), p.stdout.strip())

    def test_the_larger_of_own_peak_and_sampled_drop(self):
        p = self.run_rounds("c.csv.gz", confs=("backend:cuda",), rounds=1)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("| c | 1.5000, 0.100 (0.100-0.100) n=1 | 1.0080, 0.400 (0.400-0.400) "
                      "n=1 |", p.stdout)
        self.assertIn("ratio <= 1.01 on 1 of 1 traces", p.stdout)

    def test_expected_peak_of_each_trace(self):
        trace = self.dir / "d.csv.gz"
        ct.write_trace(str(trace), [], ["a,1,100,0", "a,2,300,0", "f,1", "a,3,50,0",
                                                  "f,2", "f,3"])
        p = self.run_rounds("d.csv.gz", confs=("backend:cuda,expected_peak:trace",), rounds=1)
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = [json.loads(l) for l in self.out.read_text().splitlines()]
        xs = [r for r in rows if r["conf"] != "native"]
        self.assertEqual(len(xs), 1)
        self.assertEqual(xs[0]["conf"], "backend:cuda,expected_peak:trace")  # the table's name
        self.assertEqual(xs[0]["conf_seen"], "backend:cuda,expected_peak:400")  # the trace's peak
        p = self.run_rounds("nothere.csv.gz", confs=("backend:cuda,expected_peak:trace",),
                            rounds=1)
        self.assertIn("cannot read the peak of", self.out.read_text())

    def test_failed_replay_is_reported(self):
        p = self.run_rounds("a.csv.gz", "fail.csv.gz", confs=("backend:cuda",), rounds=1)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("| fail | - | - |", p.stdout)
        self.assertIn("- 2 replays failed, first: fail `native`: exit 1: bench: cannot read "
                      "fail.csv.gz", p.stdout)


if __name__ == "__main__":
    unittest.main()
