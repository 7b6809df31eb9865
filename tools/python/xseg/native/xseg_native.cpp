// xseg_native.cpp: PyTorch's CUDA allocator interface
// (c10::cuda::CUDACachingAllocator::CUDAAllocator) implemented over libxseg,
// for the native path of xseg.install() (issue 16, docs/pytorch.md "Native
// allocator").  libxseg is dlopen'ed by path (the copy the Python package
// loaded, so both see the same process-wide allocators) and served through
// its xseg_torch_* entry points (lib/plugin.c: CUDA-graph pool routing
// included).  What this adds over the pluggable path: an allocation xseg
// refuses raises torch.OutOfMemoryError (after the OOM observers) instead of
// a NULL pointer; torch's own stats, cacheInfo, snapshots with traces, and
// the checkpoint calls of CUDA-graph trees (restores that only free).
// Built on first use by tools/python/xseg/_native.py against the installed
// torch; XSEG_NATIVE_WITH_PYTHON adds the Python module (off for the
// header-only compile check, tools/python/xseg/native/README.md).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <unordered_set>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#ifndef XSEG_TORCH_VERSION // the torch.__version__ the build was made for
#define XSEG_TORCH_VERSION "unknown"
#endif
#define XSEG_TORCH_NUM (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)
// attachOomRejectionObserver became a pure virtual after 2.11 (2.12 assumed).
#ifndef XSEG_HAS_OOM_REJECTION
#define XSEG_HAS_OOM_REJECTION (XSEG_TORCH_NUM >= 212)
#endif

namespace xseg_native {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::DeviceIndex;
using c10::MempoolId_t;

constexpr int kMaxDevices = 64;

// ---- libxseg, by dlsym (the subset of include/xseg.h used here) ----

struct Counter {
  uint64_t current, peak, total;
};
// The fields of struct xseg_stats read here.  The struct is read by offset:
// driver_calls has XSEG_OP_COUNT entries, which grows with the library
// (counted at load time through xseg_op_name), and the scalars follow it.
struct Stats {
  Counter allocated_bytes, requested_bytes, active_blocks, reserved_va_bytes,
      mapped_bytes, cached_bytes, segments, handles;
  uint64_t map_calls, unmap_calls;
  uint64_t driver_errors, alloc_calls, free_calls, alloc_retries, ooms, syncs,
      gc_runs, trims, released_bytes, deferred_frees, largest_free_block,
      mapped_cap, device_total, page_size;
};
constexpr size_t kHeader = 16, kCounters = 8; // size, version, device, reserved0
constexpr size_t kTail = 14; // driver_errors .. page_size, after driver_calls
struct PoolId {
  uint64_t first, second;
};

struct Api {
  void* lib = nullptr;
  const char* (*last_error)() = nullptr;
  const char* (*version)() = nullptr;
  int (*get_default)(int, void**) = nullptr;
  int (*get_stats)(void*, void*) = nullptr;
  const char* (*op_name)(int) = nullptr;
  int nops = 0;
  int (*reset_peak)(void*) = nullptr;
  int (*block_size)(void*, const void*, size_t*, size_t*) = nullptr;
  int (*snapshot_json)(void*, char*, size_t, size_t*) = nullptr;
  void* (*alloc)(size_t, int, void*) = nullptr;
  void (*free)(void*, size_t, int, void*) = nullptr;
  void (*init)(int) = nullptr;
  void (*reset)() = nullptr;
  void (*fraction)(double, int) = nullptr;
  void (*record)(void*, void*) = nullptr;
  void (*begin_pool)(int, PoolId, void*) = nullptr;
  void (*end_pool)(int, PoolId) = nullptr;
  void (*release_pool)(int, PoolId) = nullptr;
  int (*export_block)(void*, const void*, void*) = nullptr; // xseg_export
  void (*export_close)(void*) = nullptr;                   // xseg_export_close
  int (*import_block)(void*, const void*, void**) = nullptr; // xseg_import
  int (*unimport)(void*, void*) = nullptr;                 // xseg_unimport
};
static Api api;
constexpr int kMapOp = 4, kUnmapOp = 5; // XSEG_OP_MAP, XSEG_OP_UNMAP (stable values)

// Numbers and pointers in messages are formatted here, never streamed:
// c10::str's operator<< for a pointer called a null function inside this
// module on the H200 (std::ostream::_M_insert<const void*>, instantiated
// here with hidden visibility), crashing the error path of shareIpcHandle.
static std::string N(long long v) {
  char b[32];
  std::snprintf(b, sizeof b, "%lld", v);
  return b;
}
static std::string U(unsigned long long v) {
  char b[32];
  std::snprintf(b, sizeof b, "%llu", v);
  return b;
}
static std::string P(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

template <typename F>
static void sym(void* lib, const char* name, F& slot, std::string& missing) {
  void* p = dlsym(lib, name);
  if (!p)
    missing += std::string(missing.empty() ? "" : ", ") + name;
  std::memcpy(&slot, &p, sizeof p);
}

static void load_api(const std::string& path) {
  if (api.lib)
    return;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  TORCH_CHECK(lib, "xseg native: cannot dlopen ", path, ": ", dlerror());
  std::string missing;
  Api a;
  a.lib = lib;
  sym(lib, "xseg_last_error", a.last_error, missing);
  sym(lib, "xseg_version", a.version, missing);
  sym(lib, "xseg_default", a.get_default, missing);
  sym(lib, "xseg_get_stats", a.get_stats, missing);
  sym(lib, "xseg_op_name", a.op_name, missing);
  sym(lib, "xseg_reset_peak", a.reset_peak, missing);
  sym(lib, "xseg_block_size", a.block_size, missing);
  sym(lib, "xseg_snapshot_json", a.snapshot_json, missing);
  sym(lib, "xseg_torch_alloc", a.alloc, missing);
  sym(lib, "xseg_torch_free", a.free, missing);
  sym(lib, "xseg_torch_init", a.init, missing);
  sym(lib, "xseg_torch_reset", a.reset, missing);
  sym(lib, "xseg_torch_memory_fraction", a.fraction, missing);
  sym(lib, "xseg_torch_record_stream", a.record, missing);
  sym(lib, "xseg_torch_begin_pool", a.begin_pool, missing);
  sym(lib, "xseg_torch_end_pool", a.end_pool, missing);
  sym(lib, "xseg_torch_release_pool", a.release_pool, missing);
  sym(lib, "xseg_export", a.export_block, missing);
  sym(lib, "xseg_export_close", a.export_close, missing);
  sym(lib, "xseg_import", a.import_block, missing);
  sym(lib, "xseg_unimport", a.unimport, missing);
  TORCH_CHECK(missing.empty(), "xseg native: ", path, " lacks ", missing,
              "; rebuild libxseg from the same source tree");
  while (a.op_name && a.nops < 256 && std::strcmp(a.op_name(a.nops), "unknown") != 0)
    a.nops++;
  TORCH_CHECK(a.nops > kUnmapOp, "xseg native: ", path, " names only ", N(a.nops),
              " driver operations");
  api = a;
}

static std::string last_error() {
  const char* e = api.last_error ? api.last_error() : nullptr;
  return e ? e : "";
}

static void* default_xs(int device) {
  void* xs = nullptr;
  TORCH_CHECK(api.get_default(device, &xs) == 0 && xs,
              "xseg native: no allocator for device ", N(device), ": ", last_error());
  return xs;
}

constexpr int kShortStats = -1; // stats_of: the library filled fewer bytes than read

// Stats of xs into *out; the library's status (or kShortStats).
static int stats_of(void* xs, Stats* out) {
  alignas(8) unsigned char raw[4096] = {};
  uint32_t size = sizeof raw;
  std::memcpy(raw, &size, sizeof size);
  int st = api.get_stats(xs, raw);
  if (st != 0)
    return st;
  // The library wrote min(4096, its sizeof(xseg_stats)) bytes and that
  // count into size: every word read below must lie inside it.
  uint32_t filled = 0;
  std::memcpy(&filled, raw, sizeof filled);
  size_t words = 3 * kCounters + (size_t)api.nops + kTail;
  if (filled > sizeof raw || kHeader + 8 * words > filled)
    return kShortStats;
  auto word = [&](size_t i) {
    uint64_t v;
    std::memcpy(&v, raw + kHeader + 8 * i, sizeof v);
    return v;
  };
  Counter* c = &out->allocated_bytes;
  for (size_t i = 0; i < kCounters; i++)
    c[i] = Counter{word(3 * i), word(3 * i + 1), word(3 * i + 2)};
  size_t calls = 3 * kCounters, k = calls + (size_t)api.nops;
  out->map_calls = word(calls + kMapOp);
  out->unmap_calls = word(calls + kUnmapOp);
  uint64_t* tail[] = {&out->driver_errors, &out->alloc_calls, &out->free_calls,
                      &out->alloc_retries, &out->ooms, &out->syncs, &out->gc_runs,
                      &out->trims, &out->released_bytes, &out->deferred_frees,
                      &out->largest_free_block, &out->mapped_cap, &out->device_total,
                      &out->page_size};
  static_assert(sizeof tail / sizeof tail[0] == kTail, "kTail counts the scalars read");
  for (uint64_t* f : tail)
    *f = word(k++);
  return 0;
}

static Stats read_stats(int device) {
  Stats st{};
  int rc = stats_of(default_xs(device), &st);
  TORCH_CHECK(rc != kShortStats, "xseg native: xseg_get_stats(device ", N(device),
              ") filled fewer bytes than the ", U(3 * kCounters + (size_t)api.nops + kTail),
              " words read here (", N(api.nops), " driver operations); rebuild libxseg and "
              "this module from one source tree");
  TORCH_CHECK(rc == 0, "xseg native: xseg_get_stats(device ", N(device), "): ", last_error());
  return st;
}

// ---- a minimal JSON reader for xseg_snapshot_json ----

struct Json {
  enum Kind { NUL, NUM, STR, ARR, OBJ, BOOL } kind = NUL;
  uint64_t num = 0;
  bool neg = false;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;
  const Json* get(const char* key) const {
    for (auto& kv : obj)
      if (kv.first == key)
        return &kv.second;
    return nullptr;
  }
  uint64_t u(const char* key) const {
    const Json* j = get(key);
    return j && j->kind == NUM ? j->num : 0;
  }
  std::string s(const char* key) const {
    const Json* j = get(key);
    return j && j->kind == STR ? j->str : "";
  }
};

struct JsonParser {
  const char* p;
  const char* end;
  void ws() {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
      p++;
  }
  bool lit(const char* w) {
    size_t n = std::strlen(w);
    if ((size_t)(end - p) < n || std::strncmp(p, w, n) != 0)
      return false;
    p += n;
    return true;
  }
  std::string string() {
    std::string out;
    p++; // opening quote
    while (p < end && *p != '"') {
      if (*p == '\\' && p + 1 < end) {
        p++;
        out += *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
        if (*p == 'u')
          p += std::min<ptrdiff_t>(4, end - p - 1);
      } else {
        out += *p;
      }
      p++;
    }
    TORCH_CHECK(p < end, "xseg native: snapshot JSON: unterminated string");
    p++;
    return out;
  }
  Json value() {
    ws();
    TORCH_CHECK(p < end, "xseg native: snapshot JSON ends early");
    Json j;
    if (*p == '{') {
      j.kind = Json::OBJ;
      p++;
      for (ws(); p < end && *p != '}'; ws()) {
        ws();
        TORCH_CHECK(*p == '"', "xseg native: snapshot JSON: key expected");
        std::string k = string();
        ws();
        TORCH_CHECK(p < end && *p == ':', "xseg native: snapshot JSON: ':' expected");
        p++;
        j.obj.emplace_back(std::move(k), value());
        ws();
        if (p < end && *p == ',')
          p++;
      }
      p++;
    } else if (*p == '[') {
      j.kind = Json::ARR;
      p++;
      for (ws(); p < end && *p != ']'; ws()) {
        j.arr.push_back(value());
        ws();
        if (p < end && *p == ',')
          p++;
      }
      p++;
    } else if (*p == '"') {
      j.kind = Json::STR;
      j.str = string();
    } else if (lit("null")) {
    } else if (lit("true") || lit("false")) {
      j.kind = Json::BOOL;
      j.num = p[-1] == 'e' && p[-2] == 'u';
    } else {
      j.kind = Json::NUM;
      if (*p == '-') {
        j.neg = true;
        p++;
      }
      while (p < end && *p >= '0' && *p <= '9')
        j.num = j.num * 10 + (uint64_t)(*p++ - '0');
      while (p < end && (*p == '.' || *p == 'e' || *p == 'E' || *p == '+' || *p == '-' ||
                         (*p >= '0' && *p <= '9')))
        p++; // fractions are not used here
    }
    return j;
  }
};

static Json snapshot_of(int device) {
  void* xs = default_xs(device);
  std::vector<char> buf(1 << 16);
  for (int tries = 0; tries < 8; tries++) {
    size_t len = 0;
    int st = api.snapshot_json(xs, buf.data(), buf.size(), &len);
    if (st == 0) {
      JsonParser jp{buf.data(), buf.data() + len};
      return jp.value();
    }
    TORCH_CHECK(st == 13, "xseg native: xseg_snapshot_json(device ", N(device), "): ",
                last_error()); // 13: XSEG_ERR_BUFFER_TOO_SMALL
    buf.resize(len + len / 4 + 4096);
  }
  TORCH_CHECK(false, "xseg native: xseg_snapshot_json kept growing on device ", N(device));
}

// ---- stats ----

// c10's Stat, wherever this torch declares it.
using Stat = std::decay_t<decltype(std::declval<cca::DeviceStats>().allocation[0])>;
constexpr size_t kAggregate = 0; // StatType::AGGREGATE

static Stat stat_of(const Counter& c, const Counter& base) {
  Stat s;
  s.current = (int64_t)c.current;
  s.peak = (int64_t)c.peak;
  s.allocated = (int64_t)(c.total - base.total);
  s.freed = (int64_t)((c.total - c.current) - (base.total - base.current));
  return s;
}

// ---- CUDA IPC for torch.multiprocessing, over xseg's export / import ----
// Only dedicated blocks (docs/sharing.md: registrable_min, shareable:fd) can
// be exported.  The exporter keeps the description's descriptors open until
// the block is freed; the handle string carries the description (its pid
// and descriptor numbers), and the importer takes the descriptors from the
// exporter with pidfd_getfd (Linux 5.6; the kernel's ptrace rules apply).

// include/xseg.h's xseg_export_desc (ABI: magic XSEX, version 1).
struct ExportDesc {
  uint32_t magic, version;
  int32_t device, pid;
  uint8_t uuid[16];
  uint64_t size, requested, nonce;
  uint32_t handle_type, npieces;
  int32_t token_fd;
  uint32_t token_slot;
  uint64_t check;
  struct Piece {
    int32_t fd;
    uint32_t reserved;
    uint64_t offset, size;
  } pieces[8];
};
constexpr uint32_t kExportMagic = 0x58534558u;
constexpr char kIpcTag[] = "xseg-ipc-1:";

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

// The exporter's descriptor `fd` in this process (-1 and errno on failure).
static int fetch_fd(int pidfd, int fd) {
  return fd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
}

static std::string ipc_encode(const ExportDesc& d) {
  return std::string(kIpcTag) + std::string(reinterpret_cast<const char*>(&d), sizeof d);
}

static ExportDesc ipc_decode(const std::string& h) {
  size_t tag = sizeof kIpcTag - 1;
  ExportDesc d{};
  TORCH_CHECK(h.size() == tag + sizeof d && h.compare(0, tag, kIpcTag) == 0,
              "xseg native: a CUDA IPC handle of ", U(h.size()), " bytes that xseg did not make "
              "(both processes must use xseg's native allocator)");
  std::memcpy(&d, h.data() + tag, sizeof d);
  TORCH_CHECK(d.magic == kExportMagic && d.npieces >= 1 && d.npieces <= 8,
              "xseg native: a damaged CUDA IPC handle");
  return d;
}

static void close_fds(ExportDesc& d) {
  for (uint32_t i = 0; i < d.npieces; i++)
    if (d.pieces[i].fd >= 0)
      close(d.pieces[i].fd), d.pieces[i].fd = -1;
  if (d.token_fd >= 0)
    close(d.token_fd), d.token_fd = -1;
}

// The description with the exporter's descriptors replaced by this
// process's copies (closed by the caller with close_fds).
static ExportDesc fetch_fds(const ExportDesc& in) {
  ExportDesc d = in;
  int pidfd = (int)syscall(SYS_pidfd_open, d.pid, 0);
  TORCH_CHECK(pidfd >= 0, "xseg native: opening CUDA IPC memory of process ", N(d.pid),
              ": pidfd_open failed (", std::strerror(errno), "): is it still running?");
  d.token_fd = fetch_fd(pidfd, in.token_fd);
  int err = d.token_fd < 0 && in.token_fd >= 0 ? errno : 0;
  for (uint32_t i = 0; i < d.npieces; i++) {
    d.pieces[i].fd = fetch_fd(pidfd, in.pieces[i].fd);
    if (d.pieces[i].fd < 0 && !err)
      err = errno;
  }
  close(pidfd);
  if (err) {
    close_fds(d); // those taken (a failed one is -1)
    TORCH_CHECK(false, "xseg native: taking the descriptors of CUDA IPC memory from process ",
                N(in.pid), " failed (pidfd_getfd: ", std::strerror(err), "); the kernel allows it "
                "to a process that may ptrace the exporter (same user, and Yama's "
                "ptrace_scope 0, or CAP_SYS_PTRACE)");
  }
  return d;
}

// ---- the checkpoint state of a CUDA-graph pool ----

struct PoolState final : cca::AllocatorState {
  int device = 0;
  MempoolId_t id{0, 0};
  std::map<void*, size_t> live; // the pool's live blocks at the checkpoint
};

// ---- the allocator ----

static void raw_free(void* ptr);

class XsegAllocator final : public cca::CUDAAllocator {
 public:
  // -- allocation --
  c10::DataPtr allocate(size_t n) override {
    DeviceIndex dev = c10::cuda::current_device();
    void* p = n ? alloc(n, dev, c10::cuda::getCurrentCUDAStream(dev).stream()) : nullptr;
    return {p, p, &raw_free, c10::Device(c10::DeviceType::CUDA, dev)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &raw_free;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }
  void* raw_alloc(size_t n) override {
    DeviceIndex dev = c10::cuda::current_device();
    return n ? alloc(n, dev, c10::cuda::getCurrentCUDAStream(dev).stream()) : nullptr;
  }
  void* raw_alloc_with_stream(size_t n, cudaStream_t stream) override {
    return n ? alloc(n, c10::cuda::current_device(), stream) : nullptr;
  }
  void raw_delete(void* ptr) override {
    free(ptr);
  }

  void* alloc(size_t n, DeviceIndex dev, cudaStream_t stream) {
    void* p = api.alloc(n, dev, stream);
    if (!p)
      out_of_memory(n, dev, stream); // throws
    if (dev >= 0 && dev < kMaxDevices)
      used_.fetch_or(uint64_t(1) << dev, std::memory_order_relaxed);
    if (capturing_.load(std::memory_order_acquire) || tracing_.load(std::memory_order_relaxed))
      after_alloc(p, n, dev, stream);
    return p;
  }

  void free(void* ptr) {
    if (!ptr)
      return;
    bool slow = pool_ptrs_.load(std::memory_order_acquire) || tracing_.load(std::memory_order_relaxed);
    if (slow)
      before_free(ptr);
    if (exported_any_.load(std::memory_order_acquire))
      forget_export(ptr);
    api.free(ptr, 0, -1, nullptr);
    // Deleters run in destructors, perhaps without the GIL: no exception and
    // no TORCH_WARN (its Python handler needs the GIL), a line on stderr.
    std::string e = last_error();
    if (!e.empty())
      std::fprintf(stderr, "xseg native: free of %p: %s\n", ptr, e.c_str());
  }

  // -- init and state --
  void init(int device_count) override {
    api.init(device_count);
    std::string e = last_error();
    TORCH_CHECK(e.empty(), e);
    device_count_ = device_count;
    initialized_.store(true);
  }
  bool initialized() override {
    return initialized_.load();
  }
  std::string name() override {
    return "xseg";
  }
  void enable(bool value) override {
    enabled_ = value;
  }
  bool isEnabled() const override {
    return enabled_;
  }

  // -- memory fraction and cache --
  double getMemoryFraction(DeviceIndex device) override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = fraction_.find(device);
    return it == fraction_.end() ? 1.0 : it->second;
  }
  void setMemoryFraction(double fraction, DeviceIndex device) override {
    api.fraction(fraction, device);
    std::string e = last_error();
    TORCH_CHECK(e.empty(), e);
    std::lock_guard<std::mutex> g(mu_);
    fraction_[device] = fraction;
  }
  void emptyCache(MempoolId_t /*mempool_id*/) override {
    api.reset(); // every device's cache, and released graph pools
  }
  // The largest allocation that would be served now without a failure:
  // cached bytes plus what the cap and the device still allow (xseg has no
  // largest-cached-block figure; its blocks move pages, so cached space
  // and new pages combine in one allocation).
  void cacheInfo(DeviceIndex device, size_t* largestBlock) override {
    Stats st = read_stats(device);
    size_t free_b = 0, total_b = 0;
    {
      c10::cuda::CUDAGuard guard(device);
      if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError();
        free_b = 0;
      }
    }
    uint64_t headroom = st.mapped_cap ? (st.mapped_cap > st.mapped_bytes.current
                                             ? st.mapped_cap - st.mapped_bytes.current
                                             : 0)
                                      : UINT64_MAX;
    uint64_t v = st.cached_bytes.current + std::min<uint64_t>(headroom, free_b);
    *largestBlock = (size_t)std::min<uint64_t>(v, st.largest_free_block);
  }
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(DeviceIndex) override {
    return {};
  }
  void* getBaseAllocation(void* ptr, size_t* size) override {
    size_t rounded = 0;
    for (int d = 0; d < kMaxDevices; d++)
      if ((used_.load() >> d) & 1)
        if (api.block_size(default_xs(d), ptr, &rounded, nullptr) == 0) {
          if (size)
            *size = rounded;
          break;
        }
    return ptr;
  }
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (!ptr.get())
      return;
    api.record(ptr.get(), stream.stream());
    std::string e = last_error();
    TORCH_CHECK(e.empty(), e);
  }

  // -- stats --
  cca::DeviceStats getDeviceStats(DeviceIndex device) override {
    Stats st = read_stats(device);
    Stats base{};
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = base_.find(device);
      if (it != base_.end())
        base = it->second;
    }
    cca::DeviceStats ds;
    constexpr size_t agg = kAggregate;
    ds.allocation[agg] = stat_of(st.active_blocks, base.active_blocks);
    ds.active[agg] = ds.allocation[agg];
    ds.segment[agg] = stat_of(st.segments, base.segments);
    ds.allocated_bytes[agg] = stat_of(st.allocated_bytes, base.allocated_bytes);
    ds.active_bytes[agg] = ds.allocated_bytes[agg];
    ds.requested_bytes[agg] = stat_of(st.requested_bytes, base.requested_bytes);
    ds.reserved_bytes[agg] = stat_of(st.mapped_bytes, base.mapped_bytes);
    ds.num_alloc_retries = (int64_t)(st.alloc_retries - base.alloc_retries);
    ds.num_ooms = (int64_t)(st.ooms - base.ooms);
    ds.num_sync_all_streams = (int64_t)(st.syncs - base.syncs);
    ds.num_device_alloc = (int64_t)(st.map_calls - base.map_calls);
    ds.num_device_free = (int64_t)(st.unmap_calls - base.unmap_calls);
    return ds;
  }
  void resetAccumulatedStats(DeviceIndex device) override {
    Stats st = read_stats(device);
    std::lock_guard<std::mutex> g(mu_);
    base_[device] = st;
  }
  void resetPeakStats(DeviceIndex device) override {
    TORCH_CHECK(api.reset_peak(default_xs(device)) == 0, "xseg native: ", last_error());
  }

  // -- CUDA-graph pools (lib/plugin.c routes the allocations) --
  void beginAllocateToPool(DeviceIndex device, MempoolId_t id,
                           std::function<bool(cudaStream_t)> filter) override {
    api.begin_pool(device, PoolId{id.first, id.second}, &filter);
    std::string e = last_error();
    TORCH_CHECK(e.empty(), e);
    std::lock_guard<std::mutex> g(mu_);
    if (device < 0 || device >= kMaxDevices)
      return; // libxseg refused it above (no device); capture_on_ has kMaxDevices slots
    capture_[device] = id;
    capture_on_[device] = true;
    pools_[{device, id}]; // tracked from now on
    capturing_.store(true, std::memory_order_release);
  }
  void endAllocateToPool(DeviceIndex device, MempoolId_t id) override {
    api.end_pool(device, PoolId{id.first, id.second});
    std::lock_guard<std::mutex> g(mu_);
    if (device >= 0 && device < kMaxDevices && capture_on_[device] && capture_[device] == id)
      capture_on_[device] = false;
    bool any = false;
    for (bool on : capture_on_)
      any = any || on;
    capturing_.store(any, std::memory_order_release);
  }
  void releasePool(DeviceIndex device, MempoolId_t id) override {
    api.release_pool(device, PoolId{id.first, id.second});
  }
  std::shared_ptr<cca::AllocatorState> getCheckpointState(DeviceIndex device,
                                                          MempoolId_t id) override {
    auto st = std::make_shared<PoolState>();
    st->device = device;
    st->id = id;
    std::lock_guard<std::mutex> g(mu_);
    auto it = pools_.find({device, id});
    if (it != pools_.end())
      st->live = it->second;
    return st;
  }
  // cudagraph trees (torch.compile mode="reduce-overhead") ask whether a
  // pool's live blocks are exactly the tensors they still track.
  bool checkPoolLiveAllocations(DeviceIndex device, MempoolId_t id,
                                const std::unordered_set<void*>& expected) override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pools_.find({device, id});
    if (it == pools_.end())
      return expected.empty();
    if (it->second.size() != expected.size())
      return false;
    for (auto& kv : it->second)
      if (!expected.count(kv.first))
        return false;
    return true;
  }
  // Restores a pool to a checkpoint when that only frees blocks allocated
  // since; a block live at the checkpoint and freed since would have to be
  // allocated again at its address, which xseg cannot do yet.
  cca::CheckpointDelta setCheckpointPoolState(
      DeviceIndex device, std::shared_ptr<cca::AllocatorState> pps) override {
    auto st = std::dynamic_pointer_cast<PoolState>(pps);
    TORCH_CHECK(st, "xseg native: setCheckpointPoolState got a state that xseg did not make");
    std::vector<void*> to_free;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto& now = pools_[{device, st->id}];
      for (auto& kv : st->live)
        TORCH_CHECK(now.count(kv.first),
                    "xseg native: cannot restore CUDA-graph pool (", U(st->id.first), ",",
                    U(st->id.second), ") on device ", N(device), ": the block at ", P(kv.first),
                    " (", U(kv.second), " bytes) was live at the checkpoint and has been "
                    "freed since; xseg cannot allocate a block at a given address yet");
      for (auto& kv : now)
        if (!st->live.count(kv.first))
          to_free.push_back(kv.first);
    }
    cca::CheckpointDelta delta;
    for (void* p : to_free) {
      free(p);
      delta.ptrs_freed.push_back(p);
    }
    return delta;
  }

  // -- IPC (torch.multiprocessing): dedicated blocks, over export / import --
  cca::ShareableHandle shareIpcHandle(void* ptr) override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = exported_.find(ptr);
    if (it == exported_.end()) {
      ExportDesc d{};
      void* xs = default_xs(c10::cuda::current_device());
      TORCH_CHECK(api.export_block(xs, ptr, &d) == 0, "xseg native: CUDA IPC of ", P(ptr),
                  " (torch.multiprocessing): ", last_error(), ". Only xseg's dedicated blocks "
                  "can be shared with another process: set registrable_min (for example "
                  "registrable_min:64MB) in XSEG_CONF so that tensors that large get one");
      it = exported_.emplace(ptr, d).first;
      exported_any_.store(true, std::memory_order_release);
    }
    return cca::ShareableHandle{0, ipc_encode(it->second)};
  }
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override {
    std::lock_guard<std::mutex> g(mu_);
    auto open = imported_.find(handle);
    if (open != imported_.end())
      if (auto p = open->second.lock())
        return p; // xseg_import refuses a second import of one block
    ExportDesc d = fetch_fds(ipc_decode(handle));
    void* xs = default_xs(c10::cuda::current_device());
    void* out = nullptr;
    int st = api.import_block(xs, &d, &out);
    std::string why = st == 0 ? "" : last_error();
    close_fds(d); // the import holds the memory; the descriptors stay ours
    TORCH_CHECK(st == 0, "xseg native: opening CUDA IPC memory of process ", N(d.pid), ": ", why);
    std::shared_ptr<void> p(out, [xs](void* q) {
      if (api.unimport(xs, q) != 0) // a deleter: as in free()
        std::fprintf(stderr, "xseg native: closing CUDA IPC memory at %p: %s\n", q,
                     last_error().c_str());
    });
    imported_[handle] = p;
    return p;
  }

  // -- history and snapshots --
  bool isHistoryEnabled() override {
    return tracing_.load() && record_;
  }
  void recordHistory(bool enabled, cca::CreateContextFn recorder, size_t max_entries,
                     cca::RecordContext when, bool clear_history,
                     const std::vector<std::string>& skip_actions) override {
    std::lock_guard<std::mutex> g(mu_);
    record_ = enabled;
    recorder_ = enabled ? recorder : nullptr;
    when_ = enabled ? when : cca::RecordContext::NEVER;
    max_entries_ = std::max<size_t>(max_entries, 1);
    skip_ = std::set<std::string>(skip_actions.begin(), skip_actions.end());
    if (clear_history || !enabled) {
      for (auto& t : traces_)
        t.second.clear();
      if (!enabled)
        contexts_.clear();
    }
    tracing_.store(record_ || !trackers_.empty());
  }
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> g(mu_);
    observers_.push_back(std::move(observer));
  }
#if XSEG_HAS_OOM_REJECTION
  void attachOomRejectionObserver(cca::OomRejectionObserver) override {
    // xseg's cap refusals are out-of-memory errors: the OOM observers see them
  }
#endif
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override {
    std::lock_guard<std::mutex> g(mu_);
    trackers_.push_back(std::move(tracker));
    tracing_.store(true);
  }
  cca::SnapshotInfo snapshot(MempoolId_t mempool_id, bool include_traces) override;

  // -- peers and copies --
  void enablePeerAccess(DeviceIndex dev, DeviceIndex dev_to_access) override {
    c10::cuda::CUDAGuard guard(dev);
    cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      return;
    }
    C10_CUDA_CHECK(err);
  }
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device,
                          size_t count, cudaStream_t stream, bool /*p2p_enabled*/) override {
    if (dst_device == src_device)
      return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
  }

  // -- test hooks --
  size_t pool_tracked(int device) {
    std::lock_guard<std::mutex> g(mu_);
    size_t n = 0;
    for (auto& kv : pools_)
      if (kv.first.first == device)
        n += kv.second.size();
    return n;
  }
  size_t trace_length(int device) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = traces_.find(device);
    return it == traces_.end() ? 0 : it->second.size();
  }

 private:
  // The block at ptr is freed: its export's descriptors are closed
  // (importers keep the memory; docs/sharing.md).
  void forget_export(void* ptr) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = exported_.find(ptr);
    if (it == exported_.end())
      return;
    api.export_close(&it->second);
    exported_.erase(it);
    exported_any_.store(!exported_.empty(), std::memory_order_release);
  }

  [[noreturn]] void out_of_memory(size_t n, DeviceIndex dev, cudaStream_t stream) {
    std::string msg = last_error();
    if (msg.empty())
      msg = "xseg_torch_alloc returned NULL without a message";
    bool oom = msg.find("out of memory") != std::string::npos;
    TORCH_CHECK(oom, "xseg native: allocation of ", U(n), " bytes on device ", N(dev),
                " failed: ", msg);
    std::vector<cca::OutOfMemoryObserver> obs;
    bool traced = false;
    {
      std::lock_guard<std::mutex> g(mu_);
      obs = observers_;
      traced = record_ || !trackers_.empty();
    }
    // The device's free memory and xseg's stats only when someone reads
    // them: the plain OOM path (a server catching the error) stays short.
    size_t free_b = 0, total_b = 0;
    if ((traced || !obs.empty()) && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
      (void)cudaGetLastError();
    if (traced) {
      std::lock_guard<std::mutex> g(mu_);
      trace(cca::TraceEntry::OOM, dev, free_b, n, stream, nullptr);
    }
    if (!obs.empty()) {
      Stats st{};
      void* xs = nullptr;
      if (api.get_default(dev, &xs) != 0 || stats_of(xs, &st) != 0)
        st = Stats{};
      for (auto& o : obs)
        o(dev, (size_t)st.allocated_bytes.current, (size_t)st.device_total, free_b);
    }
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (xseg). ", msg);
  }

  void after_alloc(void* p, size_t n, DeviceIndex dev, cudaStream_t stream) {
    std::shared_ptr<c10::GatheredContext> ctx;
    cca::CreateContextFn rec = nullptr;
    {
      std::lock_guard<std::mutex> g(mu_);
      rec = record_ && when_ != cca::RecordContext::NEVER ? recorder_ : nullptr;
    }
    if (rec)
      ctx = rec(); // may take the GIL: outside the lock
    std::lock_guard<std::mutex> g(mu_);
    if (dev >= 0 && dev < kMaxDevices && capture_on_[dev]) {
      pools_[{dev, capture_[dev]}][p] = n;
      pool_of_[p] = {dev, capture_[dev]};
      pool_ptrs_.store(true, std::memory_order_release);
    }
    if (ctx && when_ != cca::RecordContext::NEVER)
      contexts_[p] = ctx;
    trace(cca::TraceEntry::ALLOC, dev, (size_t)p, n, stream,
          when_ >= cca::RecordContext::ALLOC ? ctx : nullptr);
  }

  void before_free(void* ptr) {
    std::shared_ptr<c10::GatheredContext> ctx;
    cca::CreateContextFn rec = nullptr;
    {
      std::lock_guard<std::mutex> g(mu_);
      rec = record_ && when_ == cca::RecordContext::ALL ? recorder_ : nullptr;
    }
    if (rec)
      ctx = rec();
    std::lock_guard<std::mutex> g(mu_);
    DeviceIndex dev = -1;
    auto it = pool_of_.find(ptr);
    if (it != pool_of_.end()) {
      dev = (DeviceIndex)it->second.first;
      pools_[it->second].erase(ptr);
      pool_of_.erase(it);
      pool_ptrs_.store(!pool_of_.empty(), std::memory_order_release);
    }
    contexts_.erase(ptr);
    if (dev < 0)
      dev = device_of(ptr);
    trace(cca::TraceEntry::FREE_REQUESTED, dev, (size_t)ptr, 0, nullptr, ctx);
    trace(cca::TraceEntry::FREE_COMPLETED, dev, (size_t)ptr, 0, nullptr, ctx);
  }

  DeviceIndex device_of(void* ptr) {
    size_t r = 0;
    for (int d = 0; d < kMaxDevices; d++) {
      void* xs = nullptr;
      if (((used_.load() >> d) & 1) && api.get_default(d, &xs) == 0 &&
          api.block_size(xs, ptr, &r, nullptr) == 0)
        return (DeviceIndex)d;
    }
    return 0;
  }

  static const char* action_name(cca::TraceEntry::Action a) {
    switch (a) {
      case cca::TraceEntry::ALLOC: return "alloc";
      case cca::TraceEntry::FREE_REQUESTED: return "free_requested";
      case cca::TraceEntry::FREE_COMPLETED: return "free_completed";
      case cca::TraceEntry::OOM: return "oom";
      default: return "";
    }
  }

  // mu_ held.
  void trace(cca::TraceEntry::Action action, DeviceIndex dev, size_t addr, size_t size,
             cudaStream_t stream, std::shared_ptr<c10::GatheredContext> ctx) {
    if (!record_ && trackers_.empty())
      return;
    cca::TraceEntry te(action, dev, addr, size, stream, MempoolId_t{0, 0},
                       c10::getApproximateTime(), std::move(ctx));
    for (auto& t : trackers_)
      t(te);
    if (!record_ || skip_.count(action_name(action)))
      return;
    auto& q = traces_[dev];
    q.push_back(std::move(te));
    while (q.size() > max_entries_)
      q.pop_front();
  }

 public:
  // snapshot() helpers, mu_ held.
  std::shared_ptr<c10::GatheredContext> context_of(size_t addr) {
    auto it = contexts_.find(reinterpret_cast<void*>(addr));
    return it == contexts_.end() ? nullptr : it->second;
  }
  std::mutex mu_;
  std::unordered_map<int, std::deque<cca::TraceEntry>> traces_;
  std::atomic<uint64_t> used_{0};
  int device_count_ = 0;

 private:
  std::atomic<bool> initialized_{false}, capturing_{false}, tracing_{false}, pool_ptrs_{false};
  bool enabled_ = true;
  std::map<int, double> fraction_;
  std::map<int, Stats> base_;
  std::array<MempoolId_t, kMaxDevices> capture_{};
  std::array<bool, kMaxDevices> capture_on_{};
  std::map<std::pair<int, MempoolId_t>, std::map<void*, size_t>> pools_;
  std::unordered_map<void*, std::pair<int, MempoolId_t>> pool_of_;
  std::vector<cca::OutOfMemoryObserver> observers_;
  // CUDA IPC: blocks exported (their descriptions' descriptors open until
  // the block is freed), and blocks imported, by handle
  std::unordered_map<void*, ExportDesc> exported_;
  std::atomic<bool> exported_any_{false};
  std::unordered_map<std::string, std::weak_ptr<void>> imported_;
  std::vector<cca::AllocatorTraceTracker> trackers_;
  bool record_ = false;
  cca::CreateContextFn recorder_ = nullptr;
  cca::RecordContext when_ = cca::RecordContext::NEVER;
  size_t max_entries_ = 1;
  std::set<std::string> skip_;
  std::unordered_map<void*, std::shared_ptr<c10::GatheredContext>> contexts_;
};

// Never destroyed: tensors freed by exit handlers and static destructors
// still find it (as libxseg's own allocators, docs/pytorch.md).
static XsegAllocator* g_alloc = new XsegAllocator();

static void raw_free(void* ptr) {
  g_alloc->free(ptr);
}

// ---- snapshot: xseg's mapped runs as PyTorch segments ----

struct Piece {
  uint64_t addr, size, requested;
  bool allocated, active;
};

// The blocks of one xseg segment, slabs opened into their slots, in
// address order.
static std::vector<Piece> pieces_of(const Json& seg) {
  std::vector<Piece> out;
  const Json* blocks = seg.get("blocks");
  if (!blocks)
    return out;
  for (const Json& b : blocks->arr) {
    std::string state = b.s("state");
    uint64_t a = b.u("addr"), n = b.u("size");
    if (state != "slab") {
      bool alloc = state == "allocated", pend = state == "pending";
      out.push_back({a, n, alloc || pend ? b.u("requested") : 0, alloc, alloc || pend});
      continue;
    }
    uint64_t slot = b.u("slot_size"), cur = a;
    const Json* live = b.get("live");
    for (size_t i = 0; live && i < live->arr.size(); i++) {
      const Json& s = live->arr[i];
      if (s.arr.size() < 2)
        continue;
      uint64_t sa = s.arr[0].num, req = s.arr[1].num;
      if (sa > cur)
        out.push_back({cur, sa - cur, 0, false, false});
      out.push_back({sa, slot, req, true, true});
      cur = sa + slot;
    }
    if (cur < a + n)
      out.push_back({cur, a + n - cur, 0, false, false});
  }
  return out;
}

static void add_segments(int device, const Json& seg, std::vector<cca::SegmentInfo>& out) {
  std::vector<Piece> pieces = pieces_of(seg);
  const Json* runs = seg.get("mapped");
  if (!runs)
    return;
  for (const Json& run : runs->arr) {
    if (run.arr.size() < 2)
      continue;
    uint64_t lo = run.arr[0].num, hi = lo + run.arr[1].num, cur = lo;
    cca::SegmentInfo si;
    si.device = (DeviceIndex)device;
    si.address = (decltype(si.address))lo;
    si.total_size = (decltype(si.total_size))(hi - lo);
    si.is_large = true;
    si.is_expandable = true;
    for (const Piece& p : pieces) {
      uint64_t a = std::max(p.addr, lo), b = std::min(p.addr + p.size, hi);
      if (b <= a)
        continue;
      if (a > cur) { // a gap in the block list: shown free
        cca::BlockInfo gap;
        gap.size = (decltype(gap.size))(a - cur);
        si.blocks.push_back(gap);
      }
      cca::BlockInfo bi;
      bi.size = (decltype(bi.size))(b - a);
      bi.requested_size = (decltype(bi.requested_size))std::min(p.requested, b - a);
      bi.allocated = p.allocated;
      bi.active = p.active;
      if (p.allocated)
        bi.context_when_allocated = g_alloc->context_of((size_t)p.addr);
      si.allocated_size += p.allocated ? bi.size : 0;
      si.active_size += p.active ? bi.size : 0;
      si.requested_size += bi.requested_size;
      si.blocks.push_back(std::move(bi));
      cur = b;
    }
    if (cur < hi) {
      cca::BlockInfo tail;
      tail.size = (decltype(tail.size))(hi - cur);
      si.blocks.push_back(tail);
    }
    out.push_back(std::move(si));
  }
}

cca::SnapshotInfo XsegAllocator::snapshot(MempoolId_t mempool_id, bool include_traces) {
  cca::SnapshotInfo info{};
  int ndev = std::max(device_count_, 1);
  uint64_t used = used_.load();
  std::vector<Json> snaps(kMaxDevices);
  bool default_pool = mempool_id.first == 0 && mempool_id.second == 0;
  for (int d = 0; d < kMaxDevices && default_pool; d++)
    if ((used >> d) & 1) {
      snaps[d] = snapshot_of(d);
      ndev = std::max(ndev, d + 1);
    }
  std::lock_guard<std::mutex> g(mu_);
  for (int d = 0; d < kMaxDevices; d++) {
    const Json* segs = snaps[d].get("segments");
    for (size_t i = 0; segs && i < segs->arr.size(); i++)
      add_segments(d, segs->arr[i], info.segments);
  }
  info.device_traces.resize((size_t)ndev);
  for (auto& kv : traces_)
    if (include_traces && kv.first >= 0 && kv.first < ndev)
      info.device_traces[(size_t)kv.first].assign(kv.second.begin(), kv.second.end());
  info.config_metadata.garbage_collection_threshold = 0.0;
  info.config_metadata.max_split_size = SIZE_MAX;
  info.config_metadata.expandable_segments = true;
  info.config_metadata.last_allocator_settings = "xseg";
  return info;
}

// ---- install ----

static std::string g_installed_lib;

// Makes xseg PyTorch's CUDA allocator.  PyTorch refuses a swap once its
// allocator has been initialised (its first CUDA allocation or memory
// call): then this fails and nothing changes.
void install(const std::string& libpath, const std::string& running_torch) {
  TORCH_CHECK(running_torch == XSEG_TORCH_VERSION,
              "xseg native: this module was built for torch ", XSEG_TORCH_VERSION,
              " and torch ", running_torch, " is running; it is rebuilt on the next "
              "xseg.install() (cache: ~/.cache/xseg/native)");
  if (cca::allocator.load() == g_alloc)
    return;
  load_api(libpath);
  cca::CUDAAllocator* cur = cca::allocator.load();
  TORCH_CHECK(!cur || !cur->initialized(),
              "xseg native: PyTorch's CUDA allocator (", cur ? cur->name() : "none",
              ") is initialised already (CUDA memory was used); call xseg.install() "
              "before the first CUDA tensor");
  g_alloc->init(c10::cuda::device_count());
  cca::allocator.store(g_alloc);
  // torch registers its own caching allocator for kCUDA at static init too
  // (c10::GetAllocator, c10::getDeviceAllocator: torch.accelerator's memory
  // calls); without this they would reach that one, never initialised.
  c10::SetAllocator(c10::DeviceType::CUDA, g_alloc, 0);
  g_installed_lib = libpath;
}

bool installed() {
  return cca::allocator.load() == g_alloc;
}

} // namespace xseg_native

#ifdef XSEG_NATIVE_WITH_PYTHON
#include <torch/extension.h>

#ifndef TORCH_EXTENSION_NAME
#define TORCH_EXTENSION_NAME xseg_native
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "xseg's native PyTorch CUDA allocator (tools/python/xseg/native)";
  m.def("install", &xseg_native::install, "make xseg PyTorch's CUDA allocator");
  m.def("installed", &xseg_native::installed);
  m.def("built_torch_version", []() { return std::string(XSEG_TORCH_VERSION); });
  m.def("header_torch_version", []() { return std::string(TORCH_VERSION); });
  m.def("library", []() { return xseg_native::g_installed_lib; });
  m.def("_pool_tracked", [](int device) { return xseg_native::g_alloc->pool_tracked(device); });
  m.def("_trace_length", [](int device) { return xseg_native::g_alloc->trace_length(device); });
  m.def("_cache_info", [](int device) {
    size_t v = 0;
    xseg_native::g_alloc->cacheInfo((c10::DeviceIndex)device, &v);
    return v;
  });
}
#endif
