/* gpu_kernels.h: the GPU test suite's kernels, written by hand in PTX so
 * that the tests need no CUDA compiler: the driver JIT-compiles this text
 * (cuModuleLoadData) for whatever device runs it.
 *
 * Every kernel walks 32-bit words with a grid-stride loop.  The pattern of
 * word i of a buffer filled with `seed` is  (i * 0x9E3779B1) ^ seed  (i
 * taken modulo 2^32), so two buffers with different seeds never agree on a
 * word and a word moved to another offset is caught too.
 *
 *   xg_fill(u32 *p, u64 nwords, u32 seed)
 *       p[i] = pattern(i, seed)
 *   xg_check(const u32 *p, u64 nwords, u32 seed, u32 *bad)
 *       atomically adds 1 to *bad for each word that differs from the pattern
 *   xg_spin_fill(u32 *p, u64 nwords, u32 seed, u64 ns)
 *       each thread first spins on %globaltimer for `ns` nanoseconds, then
 *       fills like xg_fill: a kernel that writes a buffer long after launch.
 */
#ifndef XSEG_TESTS_GPU_KERNELS_H
#define XSEG_TESTS_GPU_KERNELS_H

#define XG_PATTERN_MUL 0x9E3779B1u

/* Host-side copy of the pattern (for checks done on the CPU). */
static inline unsigned xg_pattern(unsigned long long i, unsigned seed)
{
    return ((unsigned)i * XG_PATTERN_MUL) ^ seed;
}

/* Shared prologue: %rd3 = global thread index, %rd5 = grid stride. */
#define XG_PTX_INDEX                                                   \
    "  mov.u32 %r2, %ctaid.x;\n"                                       \
    "  mov.u32 %r3, %ntid.x;\n"                                        \
    "  mov.u32 %r4, %tid.x;\n"                                         \
    "  mul.wide.u32 %rd3, %r2, %r3;\n"                                 \
    "  cvt.u64.u32 %rd4, %r4;\n"                                       \
    "  add.u64 %rd3, %rd3, %rd4;\n"                                    \
    "  mov.u32 %r5, %nctaid.x;\n"                                      \
    "  mul.wide.u32 %rd5, %r5, %r3;\n"

/* Shared fill loop over [%rd3, %rd2) with pointer %rd1 and seed %r1. */
#define XG_PTX_FILL_LOOP                                               \
    "FILL:\n"                                                          \
    "  setp.ge.u64 %p1, %rd3, %rd2;\n"                                 \
    "  @%p1 bra FILL_DONE;\n"                                          \
    "  cvt.u32.u64 %r6, %rd3;\n"                                       \
    "  mul.lo.u32 %r6, %r6, 0x9E3779B1;\n"                             \
    "  xor.b32 %r6, %r6, %r1;\n"                                       \
    "  shl.b64 %rd6, %rd3, 2;\n"                                       \
    "  add.u64 %rd7, %rd1, %rd6;\n"                                    \
    "  st.global.u32 [%rd7], %r6;\n"                                   \
    "  add.u64 %rd3, %rd3, %rd5;\n"                                    \
    "  bra FILL;\n"                                                    \
    "FILL_DONE:\n"                                                     \
    "  ret;\n"

static const char xg_ptx[] =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry xg_fill(.param .u64 a_p, .param .u64 a_n, .param .u32 a_seed)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<8>;\n"
    "  .reg .b64 %rd<10>;\n"
    "  ld.param.u64 %rd1, [a_p];\n"
    "  ld.param.u64 %rd2, [a_n];\n"
    "  ld.param.u32 %r1, [a_seed];\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n"
    XG_PTX_INDEX
    XG_PTX_FILL_LOOP
    "}\n"
    "\n"
    ".visible .entry xg_check(.param .u64 a_p, .param .u64 a_n, .param .u32 a_seed,\n"
    "                         .param .u64 a_bad)\n"
    "{\n"
    "  .reg .pred %p<3>;\n"
    "  .reg .b32 %r<10>;\n"
    "  .reg .b64 %rd<10>;\n"
    "  ld.param.u64 %rd1, [a_p];\n"
    "  ld.param.u64 %rd2, [a_n];\n"
    "  ld.param.u32 %r1, [a_seed];\n"
    "  ld.param.u64 %rd8, [a_bad];\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n"
    "  cvta.to.global.u64 %rd8, %rd8;\n"
    XG_PTX_INDEX
    "CHECK:\n"
    "  setp.ge.u64 %p1, %rd3, %rd2;\n"
    "  @%p1 bra CHECK_DONE;\n"
    "  cvt.u32.u64 %r6, %rd3;\n"
    "  mul.lo.u32 %r6, %r6, 0x9E3779B1;\n"
    "  xor.b32 %r6, %r6, %r1;\n"
    "  shl.b64 %rd6, %rd3, 2;\n"
    "  add.u64 %rd7, %rd1, %rd6;\n"
    "  ld.global.u32 %r7, [%rd7];\n"
    "  setp.ne.u32 %p2, %r7, %r6;\n"
    "  @%p2 red.global.add.u32 [%rd8], 1;\n"
    "  add.u64 %rd3, %rd3, %rd5;\n"
    "  bra CHECK;\n"
    "CHECK_DONE:\n"
    "  ret;\n"
    "}\n"
    "\n"
    ".visible .entry xg_spin_fill(.param .u64 a_p, .param .u64 a_n, .param .u32 a_seed,\n"
    "                             .param .u64 a_ns)\n"
    "{\n"
    "  .reg .pred %p<3>;\n"
    "  .reg .b32 %r<8>;\n"
    "  .reg .b64 %rd<12>;\n"
    "  ld.param.u64 %rd1, [a_p];\n"
    "  ld.param.u64 %rd2, [a_n];\n"
    "  ld.param.u32 %r1, [a_seed];\n"
    "  ld.param.u64 %rd8, [a_ns];\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n"
    "  mov.u64 %rd9, %globaltimer;\n"
    "SPIN:\n"
    "  mov.u64 %rd10, %globaltimer;\n"
    "  sub.u64 %rd11, %rd10, %rd9;\n"
    "  setp.lt.u64 %p2, %rd11, %rd8;\n"
    "  @%p2 bra SPIN;\n"
    XG_PTX_INDEX
    XG_PTX_FILL_LOOP
    "}\n";

#endif /* XSEG_TESTS_GPU_KERNELS_H */
