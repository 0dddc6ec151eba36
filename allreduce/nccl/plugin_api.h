/* The ABI between libhvd and its NCCL plugin (libhvd_nccl.so), loaded with dlopen at run time so
 * that one libhvd runs on hosts without CUDA or NCCL. Plain C, no CUDA or NCCL types: device
 * pointers and streams are void*, dtypes and ops are hvd_dtype / hvd_op values (hvd/hvd.h).
 *
 * Every call that can fail returns 0 on success, or non-zero with a message in err[err_len]. */
#ifndef HVD_NCCL_PLUGIN_API_H_
#define HVD_NCCL_PLUGIN_API_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_NCCL_PLUGIN_ABI 1
#define HVD_NCCL_UNIQUE_ID_BYTES 128
#define HVD_NCCL_PLUGIN_SYMBOL "hvd_nccl_plugin_v1"

typedef struct hvd_nccl_comm hvd_nccl_comm;

typedef struct hvd_nccl_plugin {
  int abi; /* HVD_NCCL_PLUGIN_ABI */
  /* Facts: NCCL's version code (e.g. 22809 for 2.28.9) of the loaded library; the CUDA runtime
   * version (e.g. 13000); the number of visible devices, or -1 with the reason in why. */
  int (*nccl_version)(void);
  int (*cuda_runtime_version)(void);
  int (*device_count)(char* why, size_t why_len);

  int (*unique_id)(void* id, char* err, size_t err_len); /* HVD_NCCL_UNIQUE_ID_BYTES bytes */
  /* Binds `device`, then joins the communicator (collective over every rank). */
  hvd_nccl_comm* (*comm_create)(const void* id, int nranks, int rank, int device, char* err,
                                size_t err_len);
  void (*comm_destroy)(hvd_nccl_comm* comm);
  void (*comm_abort)(hvd_nccl_comm* comm);

  /* Collectives on device buffers, queued on `stream` (NULL: the default stream). */
  int (*allreduce)(hvd_nccl_comm* comm, const void* in, void* out, size_t count, int dtype, int op,
                   void* stream, char* err, size_t err_len);
  int (*broadcast)(hvd_nccl_comm* comm, void* data, size_t count, int dtype, int root, void* stream,
                   char* err, size_t err_len);
  int (*allgather)(hvd_nccl_comm* comm, const void* in, void* out, size_t count_per_rank, int dtype,
                   void* stream, char* err, size_t err_len);
  int (*reducescatter)(hvd_nccl_comm* comm, const void* in, void* out, size_t count_per_rank,
                       int dtype, int op, void* stream, char* err, size_t err_len);
  /* Waits for `stream`, polling the communicator's asynchronous error: an NCCL failure aborts
   * the communicator and returns an error instead of hanging. */
  int (*synchronize)(hvd_nccl_comm* comm, void* stream, int timeout_ms, char* err, size_t err_len);
} hvd_nccl_plugin;

typedef const hvd_nccl_plugin* (*hvd_nccl_plugin_entry)(void);

#ifdef __cplusplus
}
#endif

#endif /* HVD_NCCL_PLUGIN_API_H_ */
