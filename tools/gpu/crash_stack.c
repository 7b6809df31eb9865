/* crash_stack.c: an LD_PRELOAD helper for GPU machines without gdb.  On
 * SIGSEGV or SIGABRT it writes to stderr the C stack (backtrace(), each
 * frame as object+offset), the faulting address and instruction, and the
 * 24 words at the stack pointer resolved with dladdr (a call through a null
 * pointer leaves nothing for backtrace() to unwind, but its return address
 * is the first word there), then dies of the same signal.  It found the
 * reclaim worker's abort inside cuMemUnmap and the null call in the native
 * module's message formatting (docs/pytorch.md).  Offsets resolve with
 * `addr2line -f -e OBJECT 0xOFFSET` against the same build.
 *   gcc -shared -fPIC -O1 -o /tmp/crash_stack.so tools/gpu/crash_stack.c -ldl
 *   LD_PRELOAD=/tmp/crash_stack.so python3 ...   (disable Python's
 *   faulthandler, which takes the same signals: native_proof.py has
 *   XSEG_PROOF_NO_FAULTHANDLER=1) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static void say(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

/* One line: what, the address, and the object and symbol it lies in. */
static void where(const char *what, void *a)
{
    Dl_info i;
    char buf[640];
    if (a && dladdr(a, &i) && i.dli_fname)
        snprintf(buf, sizeof buf, "%s %p = %s+0x%lx (%s)\n", what, a, i.dli_fname,
                 (unsigned long)((char *)a - (char *)i.dli_fbase),
                 i.dli_sname ? i.dli_sname : "?");
    else
        snprintf(buf, sizeof buf, "%s %p\n", what, a);
    say(buf);
}

static void on_signal(int sig, siginfo_t *si, void *ucv)
{
    char buf[128];
    snprintf(buf, sizeof buf, "=== crash_stack: signal %d, address %p\n", sig, si->si_addr);
    say(buf);
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, 2);
#if defined(__x86_64__)
    ucontext_t *uc = ucv;
    where("instruction", (void *)uc->uc_mcontext.gregs[REG_RIP]);
    void **sp = (void **)uc->uc_mcontext.gregs[REG_RSP];
    for (int k = 0; k < 24; k++)
        where("stack word", sp[k]);
#else
    (void)ucv;
#endif
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void crash_stack_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGABRT, &sa, NULL);
}
