#!/usr/bin/env python3
"""workloads.py: the framework workloads of the preload proof (gpu_proof.sh).

    workloads.py cupy MODE [--steps N] [--warmup N]
                                MODE: pool_off (cupy.cuda.set_allocator(None):
                                every allocation reaches cudaMalloc), pool_on
                                (CuPy's MemoryPool), xseg (xseg.cupy_allocator());
                                --warmup: untimed steps first (default 5; with 40 the
                                pool has every size it needs before the timed pass)
    workloads.py jax [--steps N]    a small MLP training loop (run it with
                                XLA_PYTHON_CLIENT_ALLOCATOR=platform; gpu_proof.sh sets
                                XLA_FLAGS=--xla_gpu_deterministic_ops=true
                                --xla_gpu_autotune_level=0 so that two runs can agree)
    workloads.py torch [--steps N]  a small conv net training loop (run it with
                                PYTORCH_NO_CUDA_MEMORY_CACHING=1; deterministic
                                cuDNN and cuBLAS)

None of them names xseg except `cupy xseg`.  Each prints one JSON line:
a checksum of its results (identical for any correct allocator: same seeds,
same kernels, deterministic ops; "sums" lists the values behind it, so a
difference can be located), the wall time of the work (imports and warm-up
excluded),
and the peak device memory in use: "peak_used_bytes" is the driver's
cuMemGetInfo sampled after every step (minus the use before the work), the
same measure for every allocator; "app_peak_bytes" is the framework's own
figure where it has one (CuPy's pool total, torch.cuda.max_memory_allocated,
JAX's peak_bytes_in_use), with "app_peak_source" naming it.
"""
import ctypes
import hashlib
import json
import os
import struct
import sys
import time


class DeviceMemory:
    """cuMemGetInfo of device 0 through its primary context (pushed for the
    call), whatever the framework made current on this thread."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.cu.cuInit(0)
        self.dev = ctypes.c_int()
        self.ctx = ctypes.c_void_p()
        self.cu.cuDeviceGet(ctypes.byref(self.dev), 0)
        self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev)
        self.base = self.used()
        self.peak = 0

    def used(self):
        free, total, old = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_void_p()
        self.cu.cuCtxPushCurrent_v2(self.ctx)
        self.cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        self.cu.cuCtxPopCurrent_v2(ctypes.byref(old))
        return total.value - free.value

    def sample(self):
        self.peak = max(self.peak, self.used() - self.base)


def digest(values):
    h = hashlib.sha256()
    for v in values:
        h.update(struct.pack("<d", float(v)))
    return h.hexdigest()[:32]


def report(name, mode, sums, wall, mem, app_peak=None, app_source=None, extra=None):
    out = {"workload": name, "mode": mode, "checksum": digest(sums), "last": float(sums[-1]),
           "steps": len(sums), "sums": [float(v) for v in sums],
           "xla_flags": os.environ.get("XLA_FLAGS"),
           "wall_s": round(wall, 4), "peak_used_bytes": mem.peak,
           "peak_source": "cuMemGetInfo after every step, minus the use before the work",
           "app_peak_bytes": app_peak, "app_peak_source": app_source,
           "preloaded": "libxseg_preload" in os.environ.get("LD_PRELOAD", "")}
    out.update(extra or {})
    print(json.dumps(out), flush=True)


# ---- CuPy ----

def cupy_work(cp, steps, mem, pool):
    rs = cp.random.RandomState(1234)
    sums, peak = [], 0
    for i in range(steps):
        n = 256 + (i * 97) % 1800
        a = rs.standard_normal((n, n), dtype=cp.float32)
        b = rs.standard_normal((n, 96 + i % 64), dtype=cp.float32)
        c = a @ b
        d = cp.tanh(c) * 0.5 + cp.sin(c)
        e = cp.concatenate([d, d[: n // 3]], axis=0)
        sums.append(float(cp.abs(e).sum(dtype=cp.float64)))
        del a, b, c, d, e
        mem.sample()
        if pool is not None:
            peak = max(peak, pool.total_bytes())
    cp.cuda.Device(0).synchronize()
    return sums, peak


def run_cupy(mode, steps, warmup=5):
    import cupy as cp
    pool = None
    if mode == "pool_off":
        cp.cuda.set_allocator(None)
    elif mode == "xseg":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "python"))
        import xseg
        cp.cuda.set_allocator(xseg.cupy_allocator())
    else:
        pool = cp.get_default_memory_pool()
    mem = DeviceMemory()
    cupy_work(cp, warmup, mem, None)  # warm-up: kernels compiled, handles made
    mem.base, mem.peak = mem.used(), 0
    t0 = time.perf_counter()
    sums, peak = cupy_work(cp, steps, mem, pool)
    wall = time.perf_counter() - t0
    extra = {"warmup_steps": warmup}
    if mode == "xseg":
        import xseg
        s = xseg.raw_stats(0)
        extra.update(xseg_mapped_peak=s.mapped_bytes.peak,
                     xseg_allocated_peak=s.allocated_bytes.peak)
    report("cupy", mode, sums, wall, mem, peak if pool is not None else None,
           "cupy MemoryPool.total_bytes() after every step" if pool is not None else None,
           extra)


# ---- JAX ----

def run_jax(steps):
    import jax
    import jax.numpy as jnp

    def init(key, sizes):
        params = []
        for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
            k = jax.random.fold_in(key, i)
            params.append((jax.random.normal(k, (m, n)) * (1.0 / m ** 0.5), jnp.zeros(n)))
        return params

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        return jnp.mean((h @ w + b - y) ** 2)

    @jax.jit
    def step(params, x, y):
        val, grads = jax.value_and_grad(loss)(params, x, y)
        return [(w - 1e-3 * gw, b - 1e-3 * gb) for (w, b), (gw, gb) in zip(params, grads)], val

    key = jax.random.PRNGKey(0)
    params = init(key, [512, 2048, 2048, 2048, 64])
    mem = DeviceMemory()
    batch = lambda i: (jax.random.normal(jax.random.fold_in(key, 1000 + i), (1024, 512)),
                       jax.random.normal(jax.random.fold_in(key, 5000 + i), (1024, 64)))
    x, y = batch(0)
    params, _ = step(params, x, y)  # compile
    jax.block_until_ready(params)
    mem.base, mem.peak = mem.used(), 0
    sums = []
    t0 = time.perf_counter()
    for i in range(steps):
        x, y = batch(i)
        params, val = step(params, x, y)
        sums.append(float(val))
        mem.sample()
    jax.block_until_ready(params)
    wall = time.perf_counter() - t0
    sums.append(float(sum(float(jnp.abs(w).sum()) for w, _ in params)))
    stats = jax.devices()[0].memory_stats() or {}
    report("jax", os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default"), sums, wall, mem,
           stats.get("peak_bytes_in_use"), "jax device memory_stats peak_bytes_in_use"
           if "peak_bytes_in_use" in stats else None)


# ---- PyTorch ----

def run_torch(steps):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    import torch
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    dev = torch.device("cuda", 0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(), torch.nn.Linear(64 * 16, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device="cpu").manual_seed(1)

    def batch(i):
        side = 32 + 8 * (i % 5)  # varied shapes: varied allocation sizes
        x = torch.randn(64, 3, side, side, generator=gen).to(dev)
        y = torch.randint(0, 10, (64,), generator=gen).to(dev)
        return x, y

    def train_step(i):
        x, y = batch(i)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss

    train_step(0)
    torch.cuda.synchronize()
    mem = DeviceMemory()
    torch.cuda.reset_peak_memory_stats()
    sums = []
    t0 = time.perf_counter()
    for i in range(1, steps + 1):
        sums.append(float(train_step(i)))
        mem.sample()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    sums.append(float(sum(p.detach().abs().sum().item() for p in net.parameters())))
    report("torch", "no_caching" if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"
           else "caching", sums, wall, mem, torch.cuda.max_memory_allocated(dev),
           "torch.cuda.max_memory_allocated")


DEFAULT_STEPS = {"cupy": 300, "jax": 200, "torch": 150}


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    args = argv[2:]
    steps = DEFAULT_STEPS.get(argv[1], 0)
    if "--steps" in args:
        i = args.index("--steps")
        steps = int(args[i + 1])
        del args[i:i + 2]
    warmup = 5
    if "--warmup" in args:
        i = args.index("--warmup")
        warmup = int(args[i + 1])
        del args[i:i + 2]
    if argv[1] == "cupy":
        run_cupy(args[0] if args else "pool_off", steps, warmup)
    elif argv[1] == "jax":
        run_jax(steps)
    elif argv[1] == "torch":
        run_torch(steps)
    else:
        print(f"workloads.py: unknown workload {argv[1]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
