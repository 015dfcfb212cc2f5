/* device.h — CUDA device discovery (C interface to device.cu), and the watched wait for a
 * stream (the expert-copy watchdog, moe/offload.c) with its test stall. Built only with
 * FT_HAVE_CUDA. Any thread; does not create a context beyond what the runtime needs to
 * answer. */
#ifndef FT_BACKEND_CUDA_DEVICE_H
#define FT_BACKEND_CUDA_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"

struct CUstream_st; /* cudaStream_t, without the CUDA headers */

#ifdef __cplusplus
extern "C" {
#endif

struct ft_cuda_device {
    char name[256];
    int cc_major, cc_minor;
    int n_sms;
    size_t free_bytes, total_bytes;
};

/* Number of usable CUDA devices (0 when there is no driver or no GPU: never an error). */
int ft_cuda_device_count(void);
/* Name, compute capability, SMs and free/total memory of device `dev`. */
enum ft_status ft_cuda_device_query(int dev, struct ft_cuda_device *out);
/* Waits for everything queued on stream s, polling (cudaStreamQuery) until the clock
 * (ft_time_ns) passes deadline_ns: FT_OK, FT_ERR_BUSY when it is not done by then (no
 * ft_error message: the caller says what hung), or FT_ERR_CUDA for a failure of its work. */
enum ft_status ft_cuda_stream_wait(struct CUstream_st *s, int64_t deadline_ns);
/* Tests (FT_TEST_COPY_STALL): a one-thread kernel on s that holds the stream ms ms, as a DMA
 * that the driver does not complete would. */
void ft_cuda_stall_stream(struct CUstream_st *s, int ms);

#ifdef __cplusplus
}
#endif
#endif
