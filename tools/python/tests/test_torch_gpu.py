"""test_torch_gpu: xseg under real PyTorch on a GPU, each case in a fresh
interpreter: install and tensors, torch.cuda stats routed to xseg, the error
after CUDA init, memory fraction, record_stream, empty_cache, CUDA graph
capture and replay (the graph's memory stays its own).  Skipped without
PyTorch or without a CUDA device."""
import functools
import unittest

from _common import run_py

NO_HOST = {"XSEG_CONF": None}  # the GPU cases use the CUDA backend


@functools.lru_cache(maxsize=1)
def gpu_torch():
    r = run_py("import torch; print(torch.cuda.is_available())", env=NO_HOST, timeout=300)
    return r.returncode == 0 and r.stdout.strip() == "True"


def run_case(test, code, timeout=300):
    if not gpu_torch():
        test.skipTest("needs PyTorch with a CUDA device")
    r = run_py(code, env=NO_HOST, timeout=timeout)
    test.assertEqual(r.returncode, 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r.stdout


BASIC = """
import torch, xseg
xseg.install()
x = torch.randn(1 << 20, device="cuda")
s = xseg.memory_stats()
assert xseg.backend() == "cuda"
assert s["allocated_bytes.all.current"] >= 4 << 20, s
assert torch.cuda.memory_allocated() == s["allocated_bytes.all.current"]
assert torch.cuda.max_memory_reserved() >= torch.cuda.memory_reserved() > 0
y = float((x * 2).sum())
del x
torch.cuda.synchronize()
before = xseg.memory_stats()["reserved_bytes.all.current"]
torch.cuda.empty_cache()
assert xseg.memory_stats()["reserved_bytes.all.current"] <= before
torch.cuda.reset_peak_memory_stats()
print(torch.cuda.memory_summary())
print("OK")
"""

LATE = """
import torch, xseg
torch.zeros(1, device="cuda")
try:
    xseg.install()
except xseg.XsegError as e:
    print("XE", e)
"""

CONF = """
import os, torch, xseg
xseg.install({"release_threshold": "1GB", "alloc_retries": 4})
assert os.environ["XSEG_CONF"] == (
    "release_threshold:1GB,alloc_retries:4,verbose:on,handle_size:page,premap:off")
torch.ones(10, device="cuda")
print("OK")
"""

FRACTION = """
import torch, xseg
xseg.install()
torch.zeros(1, device="cuda")
torch.cuda.set_per_process_memory_fraction(0.5)
s = xseg.memory_stats()
assert s["xseg.mapped_cap"] == int(0.5 * s["xseg.device_total"]), s["xseg.mapped_cap"]
print("OK")
"""

RECORD_STREAM = """
import torch, xseg
xseg.install()
x = torch.ones(1 << 20, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    y = x * 2
x.record_stream(side)
before = xseg.memory_stats()["xseg.deferred_frees"]
del x
assert xseg.memory_stats()["xseg.deferred_frees"] == before + 1
torch.cuda.synchronize()
assert float(y.sum()) == 2 * (1 << 20)
print("OK")
"""

GRAPH = """
import gc, torch, xseg
xseg.install()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 512)).cuda()
static_in = torch.randn(256, 512, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        model(static_in)
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(g):
    static_out = model(static_in)
# eager memory allocated after the capture must not be the graph's
junk = [torch.full((1 << 20,), 7.0, device="cuda") for _ in range(16)]
with torch.no_grad():
    for _ in range(3):
        data = torch.randn(256, 512, device="cuda")
        static_in.copy_(data)
        g.replay()
        ref = model(data)
        torch.cuda.synchronize()
        assert torch.allclose(static_out, ref, rtol=1e-4, atol=1e-4), (static_out - ref).abs().max()
assert all(bool((j == 7.0).all()) for j in junk), "a replay wrote into eager memory"
torch.cuda.synchronize()
def state(tag):
    return (tag, torch.cuda.mem_get_info()[0], xseg.graph_pools(0),
            xseg.memory_stats(0)["reserved_bytes.all.current"])
seen = [state("graph alive")]
assert seen[0][2]["pools"] == 1 and seen[0][2]["in_use"] == 1, seen
del g, static_out
gc.collect()
seen.append(state("graph deleted"))
# cuBLAS took its workspace for the capture stream from the graph's pool, and
# PyTorch keeps it (as with its own allocator): it holds the pool until cleared
assert seen[-1][2]["in_use"] == 0, seen
torch._C._cuda_clearCublasWorkspaces()
seen.append(state("cuBLAS workspaces cleared"))
assert seen[-1][2]["live_blocks"] == 0, seen
torch.cuda.empty_cache()
seen.append(state("empty_cache"))
assert seen[-1][2]["pools"] == 0, seen
assert seen[-1][1] >= seen[0][1] + seen[0][2]["mapped_bytes"], seen
print("OK")
"""


class TorchGpuTest(unittest.TestCase):
    def test_install_and_stats(self):
        out = run_case(self, BASIC)
        self.assertIn("xseg memory summary", out)
        self.assertTrue(out.rstrip().endswith("OK"))

    def test_install_after_cuda_init_fails(self):
        out = run_case(self, LATE)
        self.assertIn("XE xseg.install(): PyTorch has already initialised CUDA", out)

    def test_conf(self):
        self.assertIn("OK", run_case(self, CONF))

    def test_memory_fraction(self):
        self.assertIn("OK", run_case(self, FRACTION))

    def test_record_stream(self):
        self.assertIn("OK", run_case(self, RECORD_STREAM))

    def test_cuda_graph(self):
        self.assertIn("OK", run_case(self, GRAPH))


if __name__ == "__main__":
    unittest.main()
