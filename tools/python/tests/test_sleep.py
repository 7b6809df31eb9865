"""test_sleep: tags, sleep and wake from Python on the host backend (no GPU):
xseg.tag nesting, threads and exceptions; tag registration errors; the
ctypes mirror of struct xseg_tag_stats; sleep (backup and discard) and wake
of allocations made through the C API on a private host allocator, their
contents checked through ctypes; state errors with their messages; the
public xseg.sleep / wake_up / tag_stats / memory_stats keys and the vLLM and
SGLang adapters on the process-wide allocator, in fresh interpreters (so
that this process's allocator, which other tests read, never gets tags)."""
import ctypes
import json
import os
import threading
import unittest

from _common import run_py

import xseg
from xseg import _lib, _sleep
from xseg._sleep import ERR_ASLEEP, ERR_STATE, TagStats
from xseg.adapters import TorchMemorySaverAdapter, VllmSleepAllocator

STATS_FIELDS = {"id", "live_bytes", "live_peak_bytes", "mapped_bytes", "mapped_peak_bytes",
                "sleeping_bytes", "backup_bytes", "asleep", "mode", "sleeps", "wakes",
                "last_sleep_s", "last_wake_s"}
SIZES = (1000, 100_000, 3 << 20, 40 << 20)


def declare(lib):
    """The C API calls the tests make on private allocators."""
    p = ctypes.c_void_p
    lib.xseg_create.restype = ctypes.c_int
    lib.xseg_create.argtypes = [ctypes.POINTER(p), ctypes.c_int, ctypes.c_char_p]
    lib.xseg_destroy.restype = ctypes.c_int
    lib.xseg_destroy.argtypes = [p]
    lib.xseg_free.restype = ctypes.c_int
    lib.xseg_free.argtypes = [p, p]
    return lib


class TagStackTest(unittest.TestCase):
    def test_nesting(self):
        self.assertEqual(xseg.current_tag(), "default")
        with xseg.tag("t_a") as a:
            self.assertEqual(xseg.current_tag(), "t_a")
            self.assertEqual(a.id, _sleep.tag_id("t_a"))
            with xseg.tag("t_b"):
                self.assertEqual(xseg.current_tag(), "t_b")
                with xseg.tag("t_a"):
                    self.assertEqual(xseg.current_tag(), "t_a")
                self.assertEqual(xseg.current_tag(), "t_b")
            self.assertEqual(xseg.current_tag(), "t_a")
        self.assertEqual(xseg.current_tag(), "default")

    def test_exception_pops(self):
        with self.assertRaises(KeyError):
            with xseg.tag("t_a"):
                try:
                    with xseg.tag("t_b"):
                        raise ValueError("inner")
                except ValueError:
                    self.assertEqual(xseg.current_tag(), "t_a")
                raise KeyError("outer")
        self.assertEqual(xseg.current_tag(), "default")

    def test_decorator(self):
        @xseg.tag("t_a")
        def inside(fail):
            if fail:
                raise RuntimeError("x")
            return xseg.current_tag()

        self.assertEqual(inside(False), "t_a")
        self.assertEqual(inside(False), "t_a")  # reusable
        with self.assertRaises(RuntimeError):
            inside(True)
        self.assertEqual(xseg.current_tag(), "default")

    def test_per_thread(self):
        seen = {}
        with xseg.tag("t_a"):
            t = threading.Thread(target=lambda: seen.setdefault("other", xseg.current_tag()))
            t.start()
            t.join()
            self.assertEqual(xseg.current_tag(), "t_a")
        self.assertEqual(seen["other"], "default")

    def test_registration(self):
        self.assertEqual(_sleep.tag_id("default"), 0)
        a = _sleep.tag_id("t_a")
        self.assertEqual(_sleep.tag_id("t_a"), a)
        self.assertGreater(a, 0)
        self.assertEqual(_sleep.tag_name(a), "t_a")
        self.assertIn("t_a", _sleep.registered())
        self.assertEqual(_sleep.registered()[0], "default")

    def test_bad_names(self):
        for bad in ("", "has space", "x" * 32, "semi;colon"):
            with self.assertRaises(xseg.XsegError) as cm:
                xseg.tag(bad)
            self.assertIn("is not 1 to 31 characters", str(cm.exception), bad)
            self.assertEqual(cm.exception.status, 1)  # XSEG_ERR_INVALID_ARG
        xseg.tag("x" * 31)  # the longest name
        with self.assertRaises(ValueError) as cm:
            xseg.tag("graphs")
        self.assertIn("CUDA-graph pools", str(cm.exception))
        with self.assertRaises(TypeError):
            xseg.tag(2.5)
        unused = len(_sleep.registered())
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.tag(unused)
        self.assertIn(f"tag {unused} is not registered", str(cm.exception))
        self.assertEqual(xseg.current_tag(), "default")

    def test_pop_without_push(self):
        with self.assertRaises(xseg.XsegError) as cm:
            _sleep.check(_sleep.fn("xseg_tag_pop")(), "xseg_tag_pop")
        self.assertEqual(cm.exception.status, ERR_STATE)
        self.assertIn("pop without push", str(cm.exception))

    def test_unbalanced_block(self):
        extra = _sleep.tag_id("t_b")
        with self.assertRaises(xseg.XsegError) as cm:
            with xseg.tag("t_a"):
                _sleep.fn("xseg_tag_push")(extra)
        self.assertIn("unbalanced", str(cm.exception))
        self.assertIn("'t_b'", str(cm.exception))
        _sleep.fn("xseg_tag_pop")()  # the block's own push, left by the extra one
        self.assertEqual(xseg.current_tag(), "default")

    def test_registry_full(self):
        r = run_py("import xseg\nfrom xseg import _sleep\nn = 0\ntry:\n"
                   "    for i in range(64):\n        _sleep.tag_id(f'full{i}'); n += 1\n"
                   "except xseg.XsegError as e:\n    print(n, len(_sleep.registered()), e)\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split()[:2], [str(_sleep.MAX_TAGS - 1), str(_sleep.MAX_TAGS)])
        self.assertIn('no room for tag "full31"', r.stdout)

    def test_missing_function_is_named(self):
        with self.assertRaises(xseg.XsegError) as cm:
            _sleep.fn("xseg_no_such_call")
        self.assertIn("has no xseg_no_such_call()", str(cm.exception))
        self.assertIn("newer libxseg", str(cm.exception))


class PlanTest(unittest.TestCase):
    def test_modes(self):
        self.assertEqual(_sleep.plan(), {"weights": 1})
        self.assertEqual(_sleep.plan("kv"), {"kv": 1})
        self.assertEqual(_sleep.plan(("w", "k"), "backup"), {"w": 1, "k": 1})
        self.assertEqual(_sleep.plan(mode={"w": "backup", "k": "discard"}), {"w": 1, "k": 0})
        self.assertEqual(_sleep.plan(["w"], {"w": "backup", "k": "discard"}), {"w": 1})

    def test_bad_plans(self):
        with self.assertRaises(ValueError) as cm:
            _sleep.plan(("w",), "keep")
        self.assertIn('neither "discard" nor "backup"', str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            _sleep.plan(("w", "k"), {"w": "backup"})
        self.assertIn("no mode given for tag(s) ['k']", str(cm.exception))
        with self.assertRaises(ValueError):
            _sleep.plan(("w", "w"))
        with self.assertRaises(ValueError):
            _sleep.plan(())


class StructTest(unittest.TestCase):
    def test_library_fills_exactly_our_size(self):
        lib = declare(_lib.load())
        xs = ctypes.c_void_p()
        self.assertEqual(lib.xseg_create(ctypes.byref(xs), 0, b"backend:host"), 0,
                         _lib.last_error())
        try:
            t = _sleep.tag_id("p_w")
            big = ctypes.create_string_buffer(ctypes.sizeof(TagStats) + 256)
            s = TagStats.from_buffer(big)
            s.size = len(big)
            self.assertEqual(_sleep.fn("xseg_tag_stats_get")(xs, t, ctypes.byref(s)), 0,
                             _lib.last_error())
            self.assertEqual(s.size, ctypes.sizeof(TagStats),
                             "sizeof(struct xseg_tag_stats) in C differs from the mirror")
            self.assertEqual(s.tag, t)
            self.assertEqual(s.name, b"p_w")
            self.assertEqual(ctypes.sizeof(TagStats), 144)
            self.assertEqual(TagStats.live_bytes.offset, 48)
            s.size = 4
            with self.assertRaises(xseg.XsegError) as cm:
                _sleep.check(_sleep.fn("xseg_tag_stats_get")(xs, t, ctypes.byref(s)), "get")
            self.assertIn("sizeof(xseg_tag_stats) (144)", str(cm.exception))
        finally:
            lib.xseg_destroy(xs)


class PrivateAllocatorTest(unittest.TestCase):
    """Sleep and wake through the C API on an allocator of the test's own."""

    def setUp(self):
        self.lib = declare(_lib.load())
        self.xs = ctypes.c_void_p()
        st = self.lib.xseg_create(ctypes.byref(self.xs), 0, b"backend:host,host_capacity:1GB")
        self.assertEqual(st, 0, _lib.last_error())

    def tearDown(self):
        self.lib.xseg_destroy(self.xs)

    def alloc(self, tag, size):
        p = ctypes.c_void_p()
        _sleep.check(_sleep.fn("xseg_alloc_tagged")(self.xs, size, None, _sleep.tag_id(tag),
                                                    ctypes.byref(p)), f"alloc {size}")
        return p.value

    def fill(self, tag):
        blocks = {}
        for n in SIZES:
            p = self.alloc(tag, n)
            data = os.urandom(n)
            ctypes.memmove(p, data, n)
            blocks[p] = data
        return blocks

    def stats(self, tag):
        return _sleep.stats_allocator(self.xs)[tag]

    def test_backup_round_trip(self):
        blocks = self.fill("p_w")
        other = self.alloc("p_k", 4096)
        s = self.stats("p_w")
        self.assertFalse(s["asleep"])
        self.assertGreaterEqual(s["live_bytes"], sum(SIZES))
        self.assertGreaterEqual(s["mapped_bytes"], s["live_bytes"])
        live = s["live_bytes"]

        self.assertEqual(_sleep.sleep_allocator(self.xs, {"p_w": 1}), ("p_w",))
        s = self.stats("p_w")
        self.assertTrue(s["asleep"])
        self.assertEqual(s["mode"], "backup")
        self.assertEqual(s["mapped_bytes"], 0)
        self.assertEqual(s["live_bytes"], live)
        self.assertGreaterEqual(s["sleeping_bytes"], live)  # slabs count whole
        self.assertLess(s["sleeping_bytes"], live + (2 << 20))
        self.assertGreaterEqual(s["backup_bytes"], sum(SIZES))
        self.assertEqual((s["sleeps"], s["wakes"]), (1, 0))
        self.assertGreater(s["last_sleep_s"], 0)
        self.assertFalse(self.stats("p_k")["asleep"])

        with self.assertRaises(xseg.XsegError) as cm:  # its allocations fail meanwhile
            self.alloc("p_w", 1 << 20)
        self.assertEqual(cm.exception.status, ERR_ASLEEP)
        ctypes.memmove(other, b"awake", 5)  # other tags' memory is untouched
        self.alloc("p_k", 1 << 20)
        gone = list(blocks)[1]  # a free while asleep drops the block
        self.assertEqual(self.lib.xseg_free(self.xs, gone), 0, _lib.last_error())
        del blocks[gone]

        _sleep.wake_allocator(self.xs, ["p_w"])
        s = self.stats("p_w")
        self.assertFalse(s["asleep"])
        self.assertEqual((s["sleeps"], s["wakes"]), (1, 1))
        self.assertEqual(s["sleeping_bytes"], 0)
        self.assertGreater(s["mapped_bytes"], 0)
        for p, data in blocks.items():
            self.assertEqual(ctypes.string_at(p, len(data)), data, f"block {p:#x}")
            tag = ctypes.c_int()
            _sleep.check(_sleep.fn("xseg_tag_of")(self.xs, p, ctypes.byref(tag)), "tag_of")
            self.assertEqual(tag.value, _sleep.tag_id("p_w"))
        self.assertEqual(ctypes.string_at(other, 5), b"awake")
        self.alloc("p_w", 1 << 20)  # allocations work again

    def test_discard(self):
        blocks = self.fill("p_k")
        _sleep.sleep_allocator(self.xs, _sleep.plan("p_k", "discard"))
        s = self.stats("p_k")
        self.assertEqual((s["asleep"], s["mode"], s["backup_bytes"]), (True, "discard", 0))
        self.assertEqual(s["mapped_bytes"], 0)
        _sleep.wake_allocator(self.xs, ["p_k"])
        for p, data in blocks.items():
            got = ctypes.string_at(p, len(data))
            self.assertNotEqual(got, data)
            self.assertEqual(got, bytes(len(data)), "the host backend maps fresh zeroed memory")

    def test_state_errors(self):
        self.alloc("p_w", 1 << 20)
        with self.assertRaises(xseg.XsegError) as cm:
            _sleep.wake_allocator(self.xs, ["p_w"])
        self.assertEqual(cm.exception.status, ERR_STATE)
        self.assertIn('("p_w") is awake', str(cm.exception))
        self.assertIn("xseg_wake(['p_w'])", str(cm.exception))
        _sleep.sleep_allocator(self.xs, {"p_w": 0})
        with self.assertRaises(xseg.XsegError) as cm:
            _sleep.sleep_allocator(self.xs, {"p_w": 1})
        self.assertEqual(cm.exception.status, ERR_STATE)
        self.assertIn('("p_w") is asleep already', str(cm.exception))
        self.assertEqual(_sleep.asleep_tags(self.xs), ["p_w"])
        _sleep.wake_allocator(self.xs, ["p_w"])
        self.assertEqual(_sleep.asleep_tags(self.xs), [])

    def test_mode_dict_is_all_or_nothing(self):
        w = self.fill("p_w")
        self.alloc("p_k", 1 << 20)
        done = _sleep.sleep_allocator(self.xs, _sleep.plan(mode={"p_w": "backup",
                                                                 "p_k": "discard"}))
        self.assertEqual(done, ("p_w", "p_k"))
        self.assertEqual(self.stats("p_w")["mode"], "backup")
        self.assertEqual(self.stats("p_k")["mode"], "discard")
        _sleep.wake_allocator(self.xs, ["p_w"])
        # p_k is still asleep: the discard group fails, the backup group wakes again
        with self.assertRaises(xseg.XsegError) as cm:
            _sleep.sleep_allocator(self.xs, {"p_w": 1, "p_k": 0})
        self.assertIn("woken again", str(cm.exception))
        self.assertFalse(self.stats("p_w")["asleep"])
        self.assertEqual(self.stats("p_w")["sleeps"], 2)
        for p, data in w.items():
            self.assertEqual(ctypes.string_at(p, len(data)), data)

    def test_graphs_needs_pytorch(self):
        with self.assertRaises(xseg.XsegError) as cm:
            _sleep.sleep_allocator(self.xs, {"graphs": 0})
        self.assertIn("xseg.install()", str(cm.exception))

    def test_stats_fields(self):
        _sleep.tag_id("t_b")  # registered, never used by this allocator
        stats = _sleep.stats_allocator(self.xs)
        self.assertEqual(list(stats), _sleep.registered())
        for name, s in stats.items():
            self.assertEqual(set(s), STATS_FIELDS, name)
        self.assertEqual(stats["default"]["id"], 0)
        unused = stats["t_b"]
        self.assertEqual(unused, dict(unused, live_bytes=0, mapped_bytes=0, sleeps=0,
                                      asleep=False, mode="discard", last_sleep_s=0.0))
        p = self.alloc("p_w", 5 << 20)
        s = _sleep.stats_allocator(self.xs)["p_w"]
        self.assertGreaterEqual(s["live_bytes"], 5 << 20)
        self.assertEqual(s["live_peak_bytes"], s["live_bytes"])
        self.assertGreaterEqual(s["mapped_peak_bytes"], 5 << 20)
        self.assertEqual(self.lib.xseg_free(self.xs, p), 0)
        s = _sleep.stats_allocator(self.xs)["p_w"]
        self.assertGreaterEqual(s["live_peak_bytes"], 5 << 20)

    # A block freed into this thread's cache is not live (xsleep_fill goes
    # through xseg_fill_stats, which takes the thread caches' part off).
    def test_live_bytes_drop_on_free(self):
        p = self.alloc("p_w", 5 << 20)
        self.assertEqual(self.lib.xseg_free(self.xs, p), 0)
        self.assertEqual(_sleep.stats_allocator(self.xs)["p_w"]["live_bytes"], 0)


# The process-wide allocator (xseg_default) in a fresh interpreter: its
# allocations go through xseg_torch_alloc, which takes the thread's tag.
PUBLIC = r"""
import ctypes, json, os, xseg
from xseg import _lib, _sleep, _stats
lib = _lib.load()
out = {}
def alloc(n):
    p = lib.xseg_torch_alloc(n, 0, None)
    assert p, _lib.last_error()
    data = os.urandom(n)
    ctypes.memmove(p, data, n)
    return p, data
def same(blocks):
    return all(ctypes.string_at(p, len(d)) == d for p, d in blocks)
def tag_of(p):
    t = ctypes.c_int(-1)
    _sleep.check(_sleep.fn("xseg_tag_of")(_stats.allocator(0), p, ctypes.byref(t)), "tag_of")
    return _sleep.tag_name(t.value)
"""

PUBLIC_ROUND_TRIP = PUBLIC + r"""
with xseg.tag("weights"):
    w = [alloc(n) for n in (1000, 3 << 20, 9 << 20)]
with xseg.tag("kv"):
    k = [alloc(n) for n in (4 << 20,)]
u = alloc(4096)
out["tags"] = [tag_of(w[0][0]), tag_of(k[0][0]), tag_of(u[0])]
out["slept"] = xseg.sleep(mode={"weights": "backup", "kv": "discard"})
st = xseg.tag_stats()
out["stats"] = {t: st[t] for t in ("weights", "kv")}
out["keys"] = {k_: v for k_, v in xseg.memory_stats(0).items() if k_.startswith("tags.")}
try:
    with xseg.tag("kv"):
        lib.xseg_torch_alloc(1 << 20, 0, None)
    out["asleep_alloc"] = _lib.last_error()
except Exception as e:
    out["asleep_alloc"] = repr(e)
try:
    xseg.sleep("weights", "backup")
except xseg.XsegError as e:
    out["twice"] = [e.status, str(e)]
out["untagged_same"] = same([u])
out["woken"] = xseg.wake_up()
out["again"] = xseg.wake_up()
out["weights_same"] = same(w)
out["kv_same"] = same(k)
try:
    xseg.wake_up(["weights"])
except xseg.XsegError as e:
    out["wake_awake"] = [e.status, str(e)]
out["after"] = {t: xseg.tag_stats()[t]["asleep"] for t in ("weights", "kv")}
out["default_sleep"] = xseg.sleep(device="cuda:0")
out["woken2"] = xseg.wake_up("weights", device=0)
out["weights_same2"] = same(w)  # the default mode is backup: nothing lost
print(json.dumps(out))
"""

# The PyTorch path (xseg_torch_sleep / xseg_torch_wake, "graphs" included)
# driven on the host backend: only the check for an installed xseg is faked.
TORCH_PATH = PUBLIC + r"""
if not hasattr(lib, "xseg_torch_sleep"):
    print(json.dumps({"skip": "no xseg_torch_sleep in " + _lib.path()}))
    raise SystemExit
_sleep._torch_mode = lambda: True
with xseg.tag("weights"):
    w = [alloc(n) for n in (1000, 5 << 20)]
out["slept"] = xseg.sleep(mode={"weights": "backup", "graphs": "discard"})
out["asleep"] = xseg.tag_stats()["weights"]["asleep"]
out["woken"] = xseg.wake_up()
out["same"] = same(w)
try:
    xseg.wake_up("weights")
except xseg.XsegError as e:
    out["wake_awake"] = str(e)
print(json.dumps(out))
"""


def run_json(test, code):
    r = run_py(code)
    test.assertEqual(r.returncode, 0, r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


class PublicApiTest(unittest.TestCase):
    def test_round_trip(self):
        o = run_json(self, PUBLIC_ROUND_TRIP)
        self.assertEqual(o["tags"], ["weights", "kv", "default"])
        self.assertEqual(o["slept"], ["weights", "kv"])  # backup group first
        w, k = o["stats"]["weights"], o["stats"]["kv"]
        self.assertEqual((w["asleep"], w["mode"], w["mapped_bytes"]), (True, "backup", 0))
        self.assertEqual((k["asleep"], k["mode"], k["backup_bytes"]), (True, "discard", 0))
        self.assertGreaterEqual(w["backup_bytes"], 1000 + (3 << 20) + (9 << 20))
        self.assertGreaterEqual(w["sleeping_bytes"], w["live_bytes"])  # slabs count whole
        keys = o["keys"]
        self.assertEqual(keys["tags.weights.asleep"], 1)
        self.assertEqual(keys["tags.weights.mode"], 1)
        self.assertEqual(keys["tags.kv.mode"], 0)
        self.assertEqual(keys["tags.weights.live_bytes"], w["live_bytes"])
        self.assertEqual(keys["tags.weights.backup_bytes"], w["backup_bytes"])
        self.assertGreater(keys["tags.weights.last_sleep_ns"], 0)
        self.assertNotIn("tags.default.live_bytes", keys)
        self.assertEqual(len(keys), 2 * 12)
        self.assertIn("asleep", o["asleep_alloc"])
        self.assertEqual(o["twice"][0], ERR_STATE)
        self.assertIn("asleep already", o["twice"][1])
        self.assertTrue(o["untagged_same"])
        self.assertEqual(sorted(o["woken"]), ["kv", "weights"])
        self.assertEqual(o["again"], [])
        self.assertTrue(o["weights_same"])
        self.assertFalse(o["kv_same"])
        self.assertEqual(o["wake_awake"][0], ERR_STATE)
        self.assertIn('("weights") is awake', o["wake_awake"][1])
        self.assertEqual(o["after"], {"weights": False, "kv": False})
        self.assertEqual(o["default_sleep"], ["weights"])  # tags=("weights",), backup
        self.assertEqual(o["woken2"], ["weights"])
        self.assertTrue(o["weights_same2"])

    def test_torch_path(self):
        o = run_json(self, TORCH_PATH)
        if "skip" in o:
            self.skipTest(o["skip"])
        self.assertEqual(o["slept"], ["weights", "graphs"])
        self.assertTrue(o["asleep"])
        self.assertEqual(sorted(o["woken"]), ["graphs", "weights"])
        self.assertTrue(o["same"])
        self.assertIn("xseg_torch_wake(device 0, ['weights'])", o["wake_awake"])
        self.assertIn("is awake", o["wake_awake"])


class AdapterMappingTest(unittest.TestCase):
    """The engines' tags and modes, without touching any allocator."""

    def test_vllm_plan(self):
        a = VllmSleepAllocator(graph_pools=False)
        for t in ("weights", "kv_cache", None):
            with a.use_memory_pool(t):
                self.assertEqual(xseg.current_tag(), a.xseg_tag(t))
        self.assertEqual(xseg.current_tag(), "default")
        self.assertEqual(a.used, ["weights", "kv_cache", "default"])
        self.assertEqual([a.xseg_tag(t) for t in a.used], ["weights", "kv", "vllm"])
        self.assertEqual(a.sleep_plan(("weights",)),
                         {"weights": "backup", "kv": "discard", "vllm": "discard"})
        self.assertEqual(a.sleep_plan("weights"), a.sleep_plan(("weights",)))
        self.assertEqual(a.sleep_plan(()),
                         {"weights": "discard", "kv": "discard", "vllm": "discard"})
        self.assertEqual(a.sleep_plan(None),  # vLLM: None offloads default_tag
                         {"weights": "discard", "kv": "discard", "vllm": "backup"})
        g = VllmSleepAllocator(graph_pools=True)
        with g.use_memory_pool("weights"):
            pass
        self.assertEqual(g.sleep_plan(("weights",)), {"weights": "backup", "graphs": "discard"})
        self.assertEqual(g.sleep_plan(("weights", "graphs"))["graphs"], "backup")
        with self.assertRaises(TypeError):
            with a.use_memory_pool(3):
                pass

    def test_vllm_singleton(self):
        saved = VllmSleepAllocator.instance
        VllmSleepAllocator.instance = None
        try:
            a = VllmSleepAllocator.get_instance()
            self.assertIs(VllmSleepAllocator.get_instance(), a)
            self.assertEqual(VllmSleepAllocator.default_tag, "default")
        finally:
            VllmSleepAllocator.instance = saved

    def test_saver_plan(self):
        s = TorchMemorySaverAdapter.create(True, graph_pools=True)
        self.assertTrue(s.enabled)
        with s.region("weights", enable_cpu_backup=True):
            self.assertEqual(xseg.current_tag(), "weights")
        with s.region("kv_cache"):
            self.assertEqual(xseg.current_tag(), "kv")
            with s.disable():
                self.assertEqual(xseg.current_tag(), "default")
        with s.region("cuda_graph"):
            self.assertEqual(xseg.current_tag(), "cuda_graph")
        with s.region():
            self.assertEqual(xseg.current_tag(), "saver")
        self.assertEqual(s.xseg_tags("cuda_graph"), ["cuda_graph", "graphs"])
        self.assertEqual(s.pause_plan(), {"weights": "backup", "kv": "discard",
                                          "cuda_graph": "discard", "graphs": "discard",
                                          "saver": "discard"})
        self.assertEqual(s.pause_plan("weights"), {"weights": "backup"})
        with s.region("kv_cache", enable_cpu_backup=True):  # any backup region: backup
            pass
        self.assertEqual(s.pause_plan("kv_cache"), {"kv": "backup"})
        self.assertEqual(TorchMemorySaverAdapter(graph_pools=False).xseg_tags("cuda_graph"),
                         ["cuda_graph"])

    def test_saver_disabled(self):
        s = TorchMemorySaverAdapter.create(False)
        self.assertFalse(s.enabled)
        with s.region("weights", enable_cpu_backup=True):
            self.assertEqual(xseg.current_tag(), "default")
        s.pause()
        s.resume("weights")
        with s.configure_subprocess():
            pass


ADAPTERS = PUBLIC + r"""
from xseg.adapters import TorchMemorySaverAdapter, VllmSleepAllocator
v = VllmSleepAllocator.get_instance()
with v.use_memory_pool(tag="weights"):
    w = [alloc(n) for n in (1000, 6 << 20)]
with v.use_memory_pool(tag="kv_cache"):
    k = [alloc(4 << 20)]
out["usage"] = v.get_current_usage()
out["live"] = sum(xseg.tag_stats()[t]["live_bytes"] for t in ("weights", "kv"))
v.sleep(offload_tags=("weights",))  # vLLM's level 1
st = xseg.tag_stats()
out["level1"] = {t: [st[t]["asleep"], st[t]["mode"]] for t in ("weights", "kv")}
out["usage_asleep"] = v.get_current_usage()
v.wake_up(["weights"])
out["weights_only"] = {t: xseg.tag_stats()[t]["asleep"] for t in ("weights", "kv")}
out["weights_same"] = same(w)
v.wake_up(["weights"])  # awake already: nothing to do
v.wake_up()
out["all_awake"] = sorted(v.asleep)
v.sleep(offload_tags=())  # level 2
st = xseg.tag_stats()
out["level2"] = {t: [st[t]["asleep"], st[t]["mode"]] for t in ("weights", "kv")}
v.wake_up()

s = TorchMemorySaverAdapter.create(enable=True)
with s.region("weights", enable_cpu_backup=True):
    sw = [alloc(2 << 20)]
with s.region("kv_cache"):
    sk = [alloc(2 << 20)]
s.pause("kv_cache")
out["saver_kv"] = {t: xseg.tag_stats()[t]["asleep"] for t in ("weights", "kv")}
s.pause()
st = xseg.tag_stats()
out["saver_all"] = {t: [st[t]["asleep"], st[t]["mode"]] for t in ("weights", "kv")}
try:
    s.pause("weights")
except RuntimeError as e:
    out["pause_twice"] = str(e)
s.resume("weights")
out["saver_weights_same"] = same(sw)
s.resume()
out["saver_awake"] = sorted(s.asleep)
try:
    s.resume("kv_cache")
except RuntimeError as e:
    out["resume_awake"] = str(e)
print(json.dumps(out))
"""


class AdapterRoundTripTest(unittest.TestCase):
    def test_adapters_on_the_process_allocator(self):
        o = run_json(self, ADAPTERS)
        self.assertGreaterEqual(o["usage"], 1000 + (6 << 20) + (4 << 20))
        self.assertEqual(o["usage"], o["live"])
        self.assertEqual(o["level1"], {"weights": [True, "backup"], "kv": [True, "discard"]})
        self.assertEqual(o["usage_asleep"], o["usage"])
        self.assertEqual(o["weights_only"], {"weights": False, "kv": True})
        self.assertTrue(o["weights_same"])
        self.assertEqual(o["all_awake"], [])
        self.assertEqual(o["level2"], {"weights": [True, "discard"], "kv": [True, "discard"]})
        self.assertEqual(o["saver_kv"], {"weights": False, "kv": True})
        self.assertEqual(o["saver_all"], {"weights": [True, "backup"], "kv": [True, "discard"]})
        self.assertIn("asleep already", o["pause_twice"])
        self.assertTrue(o["saver_weights_same"])
        self.assertEqual(o["saver_awake"], [])
        self.assertIn("is awake", o["resume_awake"])


if __name__ == "__main__":
    unittest.main()
