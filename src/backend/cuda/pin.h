/* pin.h — thin C wrappers over CUDA page-locking for the residency manager (mem/residency.c)
 * and the engines' staging buffers: register/unregister existing host memory (mapped,
 * portable), allocate/free pinned memory (the one-time pin probe, staging), clear the sticky
 * error a refused pin leaves behind. Every byte pinned through them is counted, and with an
 * emulated cap (--emulate-pin-cap, set by mem/residency.c) they refuse past it as a WSL2
 * driver does. Built only with FT_HAVE_CUDA. Any thread (the CUDA runtime is thread-safe; each
 * call uses the primary context of the current device). */
#ifndef FT_BACKEND_CUDA_PIN_H
#define FT_BACKEND_CUDA_PIN_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a CUDA device exists, so pinning means something (0: no driver or no GPU). */
int ft_cuda_pin_available(void);
/* cudaHostRegister(ptr, bytes, Mapped|Portable). A refusal returns FT_ERR_CUDA with the CUDA
 * message and leaves no sticky error behind. */
enum ft_status ft_cuda_host_register(void *ptr, size_t bytes);
void ft_cuda_host_unregister(void *ptr);
/* cudaHostAlloc(bytes, Portable|Mapped) for the pin probe; NULL when refused (the error is
 * left for ft_cuda_clear_error, which the probe calls once after its loop). Free it, and the
 * staging buffers below, with ft_cuda_free_host (a plain cudaFreeHost leaves its bytes counted
 * until a refusal would need them). */
void *ft_cuda_host_alloc_pinned(size_t bytes);
void ft_cuda_free_host(void *ptr);
/* cudaMallocHost(bytes) for the engines' staging buffers: NULL, and *st = FT_ERR_OOM naming the
 * size, when refused (the sticky error cleared); nothing is allocated when *st is already set. */
void *ft_cuda_staging_alloc(size_t bytes, enum ft_status *st);
/* The emulated pinned-memory wall (--emulate-pin-cap): registrations and allocations through
 * these wrappers are refused once the bytes they hold pinned at once would pass `bytes`, as
 * WDDM refuses past its cap (0: no wall). Process-wide, like the driver's. */
void ft_cuda_pin_set_cap(uint64_t bytes);
struct ft_cuda_pin_stats {
    uint64_t cap_bytes;     /* the emulated wall, 0 = none */
    uint64_t pinned_bytes;  /* pinned through these wrappers now */
    uint64_t peak_bytes;    /* the most pinned at once since the start (or the last reset) */
    long refused;           /* requests the wall refused */
};
void ft_cuda_pin_get_stats(struct ft_cuda_pin_stats *out);
/* Tests: peak = pinned now, refused = 0. */
void ft_cuda_pin_reset_peak(void);
/* cudaGetLastError(): clears the sticky error of a refused pin or allocation. */
void ft_cuda_clear_error(void);
/* cudaSetDevice for the calling thread (a refusal is cleared and ignored: the calls that
 * follow report it), so the pins' context is the device the engine will use. */
void ft_cuda_bind_device(int device);

#ifdef __cplusplus
}
#endif
#endif
