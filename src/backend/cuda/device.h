/* device.h — CUDA device discovery (C interface to device.cu). Built only with FT_HAVE_CUDA.
 * Any thread; does not create a context beyond what the runtime needs to answer. */
#ifndef FT_BACKEND_CUDA_DEVICE_H
#define FT_BACKEND_CUDA_DEVICE_H

#include <stddef.h>

#include "ft.h"

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

#ifdef __cplusplus
}
#endif
#endif
