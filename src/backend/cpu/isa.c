/* isa.c — picks the CPU backend's ISA tier at runtime: cpuid for the instruction sets, XCR0
 * (xgetbv) for the OS actually saving the AVX / AVX-512 register state. The choice is the
 * backend's only global: detected once (first call), logged once, overridable by tests.
 * Threading: any thread; detection races are harmless (same answer, one log line may repeat
 * only if two threads race the very first call). */
#include "backend/cpu/ops.h"

#include <stdatomic.h>

#include "core/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define FT_X86 1
#endif

static atomic_int g_isa = -1;    /* the tier kernels use now */
static atomic_int g_isa_hw = -1; /* the best tier this machine has */

const char *ft_cpu_isa_name(enum ft_cpu_isa isa) {
    switch (isa) {
    case FT_ISA_SCALAR: return "scalar";
    case FT_ISA_AVX2: return "avx2";
    case FT_ISA_AVX512: return "avx512";
    case FT_ISA_AVX512_BF16: return "avx512-bf16";
    }
    return "?";
}

#ifdef FT_X86
/* XCR0: which register states the OS saves on context switch. */
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static enum ft_cpu_isa detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return FT_ISA_SCALAR;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx || !fma || !f16c) return FT_ISA_SCALAR;
    uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return FT_ISA_SCALAR; /* XMM + YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return FT_ISA_SCALAR;
    int avx2 = (b >> 5) & 1, f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    if (!avx2) return FT_ISA_SCALAR;
    /* opmask + ZMM0-15 upper halves + ZMM16-31 */
    if (!(f && bw && vl) || (xcr0 & 0xe0) != 0xe0) return FT_ISA_AVX2;
    unsigned a1 = 0, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && ((a1 >> 5) & 1)) return FT_ISA_AVX512_BF16;
    return FT_ISA_AVX512;
}
#else
static enum ft_cpu_isa detect(void) {
    return FT_ISA_SCALAR;
}
#endif

static enum ft_cpu_isa hw_isa(void) {
    int v = atomic_load_explicit(&g_isa_hw, memory_order_acquire);
    if (v >= 0) return (enum ft_cpu_isa)v;
    enum ft_cpu_isa isa = detect();
    int expect = -1;
    if (atomic_compare_exchange_strong(&g_isa_hw, &expect, (int)isa)) {
        if (isa == FT_ISA_AVX512_BF16)
            ft_log_info("cpu: ISA avx512 (avx512-bf16 available)");
        else
            ft_log_info("cpu: ISA %s", ft_cpu_isa_name(isa));
    }
    return (enum ft_cpu_isa)atomic_load(&g_isa_hw);
}

enum ft_cpu_isa ft_cpu_isa(void) {
    int v = atomic_load_explicit(&g_isa, memory_order_relaxed);
    if (v >= 0) return (enum ft_cpu_isa)v;
    enum ft_cpu_isa isa = hw_isa();
    int expect = -1;
    atomic_compare_exchange_strong(&g_isa, &expect, (int)isa);
    return (enum ft_cpu_isa)atomic_load(&g_isa);
}

enum ft_cpu_isa ft_cpu_set_isa(enum ft_cpu_isa isa) {
    enum ft_cpu_isa hw = hw_isa();
    if ((int)isa < (int)FT_ISA_SCALAR) isa = FT_ISA_SCALAR;
    if ((int)isa > (int)hw) isa = hw;
    atomic_store(&g_isa, (int)isa);
    return isa;
}
