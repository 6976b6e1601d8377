/* ddpspawn's public C ABI: launch N worker processes, join them into a c10d process group, run
 * collectives, and hand a result back to the launcher.
 *
 * Conventions (stable across minor versions):
 * - Every fallible function returns a ddpspawn_status; DDPSPAWN_OK is 0. The message of the last
 *   failure on the calling thread is ddpspawn_last_error().
 * - Out-parameters are left untouched when a call fails.
 * - Handles are opaque; each *_destroy accepts NULL.
 * - Option structs carry their size as the first field: start from the matching *_INIT macro (or
 *   *_init function) and set only what you need, so that fields appended in later versions keep
 *   their defaults.
 * - No C++ exception and no abort crosses this boundary.
 * - Threads: calls on one handle (a context, a reducer, a job, a run result) must not overlap;
 *   different handles may be used from different threads at once. A context's collectives must be
 *   issued in the same order on every rank, so a rank issues them from one thread at a time. The
 *   last error and how ddpspawn_run's ranks ended are kept per thread.
 * - Ownership: a reducer shares its context's process group, so a context may be destroyed before
 *   its reducers; the buffers given to a reducer must outlive it.
 *
 * Valid C99 and C++. */
#ifndef DDPSPAWN_DDPSPAWN_H_
#define DDPSPAWN_DDPSPAWN_H_

#include <stddef.h>
#include <stdint.h>

#include "ddpspawn/ddpspawn_defaults.h"

#if defined(DDPSPAWN_BUILDING_LIBRARY)
#define DDPSPAWN_EXPORT __attribute__((visibility("default")))
#else
#define DDPSPAWN_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI major version this header describes. The shared library's SONAME is
 * libddpspawn.so.<DDPSPAWN_ABI_VERSION>. */
#define DDPSPAWN_ABI_VERSION 1

/* ------------------------------------------------------------------------ */
/* Status codes and errors                                                  */
/* ------------------------------------------------------------------------ */

typedef int32_t ddpspawn_status;

#define DDPSPAWN_OK 0
/* A NULL pointer, a wrong size, an unknown name, an out-of-range value. */
#define DDPSPAWN_ERR_INVALID_ARGUMENT 1
/* A worker failed: ddpspawn_last_error() names the rank and the cause. */
#define DDPSPAWN_ERR_WORKER_FAILED 2
/* The job, or a collective, ran past its timeout. */
#define DDPSPAWN_ERR_TIMEOUT 3
/* The launcher received SIGINT or SIGTERM and stopped the workers. */
#define DDPSPAWN_ERR_INTERRUPTED 4
/* The request is valid but not available in this build (e.g. nccl on a CPU build of LibTorch), or
 * outside a ddpspawn worker. */
#define DDPSPAWN_ERR_UNAVAILABLE 5
/* A call in the wrong state (e.g. waiting on a job that was never started). */
#define DDPSPAWN_ERR_FAILED_PRECONDITION 6
/* A system call or a collective failed (peer gone, connection reset ...). */
#define DDPSPAWN_ERR_INTERNAL 7

/* The message of the last failure on this thread; "" if none. Valid until the next ddpspawn call on
 * this thread. Never NULL. A message longer than 64 KiB keeps its first 64 KiB and ends with a note
 * of its full length. */
DDPSPAWN_EXPORT const char* ddpspawn_last_error(void);

/* For callbacks the library calls (a C communication hook): records `message` (NULL: "") as this
 * thread's last error and returns `code`, so that a callback can say why it failed: `return
 * ddpspawn_set_last_error(DDPSPAWN_ERR_INVALID_ARGUMENT, "...");`. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_set_last_error(ddpspawn_status code, const char* message);

/* DDPSPAWN_ABI_VERSION of the loaded library. */
DDPSPAWN_EXPORT int32_t ddpspawn_abi_version(void);

/* The library's version, e.g. "0.1.0". Never NULL. */
DDPSPAWN_EXPORT const char* ddpspawn_version(void);

/* What this build is, as "key=value" lines, each ending in '\n': version, torch (LibTorch at
 * compile time, e.g. 2.11.0), cuda (e.g. 13.0, or none), nccl (the NCCL it was built with, e.g.
 * 2.28.9, or none), backends (compiled in, e.g. gloo,nccl). It never initialises CUDA. Static
 * storage; never NULL. */
DDPSPAWN_EXPORT const char* ddpspawn_build_info(void);

/* Frees memory that a ddpspawn function returned to the caller. NULL is ok. */
DDPSPAWN_EXPORT void ddpspawn_free(void* ptr);

/* ------------------------------------------------------------------------ */
/* Launcher (in the launching process)                                      */
/* ------------------------------------------------------------------------ */

/* A fork-mode worker: runs in the forked child; its return value is the child's exit code (0 =
 * success). rank is the child's global rank. It runs on the thread that called ddpspawn_job_start
 * (the child's only thread), with every descriptor of the launching process still open (the child
 * is a copy of the caller and may use what it opened). GNU OpenMP, which LibTorch's CPU operators
 * and MKL use, does not survive fork in a thread that has run a parallel region: if that thread did
 * before the fork, a worker_fn that runs one with more than one thread waits forever. Such a
 * worker_fn should do its work on a thread it starts (as ddpspawn_run's ranks do), or the job
 * should use spawn. */
typedef int (*ddpspawn_worker_fn)(int32_t rank, void* user_data);

/* Called around each fork in fork mode (in the launching thread), e.g. to let an interpreter reset
 * its state in the child. Any may be NULL. */
typedef void (*ddpspawn_fork_hook)(void);

typedef struct ddpspawn_launch_options {
  uint32_t struct_size; /* sizeof(ddpspawn_launch_options) */
  int32_t nprocs;       /* number of worker processes, >= 1 */
  /* "spawn": each rank execs argv in a fresh process (default when NULL).
   * "fork":  each rank runs worker_fn in a forked child.
   * "forkserver": one exec of argv (the server) loads the program and its
   *          libraries once, then forks each rank; later jobs started
   *          from the same thread with the same argv and environment reuse
   *          it (it ends with that thread). argv's
   *          main() must call ddpspawn_serve_forks_if_forkserver() first. */
  const char* start_method;
  /* spawn, forkserver: program (searched on PATH) and arguments, NULL-terminated. */
  const char* const* argv;
  /* Extra "NAME=value" entries for every rank's environment, NULL-terminated; may be NULL. Applied
   * in every start method. */
  const char* const* env;
  ddpspawn_worker_fn worker_fn;         /* fork */
  void* user_data;                      /* passed to worker_fn */
  ddpspawn_fork_hook before_fork;       /* fork: in the parent, before */
  ddpspawn_fork_hook after_fork_parent; /* fork: in the parent, after */
  ddpspawn_fork_hook after_fork_child;  /* fork: in the child, first thing */
  /* Whole-job limit in seconds; 0 = none. Past it every rank is stopped and the job fails with
   * DDPSPAWN_ERR_TIMEOUT. */
  double timeout_s;
  /* After the first failure, seconds between SIGTERM and SIGKILL for the other ranks. Default 5. */
  double grace_period_s;
  /* MASTER_ADDR / MASTER_PORT given to the workers. NULL / 0: 127.0.0.1 and a free port. One node's
   * ranks meet through a private FileStore, not these; with nnodes > 1 they are node 0's launcher's
   * address and port, both required. */
  const char* master_addr;
  int32_t master_port;
  int32_t unused0; /* the first release's struct ended here (its padding); ignored */
  /* A job of several hosts, one launcher each (torchrun's --nnodes and --node-rank): this launcher
   * starts ranks node_rank * nprocs to node_rank * nprocs + nprocs - 1 of nnodes * nprocs
   * (ddpspawn_job_rank_report and ddpspawn_job_rank_error still take 0 .. nprocs - 1). Node 0's
   * launcher serves the rendezvous, a c10d TCPStore on every interface at master_port; every
   * launcher joins it from ddpspawn_job_start, until every node did or timeout_s passed (0: 30
   * minutes). A failure names the node that failed first, and nodes whose launchers are gone; after
   * success ddpspawn_job_result gives every node rank 0's result. Default 1 (0 too) and 0. */
  int32_t nnodes;
  int32_t node_rank;
  /* torchrun's --max-restarts: when a rank fails (not an interrupt, the job's timeout or a start
   * that failed), ddpspawn_job_wait starts every rank again, up to this many times, announcing each
   * restart on stderr. Each start's ranks see which it is in TORCHELASTIC_RESTART_COUNT (0, 1, ...)
   * and continue from whatever state the program keeps; the job's reports are the last start's.
   * With nnodes > 1 every node restarts together or none does. Default 0. */
  int32_t max_restarts;
  int32_t unused1; /* padding; ignored */
} ddpspawn_launch_options;

#define DDPSPAWN_LAUNCH_OPTIONS_INIT                                                         \
  {                                                                                          \
    sizeof(ddpspawn_launch_options), 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0.0, \
        DDPSPAWN_DEFAULT_GRACE_PERIOD_S, NULL, 0, 0, 1, 0, 0, 0                              \
  }

DDPSPAWN_EXPORT void ddpspawn_launch_options_init(ddpspawn_launch_options* options);
/* Like ddpspawn_launch_options_init, for callers that do not compile against this header
 * (bindings): writes the defaults into the first struct_size bytes only (pass sizeof the struct
 * allocated; it must be a released version's size). */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_launch_options_init_sized(ddpspawn_launch_options* options,
                                                                   uint32_t struct_size);

/* A job: N workers, launched once, with a report of how each ended. */
typedef struct ddpspawn_job ddpspawn_job;

/* Validates and copies the options (strings and arrays included). */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_create(const ddpspawn_launch_options* options,
                                                    ddpspawn_job** out_job);
DDPSPAWN_EXPORT void ddpspawn_job_destroy(ddpspawn_job* job);

/* Starts every rank and returns at once. In fork mode the children run worker_fn and never return
 * from this call. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_start(ddpspawn_job* job);

/* Waits for every rank. On the first failing rank the others get SIGTERM, then SIGKILL after the
 * grace period; with max_restarts left, every rank then starts again (in fork mode, forked from
 * this call's thread) and the wait goes on. SIGINT/SIGTERM sent to the launcher while waiting are
 * forwarded to the workers. Returns DDPSPAWN_OK when every rank of the last start exited 0; else
 * DDPSPAWN_ERR_WORKER_FAILED, DDPSPAWN_ERR_TIMEOUT or DDPSPAWN_ERR_INTERRUPTED with
 * ddpspawn_last_error() naming the rank and the cause ("(after N restarts)" when there were any).
 * The report below, the last start's, is filled either way. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_wait(ddpspawn_job* job);

/* ddpspawn_job_start then ddpspawn_job_wait. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_run(ddpspawn_job* job);

/* How a rank ended. */
#define DDPSPAWN_RANK_NOT_STARTED 0
#define DDPSPAWN_RANK_RUNNING 1
#define DDPSPAWN_RANK_EXITED 2   /* exit_code is set */
#define DDPSPAWN_RANK_SIGNALED 3 /* signal is set */

typedef struct ddpspawn_rank_report {
  uint32_t struct_size; /* sizeof(ddpspawn_rank_report) */
  int32_t state;        /* DDPSPAWN_RANK_* */
  int32_t exit_code;
  int32_t signal;
  int64_t pid;
  /* Set when the launcher stopped this rank (after another's failure, a timeout or an interrupt)
   * rather than the rank ending by itself. */
  int32_t stopped_by_launcher;
} ddpspawn_rank_report;

#define DDPSPAWN_RANK_REPORT_INIT \
  { sizeof(ddpspawn_rank_report), 0, 0, 0, 0, 0 }

/* DDPSPAWN_RANK_REPORT_INIT for callers that do not compile against this header, as
 * ddpspawn_launch_options_init_sized. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_rank_report_init_sized(ddpspawn_rank_report* report,
                                                                uint32_t struct_size);

DDPSPAWN_EXPORT int32_t ddpspawn_job_nprocs(const ddpspawn_job* job);

/* How many times ddpspawn_job_wait restarted the ranks (max_restarts); -1 for a NULL job. */
DDPSPAWN_EXPORT int32_t ddpspawn_job_restarts(const ddpspawn_job* job);

DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_rank_report(const ddpspawn_job* job, int32_t rank,
                                                         ddpspawn_rank_report* out_report);

/* The rank whose failure ended the job, or -1 (success, timeout, interrupt). */
DDPSPAWN_EXPORT int32_t ddpspawn_job_failed_rank(const ddpspawn_job* job);

/* The error text a rank reported (ddpspawn_worker_set_error, an uncaught C++ exception, ...); "" if
 * none. Owned by the job. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_rank_error(const ddpspawn_job* job, int32_t rank,
                                                        const char** out_text);

/* The bytes rank 0 handed back (ddpspawn_worker_set_result). *out_data is owned by the job;
 * *out_size is 0 and *out_has_result 0 when rank 0 set none. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_job_result(const ddpspawn_job* job, const void** out_data,
                                                    size_t* out_size, int32_t* out_has_result);

/* ------------------------------------------------------------------------ */
/* Inside a worker                                                          */
/* ------------------------------------------------------------------------ */

/* For the forkserver start method: the first call of a worker program's main(), before it starts
 * threads or touches CUDA. In the server a launcher started, it serves forks and never returns (it
 * exits with the launcher); in each rank the server forks, it returns 1, with the rank's
 * environment and working directory; in any other process it returns 0 at once. A server that
 * cannot serve exits with code 2 and a message on stderr. */
DDPSPAWN_EXPORT int32_t ddpspawn_serve_forks_if_forkserver(void);

/* 1 when this process was started by a ddpspawn launcher, else 0. */
DDPSPAWN_EXPORT int32_t ddpspawn_is_worker(void);

/* Rank 0 hands bytes back to the launcher (replacing any earlier result). Fails with
 * DDPSPAWN_ERR_UNAVAILABLE outside a ddpspawn worker and with DDPSPAWN_ERR_FAILED_PRECONDITION on a
 * rank other than 0. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_worker_set_result(const void* data, size_t size);

/* Records why this rank is failing (e.g. a traceback); the launcher puts it in its error message.
 * Call before exiting non-zero. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_worker_set_error(const char* text);

typedef struct ddpspawn_context ddpspawn_context;

typedef struct ddpspawn_context_options {
  uint32_t struct_size; /* sizeof(ddpspawn_context_options) */
  /* "gloo" (default when NULL) or "nccl" (only with a CUDA LibTorch). */
  const char* backend;
  /* Limit in seconds for joining the group and for each collective; 0 = default (1800). */
  double timeout_s;
} ddpspawn_context_options;

#define DDPSPAWN_CONTEXT_OPTIONS_INIT \
  { sizeof(ddpspawn_context_options), NULL, 0.0 }

DDPSPAWN_EXPORT void ddpspawn_context_options_init(ddpspawn_context_options* options);
/* Like ddpspawn_context_options_init, for callers that do not compile against this header
 * (bindings): writes the defaults into the first struct_size bytes only (pass sizeof the struct
 * allocated; it must be a released version's size). */
DDPSPAWN_EXPORT ddpspawn_status
ddpspawn_context_options_init_sized(ddpspawn_context_options* options, uint32_t struct_size);

/* Joins the process group described by the environment: a ddpspawn launcher, torchrun/TorchElastic,
 * SLURM, or plain MASTER_ADDR/MASTER_PORT/RANK/ WORLD_SIZE variables (a single process when none is
 * set). options may be NULL. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_context_create(const ddpspawn_context_options* options,
                                                        ddpspawn_context** out_context);
DDPSPAWN_EXPORT void ddpspawn_context_destroy(ddpspawn_context* context);

/* Getters; each returns -1 for a NULL context. */
DDPSPAWN_EXPORT int32_t ddpspawn_context_rank(const ddpspawn_context* context);
DDPSPAWN_EXPORT int32_t ddpspawn_context_world_size(const ddpspawn_context* context);
DDPSPAWN_EXPORT int32_t ddpspawn_context_local_rank(const ddpspawn_context* context);
DDPSPAWN_EXPORT int32_t ddpspawn_context_local_world_size(const ddpspawn_context* context);
DDPSPAWN_EXPORT int32_t ddpspawn_context_node_rank(const ddpspawn_context* context);

/* The cluster environment that was detected: "ddpspawn", "torchelastic", "slurm" or "env". Never
 * NULL (for a NULL context, ""). */
DDPSPAWN_EXPORT const char* ddpspawn_context_environment(const ddpspawn_context* context);

/* Which rank holds the others back: how this context's ranks have arrived at its collectives so
 * far. Arrivals are timed where one launcher's ranks meet in shared memory on one host (gloo); with
 * nccl, gloo over TCP or several nodes they are not (*out_measured 0, and the summary says why).
 * *out_collectives: the collectives timed; *out_straggler: the rank that arrived last most often
 * (-1 when none); *out_summary: a sentence, e.g. "rank 1 arrived last at 87% of 4,140 collectives,
 * 2.1 ms late on average", owned by the context until this function's next call on it. Any out
 * pointer may be NULL. Unlike the other calls on a context, this one and
 * ddpspawn_context_rank_arrivals may run on another thread while a collective runs. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_context_straggler(ddpspawn_context* context,
                                                           int32_t* out_measured,
                                                           int64_t* out_collectives,
                                                           int32_t* out_straggler,
                                                           const char** out_summary);

/* Rank `rank`'s arrivals so far: the collectives it reached after every other rank; summed over
 * those, how much later than the next-latest rank it was (seconds); and summed over every
 * collective, how long it waited for the last rank (seconds). All 0 when not measured. Any out
 * pointer may be NULL. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_context_rank_arrivals(const ddpspawn_context* context,
                                                               int32_t rank,
                                                               int64_t* out_arrived_last,
                                                               double* out_late_seconds,
                                                               double* out_waited_seconds);

/* Element types and reduce operations for buffers. */
#define DDPSPAWN_FLOAT32 0
#define DDPSPAWN_FLOAT64 1
#define DDPSPAWN_INT32 2
#define DDPSPAWN_INT64 3

#define DDPSPAWN_SUM 0
#define DDPSPAWN_MEAN 1 /* sum / world size; integers truncate toward 0 */
#define DDPSPAWN_MIN 2
#define DDPSPAWN_MAX 3
#define DDPSPAWN_PRODUCT 4

/* Waits until every rank reached the barrier of this name (NULL ok). */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_barrier(ddpspawn_context* context, const char* name);

/* Overwrites count elements of data on every rank with src's. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_broadcast(ddpspawn_context* context, void* data,
                                                   size_t count, int32_t dtype, int32_t src);

/* Broadcasts src's bytes (size may differ per rank; only src's matter). Every rank gets a copy in
 * *out_data (free with ddpspawn_free) of *out_size bytes. src's size may be at most 1 GiB
 * (1073741824 bytes); a larger one is DDPSPAWN_ERR_INVALID_ARGUMENT on src, which then does not
 * take part (the other ranks wait until the group's timeout). */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_broadcast_bytes(ddpspawn_context* context,
                                                         const void* data, size_t size, int32_t src,
                                                         void** out_data, size_t* out_size);

/* In place: every rank ends with op over all ranks' data. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_reduce(ddpspawn_context* context, void* data,
                                                    size_t count, int32_t dtype, int32_t op);

/* In place on dst only; the other ranks' data is left as it was. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reduce(ddpspawn_context* context, void* data, size_t count,
                                                int32_t dtype, int32_t op, int32_t dst);

/* out (world_size * count elements) gets every rank's data in rank order. count must be the same on
 * every rank. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_gather(ddpspawn_context* context, const void* data,
                                                    size_t count, int32_t dtype, void* out);

/* Reduce-scatter (torch.distributed's reduce_scatter_tensor): input holds world_size * count
 * elements, world_size chunks of count in rank order; output (count elements, not overlapping
 * input) gets chunk `rank` of op over every rank's input (DDPSPAWN_MEAN: the sum divided by
 * world_size). input is not changed. count must be the same on every rank. Added in version node
 * DDPSPAWN_1.1: a program that calls it names that node, and a library without it is refused by the
 * loader by name. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reduce_scatter(ddpspawn_context* context,
                                                        const void* input, void* output,
                                                        size_t count, int32_t dtype, int32_t op);

/* Gathers a byte string of up to 1 GiB (1073741824 bytes) from every rank. *out_data (free with
 * ddpspawn_free) holds them back to back in rank order; out_sizes (an array of world_size entries
 * supplied by the caller) gets each one's size. A larger size is DDPSPAWN_ERR_INVALID_ARGUMENT on
 * that rank, which then does not take part (the others wait until the group's timeout). */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_all_gather_bytes(ddpspawn_context* context,
                                                          const void* data, size_t size,
                                                          void** out_data, size_t* out_sizes);

/* ------------------------------------------------------------------------ */
/* Gradient reducer (DistributedDataParallel for any framework)             */
/* ------------------------------------------------------------------------ */

/* Averages a fixed set of gradient buffers across the ranks of a context, in buckets (reverse
 * buffer order, up to a size cap) whose reductions start as soon as all their buffers are marked
 * ready, strictly in bucket order on every rank, overlapping with the caller's remaining backward
 * work. Each iteration: write the gradients, ddpspawn_reducer_mark_ready() each one as it becomes
 * final (any order), then ddpspawn_reducer_finalize(): afterwards every buffer holds the mean over
 * ranks. */
typedef struct ddpspawn_reducer ddpspawn_reducer;

/* One bucket, as a C communication hook sees it: the gradients of some of the reducer's buffers,
 * back to back in `data` (the reducer's memory, not the caller's buffers: it copies the result back
 * after `wait`). */
typedef struct ddpspawn_bucket {
  uint32_t struct_size; /* sizeof(ddpspawn_bucket) */
  int32_t index;        /* buckets start in index order on every rank */
  int32_t bucket_count; /* the reducer's number of buckets */
  int32_t dtype;        /* DDPSPAWN_FLOAT32 ... */
  void* data;           /* `count` elements of `dtype` */
  size_t count;
} ddpspawn_bucket;

/* A communication hook written in C, or in any language that can hand C function pointers (Rust,
 * Python's ctypes): the reducer calls it for every bucket (in CPU memory: a reducer over CUDA
 * tensors refuses to run it) instead of a built-in hook. `start` begins averaging `bucket`; when
 * `wait` has returned (right after `start` when `wait` is NULL), bucket->data must hold the mean
 * over the ranks (or what the hook's compression makes of it). Both may run ddpspawn's collectives
 * on `context`, a context of the reducer's group valid only during the call (every rank starts the
 * same buckets in the same order, so the hook's collectives match across ranks; they must not use
 * another context of the same group meanwhile). `start` may set *out_work (NULL on entry), which
 * `wait` gets. Return DDPSPAWN_OK, or an error code: a failed collective's, or any code with
 * ddpspawn_set_last_error() saying why; the reducer call that ran the hook then fails with that
 * code and a message naming the rank, the bucket and the hook's last error. The reducer copies this
 * struct; user_data must stay valid until `release` (NULL: nothing), which the reducer calls once,
 * when it is destroyed; when ddpspawn_reducer_create fails, it is not called (the caller still owns
 * user_data). Calls come from the thread that calls ddpspawn_reducer_mark_ready or
 * ddpspawn_reducer_finalize, one at a time. */
typedef struct ddpspawn_comm_hook {
  uint32_t struct_size; /* sizeof(ddpspawn_comm_hook) */
  void* user_data;
  ddpspawn_status (*start)(void* user_data, ddpspawn_context* context,
                           const ddpspawn_bucket* bucket, void** out_work);
  ddpspawn_status (*wait)(void* user_data, ddpspawn_context* context, void* work);
  void (*release)(void* user_data);
} ddpspawn_comm_hook;

typedef struct ddpspawn_reducer_options {
  uint32_t struct_size;       /* sizeof(ddpspawn_reducer_options) */
  double bucket_cap_mb;       /* default 25 */
  double first_bucket_cap_mb; /* default 1: the first bucket starts early */
  /* How a bucket is averaged: "allreduce" (default when NULL), "fp16" or "bf16" (compressed),
   * "powersgd" (low rank, with error feedback; only matrices compress, so flat buffers are sent as
   * they are: give shaped gradients with ddpspawn_reducer_create_dlpack, ddpspawn_dlpack.h), or
   * "batched_powersgd" (each bucket, zero-padded to a square, is one matrix: flat buffers compress
   * too). */
  const char* comm_hook;
  int32_t powersgd_rank;            /* default 1 */
  int32_t powersgd_start_iteration; /* plain all-reduce before it; default 10 */
  /* 1: a buffer that no rank marked ready in an iteration is left untouched (costs one small
   * all-reduce per iteration). 0 (default): unmarked buffers count as zeros and get the mean like
   * the others. */
  int32_t find_unused_parameters;
  /* Not NULL: this hook averages every bucket (comm_hook must then be NULL or "allreduce"). Copied
   * at creation; see ddpspawn_comm_hook. */
  const ddpspawn_comm_hook* custom_comm_hook;
} ddpspawn_reducer_options;

#define DDPSPAWN_REDUCER_OPTIONS_INIT                                               \
  {                                                                                 \
    sizeof(ddpspawn_reducer_options), DDPSPAWN_DEFAULT_BUCKET_CAP_MB,               \
        DDPSPAWN_DEFAULT_FIRST_BUCKET_CAP_MB, NULL, DDPSPAWN_DEFAULT_POWERSGD_RANK, \
        DDPSPAWN_DEFAULT_POWERSGD_START_ITERATION, 0, NULL                          \
  }

DDPSPAWN_EXPORT void ddpspawn_reducer_options_init(ddpspawn_reducer_options* options);
/* Like ddpspawn_reducer_options_init, for callers that do not compile against this header
 * (bindings): writes the defaults into the first struct_size bytes only (pass sizeof the struct
 * allocated; it must be a released version's size). */
DDPSPAWN_EXPORT ddpspawn_status
ddpspawn_reducer_options_init_sized(ddpspawn_reducer_options* options, uint32_t struct_size);

/* buffers[i] holds counts[i] elements of dtypes[i] (DDPSPAWN_FLOAT32 ...). The buffers stay owned
 * by the caller and must outlive the reducer; every rank passes the same counts and dtypes in the
 * same order. options may be NULL. The reducer keeps the context's process group alive: the context
 * may be destroyed before the reducer. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_create(ddpspawn_context* context,
                                                        void* const* buffers, const size_t* counts,
                                                        const int32_t* dtypes, size_t num_buffers,
                                                        const ddpspawn_reducer_options* options,
                                                        ddpspawn_reducer** out_reducer);
DDPSPAWN_EXPORT void ddpspawn_reducer_destroy(ddpspawn_reducer* reducer);

/* Buffer `index` is final for this iteration. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_mark_ready(ddpspawn_reducer* reducer,
                                                            size_t index);

/* Starts what is left, waits, and writes the means into the buffers. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_finalize(ddpspawn_reducer* reducer);

/* enabled = 0 is no_sync: mark_ready and finalize communicate nothing (finalize counts a pass; the
 * next synced finalize averages them all, refused where the ranks' counts differ: ddp.md). */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_set_sync(ddpspawn_reducer* reducer,
                                                          int32_t enabled);

/* *out_written = 1 when the last ddpspawn_reducer_finalize() wrote the mean into buffer `index`, 0
 * when it left the buffer as it was: under no_sync, and, with find_unused_parameters, when no rank
 * marked it. A caller whose gradient for a buffer it did not mark is unset (torch's None) reads it
 * to know whether another rank's gradient arrived there. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_written(const ddpspawn_reducer* reducer,
                                                         size_t index, int32_t* out_written);

/* Number of buckets; -1 for NULL. */
DDPSPAWN_EXPORT int32_t ddpspawn_reducer_bucket_count(const ddpspawn_reducer* reducer);

/* With the "powersgd" and "batched_powersgd" hooks: the elements the last compressed iteration sent
 * and the elements of the gradients they stood for (*out_sent < *out_dense when it compressed).
 * Both 0 before powersgd_start_iteration, and with the other hooks. Read it between iterations. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_reducer_compression(const ddpspawn_reducer* reducer,
                                                             int64_t* out_sent, int64_t* out_dense);

/* ------------------------------------------------------------------------ */
/* Sharding a dataset                                                       */
/* ------------------------------------------------------------------------ */

/* The dataset indices that rank `rank` of `num_replicas` reads in epoch `epoch`, index for index
 * those of PyTorch's torch.utils.data.DistributedSampler(dataset, num_replicas, rank, shuffle,
 * seed, drop_last) after set_epoch(epoch): a permutation of [0, dataset_size) seeded by seed +
 * epoch (the same on every rank; 0 .. dataset_size - 1 without shuffle), padded by repeating
 * indices from its start (or, with drop_last, truncated) to a multiple of num_replicas, then every
 * num_replicas-th index from rank. *out_count gets their number (ceil(dataset_size / num_replicas);
 * floor with drop_last). out_indices may be NULL (capacity 0) to ask for the count only; else it
 * must hold `capacity` >= that many elements. A dataset_size below 1, num_replicas below 1, a rank
 * outside [0, num_replicas), drop_last with fewer samples than replicas, a negative epoch or a
 * capacity too small is DDPSPAWN_ERR_INVALID_ARGUMENT naming it. Needs no context or process group.
 * Added in version node DDPSPAWN_1.2. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_distributed_sampler_indices(
    int64_t dataset_size, int32_t num_replicas, int32_t rank, int32_t shuffle, uint64_t seed,
    int32_t drop_last, int64_t epoch, int64_t* out_indices, size_t capacity, size_t* out_count);

/* ------------------------------------------------------------------------ */
/* Logging metrics                                                          */
/* ------------------------------------------------------------------------ */

/* Lightning's log_dict for a loop of one's own: rank 0 makes `dir` where missing and appends a row
 * per names[i], values[i] (i < count) to dir/metrics.csv, the Trainer's CSV file; the other ranks
 * write nothing. A name that is empty or holds a comma, a quote or a line break is
 * DDPSPAWN_ERR_INVALID_ARGUMENT on every rank, and no row is written. Since DDPSPAWN_1.3. */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_log_metrics(ddpspawn_context* context, const char* dir,
                                                     int64_t epoch, int64_t step,
                                                     const char* const* names, const double* values,
                                                     size_t count);

/* ------------------------------------------------------------------------ */
/* Training runs: fit, validate, test, predict                              */
/* ------------------------------------------------------------------------ */

/* The result of a run: key=value pairs from rank 0. fit: "checkpoint" (the final checkpoint:
 * weights, optimizer state, position, RNG; give it as "resume_from" to continue), "metrics_csv",
 * "epoch", "global_step" and "metric.<name>" (e.g. metric.val_accuracy), and when they apply
 * "stopped_by" (early_stopping, max_time or a signal's name) and, with a checkpoint "monitor",
 * "best_model_path" and "best_model_score"; validate/test: metric.<name>; predict: "predictions" (a
 * CSV in dataset order) and "count". */
typedef struct ddpspawn_run_result ddpspawn_run_result;

/* Runs `command` ("fit", "validate", "test", "predict" or "export") with `options`, a
 * NULL-terminated list of "key=value" strings whose keys are the ddpspawn CLI's flags (e.g.
 * "model=mlp:64,128,10" or "model=net.pt" for TorchScript, "train=train.csv", "val=val.csv",
 * "nproc_per_node=2", "max_epochs=5", "lr=0.1"; `ddpspawn --help` lists them all). The ranks are
 * forked from the calling process (start_method=fork; spawn is refused: it would re-run the
 * caller's program). Data, model and options are checked before any process starts: a bad one is
 * DDPSPAWN_ERR_INVALID_ARGUMENT naming it; a failing rank is DDPSPAWN_ERR_WORKER_FAILED (after
 * "max_restarts=N" restarts, if given; the result then has "restarts"; with "min_ranks" a lost rank
 * is dropped, and restarted alone to rejoin: docs/elastic.md). Under torchrun or srun (more than
 * one task) the calling process is one rank of that job: nothing is forked, and every rank gets
 * rank 0's result. With "nnodes=N" every node's call gets rank 0's result too (docs/multinode.md).
 * "export" starts no process: it writes a checkpoint's weights as a file for torch.load or as
 * safetensors ("checkpoint=", "format=torch|safetensors", "output="; `ddpspawn export --help`), and
 * its result has "output", "format" and "tensors". */
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_run(const char* command, const char* const* options,
                                             ddpspawn_run_result** out_result);
DDPSPAWN_EXPORT void ddpspawn_run_result_destroy(ddpspawn_run_result* result);

/* The value for `key`, or NULL when the result has none. Owned by the result. */
DDPSPAWN_EXPORT const char* ddpspawn_run_result_get(const ddpspawn_run_result* result,
                                                    const char* key);

/* Every pair as "key=value" lines. Owned by the result; "" for NULL. */
DDPSPAWN_EXPORT const char* ddpspawn_run_result_text(const ddpspawn_run_result* result);

/* The pairs one by one, in the order the run reported them: their number (0 for NULL), and pair
 * `index`'s key and value (NULL when index >= count). Owned by the result. */
DDPSPAWN_EXPORT size_t ddpspawn_run_result_count(const ddpspawn_run_result* result);
DDPSPAWN_EXPORT const char* ddpspawn_run_result_key(const ddpspawn_run_result* result,
                                                    size_t index);
DDPSPAWN_EXPORT const char* ddpspawn_run_result_value(const ddpspawn_run_result* result,
                                                      size_t index);

/* How the ranks of this thread's last ddpspawn_run ended, so that a caller never has to read the
 * error message: the rank whose failure ended it (-1 when none failed: success, a bad option, a
 * timeout), the number of ranks started (0 when none was), each rank's report (as
 * ddpspawn_job_rank_report) and the error text it reported ("" if none; valid until this thread's
 * next ddpspawn_run). A rank outside [0, ddpspawn_run_nprocs()) is DDPSPAWN_ERR_INVALID_ARGUMENT.
 */
DDPSPAWN_EXPORT int32_t ddpspawn_run_failed_rank(void);
DDPSPAWN_EXPORT int32_t ddpspawn_run_nprocs(void);
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_run_rank_report(int32_t rank,
                                                         ddpspawn_rank_report* out_report);
DDPSPAWN_EXPORT ddpspawn_status ddpspawn_run_rank_error(int32_t rank, const char** out_text);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DDPSPAWN_DDPSPAWN_H_ */
