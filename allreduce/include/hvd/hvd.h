/* libhvd's C API: collectives for programs in any language.
 *
 * Every call returns an hvd_status; on failure hvd_last_error() holds a message (per thread) that
 * says what failed, where, and what to do. Calls are thread-safe; collectives run one at a time in
 * the order each rank calls them, and every rank must call the same collectives in the same order.
 * Buffers are host memory (the C++ API, hvd/hvd.hpp, also describes device tensors).
 *
 * This header includes nothing but the C standard library, so any program can use it. */
#ifndef HVD_HVD_H_
#define HVD_HVD_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define HVD_API __attribute__((visibility("default")))
#else
#define HVD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hvd_status {
  HVD_OK = 0,
  HVD_ERR_NOT_INITIALIZED = 1,  /* called before hvd_init() or after hvd_shutdown() */
  HVD_ERR_INVALID_ARGUMENT = 2, /* a bad buffer, count, type, op or root on this rank */
  HVD_ERR_UNSUPPORTED = 3,      /* this build or backend cannot do it (e.g. no NCCL) */
  HVD_ERR_CONFIG = 4,           /* bad environment: HOROVOD_* / HVD_* values, backend choice */
  HVD_ERR_BACKEND = 5,          /* the engine (MPI, Gloo) failed (a lost peer: PEER_LOST) */
  HVD_ERR_TIMEOUT = 6,          /* a peer did not join or answer in time */
  HVD_ERR_INTERNAL = 7,         /* a bug in libhvd: please report it */
  HVD_ERR_PEER_LOST = 8,        /* a peer died, was killed or cannot be reached any more */
  HVD_HOSTS_UPDATED = 9,        /* elastic: hvdrun announced a new world (hvd_elastic_commit) */
  HVD_ERR_REMOVED = 10          /* elastic: this process is not in the job's new world (its host
                                   left it); hvdrun stops it */
} hvd_status;

typedef enum hvd_dtype {
  HVD_UINT8 = 0,
  HVD_INT8 = 1,
  HVD_INT32 = 2,
  HVD_INT64 = 3,
  HVD_FLOAT16 = 4,  /* IEEE 754 binary16 */
  HVD_BFLOAT16 = 5, /* the upper 16 bits of a float32 */
  HVD_FLOAT32 = 6,
  HVD_FLOAT64 = 7,
  HVD_INT16 = 8 /* appended after the others: the values above never change */
} hvd_dtype;

typedef enum hvd_op {
  HVD_SUM = 0,
  HVD_AVERAGE = 1, /* sum / size; integer types truncate toward zero */
  HVD_MIN = 2,
  HVD_MAX = 3,
  HVD_PRODUCT = 4
} hvd_op;

/* Allocates `bytes` bytes for an output whose size is known only during the call (allgather,
 * reducescatter, alltoall). Returns NULL to fail the call. `user` is passed through. */
typedef void* (*hvd_alloc_fn)(size_t bytes, void* user);

HVD_API hvd_status hvd_init(void);     /* idempotent; reads the launcher's environment */
HVD_API hvd_status hvd_shutdown(void); /* idempotent; no call but hvd_last_error after it */
HVD_API int hvd_is_initialized(void);

HVD_API hvd_status hvd_rank(int* out);
HVD_API hvd_status hvd_size(int* out);
HVD_API hvd_status hvd_local_rank(int* out);
HVD_API hvd_status hvd_local_size(int* out);
HVD_API hvd_status hvd_cross_rank(int* out);
HVD_API hvd_status hvd_cross_size(int* out);
/* The CUDA device this rank should use (local rank modulo visible devices), or -1. */
HVD_API hvd_status hvd_gpu_device(int* out);
/* "mpi" or "gloo"; NULL when not initialised. The string lives until hvd_shutdown(). */
HVD_API const char* hvd_backend_name(void);

/* `count` elements of `in` reduced across ranks into `out` (in == out for in place). The input
 * is multiplied by `prescale` before and the result by `postscale` after the reduction
 * (floating-point types only; pass 1.0 otherwise). */
HVD_API hvd_status hvd_allreduce(const void* in, void* out, size_t count, hvd_dtype dtype,
                                 hvd_op op, double prescale, double postscale);
/* `count` elements of `data` on rank `root` copied to every rank's `data`. */
HVD_API hvd_status hvd_broadcast(void* data, size_t count, hvd_dtype dtype, int root);
/* Every rank's `count` elements (counts may differ), concatenated in rank order into a buffer
 * from `alloc`; its element count goes to *out_count. */
HVD_API hvd_status hvd_allgather(const void* in, size_t count, hvd_dtype dtype, hvd_alloc_fn alloc,
                                 void* user, size_t* out_count);
/* The element-wise reduction (HVD_SUM or HVD_AVERAGE) of every rank's `count` elements (the same
 * count everywhere), split into `size` blocks, the first count % size one element longer; rank r
 * receives block r. */
HVD_API hvd_status hvd_reducescatter(const void* in, size_t count, hvd_dtype dtype, hvd_op op,
                                     hvd_alloc_fn alloc, void* user, size_t* out_count);
/* hvd_reducescatter with hvd_allreduce's factors: every rank's input is multiplied by `prescale`
 * (in a copy: `in` is not written) before and the received block by `postscale` after the
 * reduction (floating-point types only; pass 1.0 otherwise). */
HVD_API hvd_status hvd_reducescatter_scaled(const void* in, size_t count, hvd_dtype dtype,
                                            hvd_op op, double prescale, double postscale,
                                            hvd_alloc_fn alloc, void* user, size_t* out_count);
/* `splits[i]` elements (in order) go to rank i; splits == NULL sends count / size to each rank
 * (count must divide evenly). Received blocks are concatenated in rank order; if `recv_splits`
 * is not NULL it receives `size` entries: the elements received from each rank. */
HVD_API hvd_status hvd_alltoall(const void* in, size_t count, const int64_t* splits,
                                hvd_dtype dtype, hvd_alloc_fn alloc, void* user, size_t* out_count,
                                int64_t* recv_splits);
HVD_API hvd_status hvd_barrier(void);

/* Process sets (hvd/hvd.hpp and docs/libhvd.md say the rules): collectives among a subset of the
 * ranks. Set 0 is the global set (every rank). hvd_init_process_sets is hvd_init with static
 * sets: `num_sets` lists, set i being set_sizes[i] ranks, one list after the other in `ranks`
 * (ids 1, 2, ... in that order); `dynamic` non-zero allows hvd_add_process_set and
 * hvd_remove_process_set later (as HOROVOD_DYNAMIC_PROCESS_SETS=1 does). Adding and removing are
 * collective over every rank, in the same order with the same ranks (a difference is
 * HVD_ERR_INVALID_ARGUMENT on every rank). A rank outside a set that submits to it gets
 * HVD_ERR_INVALID_ARGUMENT; broadcast roots are global ranks. */
HVD_API hvd_status hvd_init_process_sets(const int* ranks, const int* set_sizes, int num_sets,
                                         int dynamic);
HVD_API hvd_status hvd_add_process_set(const int* ranks, int count, int* out_id);
HVD_API hvd_status hvd_remove_process_set(int id);
HVD_API hvd_status hvd_process_set_rank(int id, int* out); /* error when not in the set */
HVD_API hvd_status hvd_process_set_size(int id, int* out);
/* The set's global ranks (sorted): at most `capacity` into `ranks`, the count into *out_count. */
HVD_API hvd_status hvd_process_set_ranks(int id, int* ranks, int capacity, int* out_count);
/* Every set's id (0 first): at most `capacity` into `ids`, the count into *out_count. */
HVD_API hvd_status hvd_process_set_ids(int* ids, int capacity, int* out_count);
/* The collectives above on process set `set` (alltoall's splits: one per rank of the set). */
HVD_API hvd_status hvd_allreduce_on(int set, const void* in, void* out, size_t count,
                                    hvd_dtype dtype, hvd_op op, double prescale, double postscale);
HVD_API hvd_status hvd_broadcast_on(int set, void* data, size_t count, hvd_dtype dtype, int root);
HVD_API hvd_status hvd_allgather_on(int set, const void* in, size_t count, hvd_dtype dtype,
                                    hvd_alloc_fn alloc, void* user, size_t* out_count);
HVD_API hvd_status hvd_reducescatter_on(int set, const void* in, size_t count, hvd_dtype dtype,
                                        hvd_op op, double prescale, double postscale,
                                        hvd_alloc_fn alloc, void* user, size_t* out_count);
HVD_API hvd_status hvd_alltoall_on(int set, const void* in, size_t count, const int64_t* splits,
                                   hvd_dtype dtype, hvd_alloc_fn alloc, void* user,
                                   size_t* out_count, int64_t* recv_splits);
HVD_API hvd_status hvd_barrier_on(int set);
/* Grouped allreduce (hvd::grouped_allreduce in hvd/hvd.hpp, docs/libhvd.md): `num` buffers,
 * buffer i being counts[i] elements of `dtype` at in[i] reduced into out[i] (in[i] == out[i] for
 * in place), negotiated and run as one unit: libhvd waits until every buffer of the group is
 * ready on every rank, runs them together, and they succeed or fail together. Every rank passes
 * the same number of buffers with the same counts. */
HVD_API hvd_status hvd_grouped_allreduce(const void* const* in, void* const* out,
                                         const size_t* counts, int num, hvd_dtype dtype, hvd_op op,
                                         double prescale, double postscale);
HVD_API hvd_status hvd_grouped_allreduce_on(int set, const void* const* in, void* const* out,
                                            const size_t* counts, int num, hvd_dtype dtype,
                                            hvd_op op, double prescale, double postscale);
/* hvd::join (hvd/hvd.hpp): waits until every rank joined, adding zeros to the others' allreduces
 * meanwhile; *last_rank (may be NULL) receives the last rank to join. */
HVD_API hvd_status hvd_join(int* last_rank);

/* The timeline (docs/libhvd.md): rank 0 records every tensor's negotiation and collectives into
 * `file_path`, a Chrome trace (JSON) with Horovod's names, until hvd_stop_timeline(); with
 * `mark_cycles` non-zero, each negotiation cycle is marked (CYCLE_START). Not collective: only
 * rank 0 writes; the other ranks' calls check the arguments and return. A start while recording
 * into another file closes that one first; into the same file, it only sets mark_cycles. A file
 * that cannot be written is HVD_ERR_INVALID_ARGUMENT on rank 0. hvd_stop_timeline() returns once
 * the file is complete (valid JSON); without a timeline it does nothing. HOROVOD_TIMELINE=FILE
 * starts one at init. */
HVD_API hvd_status hvd_start_timeline(const char* file_path, int mark_cycles);
HVD_API hvd_status hvd_stop_timeline(void);

/* What this libhvd was built with and what works on this host now (engines, NCCL and CUDA
 * versions, visible GPUs), as a JSON object: `hvdrun --check-build` prints it. Writes at most
 * len bytes (NUL-terminated) and returns the size needed; 0 on an internal error. Needs no
 * hvd_init(). */
HVD_API size_t hvd_build_report(char* buf, size_t len);

/* Elastic training (the C++ API, hvd/elastic.hpp, says more; docs/elastic.md): the buffers a
 * training step needs, kept at each commit and restored and re-synchronised when the world
 * changes under `hvdrun --min-np`. The buffers must stay alive and in place while the state is
 * used. */
typedef struct hvd_elastic_state hvd_elastic_state;
HVD_API hvd_status hvd_elastic_state_new(hvd_elastic_state** out);
HVD_API void hvd_elastic_state_free(hvd_elastic_state* state);
HVD_API hvd_status hvd_elastic_state_add(hvd_elastic_state* state, const char* name, void* data,
                                         size_t bytes);
/* Keeps a copy of every buffer, then asks the other ranks (a collective) whether hvdrun announced
 * a new world: HVD_HOSTS_UPDATED then, on every rank at once. */
HVD_API hvd_status hvd_elastic_commit(hvd_elastic_state* state);
/* Runs `fn(user)` until it returns HVD_OK. When it returns HVD_ERR_PEER_LOST (a collective in it
 * failed so) or HVD_HOSTS_UPDATED (from hvd_elastic_commit), the state goes back to the last
 * commit (not for HOSTS_UPDATED: nothing was lost), libhvd moves to hvdrun's next world (new rank
 * and size), copies the state from the rank that has it and calls `fn` again. Any other status
 * from `fn` is returned as it is (hvd_last_error() is kept). Outside an elastic hvdrun job `fn`
 * runs once. Returns HVD_ERR_TIMEOUT or HVD_ERR_CONFIG when a reset cannot be done. */
HVD_API hvd_status hvd_elastic_run(hvd_elastic_state* state, int (*fn)(void* user), void* user);
/* The world's generation (0 at start), this process's worker id (its rank in generation 0, which
 * never changes) and the resets it went through; any pointer may be NULL. */
HVD_API hvd_status hvd_elastic_world(int* generation, int* worker, int* resets);

/* The message of this thread's last failed call ("" if none). Valid until the next call. */
HVD_API const char* hvd_last_error(void);
/* "HVD_OK", "HVD_ERR_TIMEOUT", ... */
HVD_API const char* hvd_status_name(hvd_status status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HVD_HVD_H_ */
