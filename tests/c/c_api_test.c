/* Drives ddpspawn from plain C99 through the public header only: a 2-rank spawn
 * job (this program re-executed as the workers), a job of 2 nodes x 2 ranks
 * (two launchers on this host), a 2-rank fork job, two forkserver jobs (this
 * program serves their forks), and the argument errors, the
 * byte-size limits and the length of the last error.
 * Exits 0 when every check passes; prints each failed check.
 */
/* mkdtemp, nftw. NOLINTNEXTLINE(bugprone-reserved-identifier): POSIX's feature-test macro */
#define _XOPEN_SOURCE 700
#include <ddpspawn/ddpspawn.h>
#include <ddpspawn/ddpspawn_dlpack.h>
#include <dirent.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "c_check.h"

/* Whether CUDA would see a device here, told without CUDA: a device node /dev/nvidia<N> (the driver
 * makes one per GPU), unless CUDA_VISIBLE_DEVICES hides them all (empty, or starting with -1). */
static int cuda_device_visible(void) {
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  if (visible != NULL) {
    while (*visible == ' ') visible++;
    if (*visible == '\0' || strncmp(visible, "-1", 2) == 0) return 0;
  }
  DIR* dev = opendir("/dev");
  if (dev == NULL) return 0;
  int found = 0;
  for (struct dirent* entry = readdir(dev); entry != NULL && !found; entry = readdir(dev)) {
    const char* digits = entry->d_name + 6;
    if (strncmp(entry->d_name, "nvidia", 6) != 0 || *digits == '\0') continue;
    found = strspn(digits, "0123456789") == strlen(digits);
  }
  closedir(dev);
  return found;
}

/* The gradient reducer: two iterations over three buffers, one of them never marked ready
 * (find_unused_parameters leaves it untouched); returns 1 when every value is as expected. */
static int check_reducer(ddpspawn_context* ctx, int rank, int world) {
  float a[6]; /* room for the uneven case below */
  double b[3];
  int64_t never[2] = {7, 7};
  void* buffers[3] = {a, b, never};
  size_t counts[3] = {5, 3, 2};
  int32_t dtypes[3] = {DDPSPAWN_FLOAT32, DDPSPAWN_FLOAT64, DDPSPAWN_INT64};
  ddpspawn_reducer_options options = DDPSPAWN_REDUCER_OPTIONS_INIT;
  options.find_unused_parameters = 1;
  options.bucket_cap_mb = 0.00001; /* one buffer per bucket */
  ddpspawn_reducer* reducer = NULL;
  if (ddpspawn_reducer_create(ctx, buffers, counts, dtypes, 3, &options, &reducer) != DDPSPAWN_OK) {
    return 0;
  }
  int ok = ddpspawn_reducer_bucket_count(reducer) == 3;
  for (int iteration = 1; iteration <= 2 && ok; iteration++) {
    for (int i = 0; i < 5; i++) a[i] = (float)(iteration * (rank + 1));
    for (int i = 0; i < 3; i++) b[i] = 10.0 * (rank + 1);
    ok = ok && ddpspawn_reducer_mark_ready(reducer, 1) == DDPSPAWN_OK;
    ok = ok && ddpspawn_reducer_mark_ready(reducer, 0) == DDPSPAWN_OK;
    ok = ok && ddpspawn_reducer_finalize(reducer) == DDPSPAWN_OK;
    ok = ok && a[4] == iteration * (world + 1) / 2.0f && b[0] == 10.0 * (world + 1) / 2.0;
    ok = ok && never[0] == 7 && never[1] == 7;
  }
  int32_t written[3] = {-1, -1, -1};
  for (size_t i = 0; i < 3; i++) {
    ok = ok && ddpspawn_reducer_written(reducer, i, &written[i]) == DDPSPAWN_OK;
  }
  ok = ok && written[0] == 1 && written[1] == 1 && written[2] == 0;
  ok = ok && ddpspawn_reducer_written(reducer, 3, &written[0]) == DDPSPAWN_ERR_INVALID_ARGUMENT;
  ok = ok && ddpspawn_reducer_written(reducer, 0, NULL) == DDPSPAWN_ERR_INVALID_ARGUMENT;
  ok = ok && ddpspawn_reducer_mark_ready(reducer, 3) == DDPSPAWN_ERR_INVALID_ARGUMENT;
  ddpspawn_reducer_destroy(reducer);
  /* Integer buffers go uncompressed under a compressing hook. */
  int64_t big[2] = {1234567 * (int64_t)(rank + 1), 3};
  void* big_buffers[1] = {big};
  size_t big_count[1] = {2};
  int32_t big_dtype[1] = {DDPSPAWN_INT64};
  options.comm_hook = "fp16";
  ok = ok && ddpspawn_reducer_create(ctx, big_buffers, big_count, big_dtype, 1, &options,
                                     &reducer) == DDPSPAWN_OK;
  ok = ok && ddpspawn_reducer_mark_ready(reducer, 0) == DDPSPAWN_OK &&
       ddpspawn_reducer_finalize(reducer) == DDPSPAWN_OK;
  ok = ok && big[0] == 1234567 * (int64_t)(world + 1) / 2 && big[1] == 3;
  ddpspawn_reducer_destroy(reducer);
  /* Different buffers on different ranks: an error on every rank, not an abort.
   */
  size_t uneven[3] = {5 + (size_t)rank, 3, 2};
  options.comm_hook = NULL;
  ok = ok && ddpspawn_reducer_create(ctx, buffers, uneven, dtypes, 3, &options, &reducer) ==
                 DDPSPAWN_ERR_INVALID_ARGUMENT;
  ok = ok && strstr(ddpspawn_last_error(), "do not reduce the same tensors") != NULL;
  options.comm_hook = "morse";
  ok = ok && ddpspawn_reducer_create(ctx, buffers, counts, dtypes, 3, &options, &reducer) ==
                 DDPSPAWN_ERR_INVALID_ARGUMENT;
  ok = ok && ddpspawn_reducer_create(ctx, NULL, counts, dtypes, 3, NULL, &reducer) ==
                 DDPSPAWN_ERR_INVALID_ARGUMENT;
  return ok;
}

/* A DLTensor over a caller's CPU memory; strides NULL (row-major). */
static DLTensor cpu_tensor(void* data, int32_t ndim, int64_t* shape, uint8_t code, uint8_t bits) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.shape = shape;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  return t;
}

/* The DLPack collectives on every rank, in place on the caller's memory. */
static int check_dlpack(ddpspawn_context* ctx, int rank, int world) {
  float matrix[2][3];
  int64_t matrix_shape[2] = {2, 3};
  for (int i = 0; i < 6; i++) matrix[i / 3][i % 3] = (float)((rank + 1) * i);
  DLTensor t = cpu_tensor(matrix, 2, matrix_shape, kDLFloat, 32);
  int ok = ddpspawn_all_reduce_dlpack(ctx, &t, DDPSPAWN_SUM) == DDPSPAWN_OK;
  for (int i = 0; i < 6; i++)
    ok = ok && matrix[i / 3][i % 3] == (float)(world * (world + 1) * i) / 2.0f;
  /* Explicit row-major strides; a max over int64. */
  int64_t longs[2][2] = {{rank, -rank}, {10 * (int64_t)rank, 7}};
  int64_t longs_shape[2] = {2, 2};
  int64_t longs_strides[2] = {2, 1};
  t = cpu_tensor(longs, 2, longs_shape, kDLInt, 64);
  t.strides = longs_strides;
  ok = ok && ddpspawn_all_reduce_dlpack(ctx, &t, DDPSPAWN_MAX) == DDPSPAWN_OK;
  ok = ok && longs[0][0] == world - 1 && longs[0][1] == 0 &&
       longs[1][0] == 10 * (int64_t)(world - 1) && longs[1][1] == 7;
  /* A 0-dimensional float64 broadcast from rank 1. */
  double scalar = rank == 1 ? 2.5 : -1.0;
  t = cpu_tensor(&scalar, 0, NULL, kDLFloat, 64);
  ok = ok && ddpspawn_broadcast_dlpack(ctx, &t, 1) == DDPSPAWN_OK && scalar == 2.5;
  /* A mean on rank 0 only. */
  double mean[2] = {rank, 2.0 * rank};
  int64_t two = 2;
  t = cpu_tensor(mean, 1, &two, kDLFloat, 64);
  ok = ok && ddpspawn_reduce_dlpack(ctx, &t, DDPSPAWN_MEAN, 0) == DDPSPAWN_OK;
  ok = ok && (rank == 0 ? mean[0] == (world - 1) / 2.0 && mean[1] == world - 1.0
                        : mean[0] == rank && mean[1] == 2.0 * rank);
  /* all_gather of [2] int32 into [world, 2]. */
  int32_t pair[2] = {100 + rank, -rank};
  int32_t gathered[16][2];
  int64_t gathered_shape[2] = {world, 2};
  DLTensor in = cpu_tensor(pair, 1, &two, kDLInt, 32);
  DLTensor out = cpu_tensor(gathered, 2, gathered_shape, kDLInt, 32);
  ok = ok && world <= 16 && ddpspawn_all_gather_dlpack(ctx, &in, &out) == DDPSPAWN_OK;
  for (int r = 0; r < world && ok; r++) ok = gathered[r][0] == 100 + r && gathered[r][1] == -r;
  /* A reducer over a 16x8 weight and a bias of 8 as DLPack tensors: PowerSGD (rank 1, from the
   * first iteration) sends the weight as 16 + 8 factors. */
  float weight[16][8], bias[8];
  int64_t weight_shape[2] = {16, 8}, bias_shape[1] = {8};
  for (int i = 0; i < 128; i++) weight[i / 8][i % 8] = (float)((i % 7) * (rank + 1));
  for (int i = 0; i < 8; i++) bias[i] = (float)(rank + i);
  DLTensor weight_tensor = cpu_tensor(weight, 2, weight_shape, kDLFloat, 32);
  DLTensor bias_tensor = cpu_tensor(bias, 1, bias_shape, kDLFloat, 32);
  DLTensor* gradients[2] = {&weight_tensor, &bias_tensor};
  ddpspawn_reducer_options options = DDPSPAWN_REDUCER_OPTIONS_INIT;
  options.comm_hook = "powersgd";
  options.powersgd_start_iteration = 0;
  ddpspawn_reducer* reducer = NULL;
  ok = ok && ddpspawn_reducer_create_dlpack(ctx, gradients, 2, &options, &reducer) == DDPSPAWN_OK;
  ok = ok && ddpspawn_reducer_mark_ready(reducer, 1) == DDPSPAWN_OK &&
       ddpspawn_reducer_mark_ready(reducer, 0) == DDPSPAWN_OK &&
       ddpspawn_reducer_finalize(reducer) == DDPSPAWN_OK;
  int64_t sent = -1, dense = -1;
  ok = ok && ddpspawn_reducer_compression(reducer, &sent, &dense) == DDPSPAWN_OK;
  ok = ok && dense == 128 + 8 && sent > 0 && sent < dense / 2;
  /* The bias is sent as it is: the exact mean. */
  for (int i = 0; i < 8 && ok; i++) ok = bias[i] == (float)((world - 1) / 2.0 + i);
  ddpspawn_reducer_destroy(reducer);
  return ok;
}

/* What the DLPack collectives refuse, on a group of one, before communicating. */
static void check_dlpack_refusals(ddpspawn_context* ctx) {
  float data[4] = {1, 2, 3, 4};
  int64_t shape[2] = {2, 2};
  DLTensor t = cpu_tensor(data, 2, shape, kDLFloat, 32);
  CHECK(ddpspawn_all_reduce_dlpack(ctx, &t, DDPSPAWN_SUM) == DDPSPAWN_OK);
  CHECK(data[3] == 4.0f);
  int64_t transposed[2] = {1, 2}; /* a transpose's strides */
  t.strides = transposed;
  CHECK(ddpspawn_all_reduce_dlpack(ctx, &t, DDPSPAWN_SUM) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "tensor is not C-contiguous (dimension 1 has stride 2") !=
        NULL);
  t.strides = NULL;
  t.dtype.code = kDLComplex;
  t.dtype.bits = 64;
  CHECK(ddpspawn_all_reduce_dlpack(ctx, &t, DDPSPAWN_SUM) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "unsupported element type") != NULL);
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 4;
  CHECK(ddpspawn_broadcast_dlpack(ctx, &t, 0) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  t.dtype.lanes = 1;
  t.device.device_type = kDLOpenCL;
  CHECK(ddpspawn_all_reduce_dlpack(ctx, &t, DDPSPAWN_SUM) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "DLPack device type 4") != NULL);
  if (!cuda_device_visible()) {
    t.device.device_type = kDLCUDA;
    CHECK(ddpspawn_all_reduce_dlpack(ctx, &t, DDPSPAWN_SUM) == DDPSPAWN_ERR_UNAVAILABLE);
    CHECK(strstr(ddpspawn_last_error(), "sees no CUDA device") != NULL);
  }
  t.device.device_type = kDLCPU;
  t.data = NULL;
  CHECK(ddpspawn_all_reduce_dlpack(ctx, &t, DDPSPAWN_SUM) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  t.data = data;
  shape[1] = -2;
  CHECK(ddpspawn_all_reduce_dlpack(ctx, &t, DDPSPAWN_SUM) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  shape[1] = 2;
  CHECK(ddpspawn_all_reduce_dlpack(ctx, &t, 42) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_all_reduce_dlpack(ctx, NULL, DDPSPAWN_SUM) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_all_reduce_dlpack(NULL, &t, DDPSPAWN_SUM) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  /* all_gather's output: world_size (1) times the input's elements, same dtype. */
  double wrong_type[4];
  DLTensor out = cpu_tensor(wrong_type, 2, shape, kDLFloat, 64);
  CHECK(ddpspawn_all_gather_dlpack(ctx, &t, &out) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(),
               "all_gather: the output is float64 on cpu but the input is float32 on cpu") != NULL);
  float too_small[2];
  out = cpu_tensor(too_small, 1, shape, kDLFloat, 32);
  CHECK(ddpspawn_all_gather_dlpack(ctx, &t, &out) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  float copy[4] = {0};
  out = cpu_tensor(copy, 2, shape, kDLFloat, 32);
  CHECK(ddpspawn_all_gather_dlpack(ctx, &t, &out) == DDPSPAWN_OK);
  /* reduce_scatter's output: a world_size-th (all, here) of the input's elements. */
  float scattered[4] = {0};
  out = cpu_tensor(scattered, 2, shape, kDLFloat, 32);
  CHECK(ddpspawn_reduce_scatter_dlpack(ctx, &t, &out, DDPSPAWN_SUM) == DDPSPAWN_OK);
  CHECK(scattered[0] == data[0] && scattered[1] == data[1] && scattered[2] == data[2] &&
        scattered[3] == data[3]);
  out = cpu_tensor(too_small, 1, shape, kDLFloat, 32);
  CHECK(ddpspawn_reduce_scatter_dlpack(ctx, &t, &out, DDPSPAWN_SUM) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(),
               "reduce_scatter: the input has 4 elements; it must have world_size (1) times") !=
        NULL);
  CHECK(ddpspawn_reduce_scatter(ctx, data, scattered, 4, DDPSPAWN_FLOAT32, 42) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_reduce_scatter(ctx, data, NULL, 4, DDPSPAWN_FLOAT32, DDPSPAWN_SUM) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_reduce_scatter(ctx, data, scattered, 4, DDPSPAWN_FLOAT32, DDPSPAWN_MAX) ==
        DDPSPAWN_OK);
  CHECK(copy[0] == 1.0f && copy[3] == 4.0f);
  /* The reducer names the gradient it refuses; the flat path reports no compression. */
  ddpspawn_reducer* reducer = NULL;
  DLTensor transposed_view = t;
  transposed_view.strides = transposed;
  DLTensor* gradients[2] = {&t, &transposed_view};
  CHECK(ddpspawn_reducer_create_dlpack(ctx, gradients, 2, NULL, &reducer) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "gradients[1] is not C-contiguous") != NULL);
  CHECK(ddpspawn_reducer_create_dlpack(ctx, gradients, 0, NULL, &reducer) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(reducer == NULL);
  CHECK(ddpspawn_reducer_create_dlpack(ctx, gradients, 1, NULL, &reducer) == DDPSPAWN_OK);
  int64_t sent = -1, dense = -1;
  CHECK(ddpspawn_reducer_compression(reducer, &sent, &dense) == DDPSPAWN_OK);
  CHECK(sent == 0 && dense == 0);
  CHECK(ddpspawn_reducer_compression(reducer, NULL, &dense) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  ddpspawn_reducer_destroy(reducer);
}

/* The collectives a worker runs; returns 0 when every value is as expected. */
static int run_collectives(void) {
  ddpspawn_context* ctx = NULL;
  if (ddpspawn_context_create(NULL, &ctx) != DDPSPAWN_OK) {
    ddpspawn_worker_set_error(ddpspawn_last_error());
    return 1;
  }
  int rank = ddpspawn_context_rank(ctx);
  int world = ddpspawn_context_world_size(ctx);
  double values[3] = {rank + 1.0, 10.0 * rank, -1.0};
  int ok = ddpspawn_all_reduce(ctx, values, 3, DDPSPAWN_FLOAT64, DDPSPAWN_SUM) == DDPSPAWN_OK;
  ok = ok && values[0] == world * (world + 1) / 2.0 && values[2] == -world;
  int64_t longest = rank;
  ok = ok && ddpspawn_all_reduce(ctx, &longest, 1, DDPSPAWN_INT64, DDPSPAWN_MAX) == DDPSPAWN_OK;
  ok = ok && longest == world - 1;
  int32_t mine = 100 + rank;
  int32_t gathered[16] = {0};
  ok = ok && ddpspawn_all_gather(ctx, &mine, 1, DDPSPAWN_INT32, gathered) == DDPSPAWN_OK;
  for (int r = 0; r < world; r++) ok = ok && gathered[r] == 100 + r;
  const char* greeting = rank == 1 ? "hello from rank 1" : "";
  void* received = NULL;
  size_t received_size = 0;
  ok = ok && ddpspawn_broadcast_bytes(ctx, greeting, strlen(greeting), 1, &received,
                                      &received_size) == DDPSPAWN_OK;
  ok = ok && received_size == strlen("hello from rank 1") &&
       memcmp(received, "hello from rank 1", received_size) == 0;
  ddpspawn_free(received);
  ok = ok && check_reducer(ctx, rank, world);
  ok = ok && check_dlpack(ctx, rank, world);
  ok = ok && ddpspawn_barrier(ctx, "end") == DDPSPAWN_OK;
  if (ok && rank == 0) {
    char result[64];
    snprintf(result, sizeof result, "sum=%g world=%d", values[0], world);
    ok = ddpspawn_worker_set_result(result, strlen(result)) == DDPSPAWN_OK;
  }
  if (!ok) ddpspawn_worker_set_error("a collective returned an unexpected value");
  ddpspawn_context_destroy(ctx);
  return ok ? 0 : 1;
}

static int fork_worker(int32_t rank, void* user_data) {
  (void)rank;
  (void)user_data;
  return run_collectives();
}

/* Rank 1 fails in the job's first start; rank 0 hands back which start it ran in
 * (TORCHELASTIC_RESTART_COUNT). */
static int fail_first_start(int32_t rank, void* user_data) {
  (void)user_data;
  const char* start = getenv("TORCHELASTIC_RESTART_COUNT");
  if (start == NULL) start = "?";
  if (strcmp(start, "0") == 0 && rank == 1) {
    ddpspawn_worker_set_error("rank 1 fails in start 0");
    return 3;
  }
  if (rank == 0) {
    char result[32];
    snprintf(result, sizeof result, "start %s", start);
    ddpspawn_worker_set_result(result, strlen(result));
  }
  return 0;
}

/* A forkserver rank: rank 0 says which process forked it and what
 * ddpspawn_serve_forks_if_forkserver() returned in it. */
static int report_parent(int served) {
  ddpspawn_context* ctx = NULL;
  if (ddpspawn_context_create(NULL, &ctx) != DDPSPAWN_OK) {
    ddpspawn_worker_set_error(ddpspawn_last_error());
    return 1;
  }
  int ok = ddpspawn_barrier(ctx, "parent") == DDPSPAWN_OK;
  if (ok && ddpspawn_context_rank(ctx) == 0) {
    char result[64];
    snprintf(result, sizeof result, "parent=%ld served=%d", (long)getppid(), served);
    ok = ddpspawn_worker_set_result(result, strlen(result)) == DDPSPAWN_OK;
  }
  ddpspawn_context_destroy(ctx);
  return ok ? 0 : 1;
}

static void check_result(ddpspawn_job* job, const char* expected) {
  const void* data = NULL;
  size_t size = 0;
  int32_t has = 0;
  CHECK(ddpspawn_job_result(job, &data, &size, &has) == DDPSPAWN_OK);
  CHECK(has == 1 && size == strlen(expected) && memcmp(data, expected, size) == 0);
}

/* A port no one listens on now (the kernel's choice). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in address;
  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr*)&address, sizeof address) == 0 &&
      getsockname(fd, (struct sockaddr*)&address, &length) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

/* One node's launcher of a 2 x 2 job at 127.0.0.1:port: exits 0 when its job ran and it got rank
 * 0's result, which node 0 hands to node 1. */
static void run_node(const char* const* worker_argv, int node, int port) {
  ddpspawn_launch_options options = DDPSPAWN_LAUNCH_OPTIONS_INIT;
  options.nprocs = 2;
  options.argv = worker_argv;
  options.timeout_s = 60;
  options.nnodes = 2;
  options.node_rank = node;
  options.master_addr = "127.0.0.1";
  options.master_port = port;
  ddpspawn_job* job = NULL;
  CHECK(ddpspawn_job_create(&options, &job) == DDPSPAWN_OK);
  CHECK(ddpspawn_job_run(job) == DDPSPAWN_OK);
  check_result(job, "sum=10 world=4"); /* ranks 0..3 added 1..4 */
  ddpspawn_rank_report report = DDPSPAWN_RANK_REPORT_INIT;
  CHECK(ddpspawn_job_rank_report(job, 1, &report) == DDPSPAWN_OK);
  CHECK(report.state == DDPSPAWN_RANK_EXITED && report.exit_code == 0);
  ddpspawn_job_destroy(job);
  if (failures != 0) fprintf(stderr, "node %d: %s\n", node, ddpspawn_last_error());
  _exit(failures == 0 ? 0 : 1);
}

/* Two launchers, one per node, in child processes of this one. */
static void check_two_nodes(const char* const* worker_argv) {
  const int port = free_port();
  CHECK(port > 0);
  pid_t nodes[2];
  for (int node = 0; node < 2; node++) {
    nodes[node] = fork();
    if (nodes[node] == 0) run_node(worker_argv, node, port);
    CHECK(nodes[node] > 0);
  }
  for (int node = 0; node < 2; node++) {
    int status = 0;
    CHECK(nodes[node] > 0 && waitpid(nodes[node], &status, 0) == nodes[node]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  /* A struct of the first release (it ended before nnodes) is one node's job, whatever lies beyond
   * its size. */
  ddpspawn_launch_options old = DDPSPAWN_LAUNCH_OPTIONS_INIT;
  old.struct_size = (uint32_t)offsetof(ddpspawn_launch_options, nnodes);
  old.nprocs = 2;
  old.argv = worker_argv;
  old.timeout_s = 60;
  old.nnodes = 7;
  old.node_rank = 3;
  ddpspawn_job* job = NULL;
  CHECK(ddpspawn_job_create(&old, &job) == DDPSPAWN_OK);
  CHECK(ddpspawn_job_run(job) == DDPSPAWN_OK);
  check_result(job, "sum=3 world=2");
  ddpspawn_job_destroy(job);
  /* Several nodes need node 0's address and port, and a node rank among them. */
  ddpspawn_launch_options bad = DDPSPAWN_LAUNCH_OPTIONS_INIT;
  bad.argv = worker_argv;
  bad.nnodes = 2;
  job = NULL;
  CHECK(ddpspawn_job_create(&bad, &job) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "nnodes > 1 needs master_addr and master_port") != NULL);
  bad.master_addr = "127.0.0.1";
  bad.master_port = port;
  bad.node_rank = 2;
  CHECK(ddpspawn_job_create(&bad, &job) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "node_rank 2 is outside [0, nnodes=2)") != NULL);
  CHECK(job == NULL);
}

static int remove_entry(const char* path, const struct stat* info, int type, struct FTW* where) {
  (void)info;
  (void)type;
  (void)where;
  return remove(path);
}

/* A training run through ddpspawn_run: 2 forked ranks fit the built-in MLP on a CSV this test
 * writes, then validate its checkpoint; bad options are errors before anything runs. */
static void check_training_run(void) {
  char dir[] = "/tmp/ddpspawn-c-run-XXXXXX";
  if (mkdtemp(dir) == NULL) {
    failures++;
    return;
  }
  char csv[512], train_opt[600], root_opt[600], data_opt[600], ckpt_opt[1200];
  snprintf(csv, sizeof csv, "%s/train.csv", dir);
  FILE* out = fopen(csv, "w");
  srand(7);
  for (int i = 0; i < 120; i++) {
    double x[4];
    int label = 0;
    for (int j = 0; j < 4; j++) x[j] = rand() / (double)RAND_MAX;
    for (int j = 1; j < 3; j++) label = x[j] > x[label] ? j : label;
    fprintf(out, "%f,%f,%f,%f,%d\n", x[0], x[1], x[2], x[3], label);
  }
  fclose(out);
  snprintf(train_opt, sizeof train_opt, "train=%s", csv);
  snprintf(data_opt, sizeof data_opt, "data=%s", csv);
  snprintf(root_opt, sizeof root_opt, "default_root_dir=%s/logs", dir);
  const char* fit_options[] = {"model=mlp:4,16,3", train_opt, root_opt,       "nproc_per_node=2",
                               "max_epochs=10",    "lr=0.5",  "momentum=0.9", "batch_size=16",
                               "progress=false",   NULL};
  ddpspawn_run_result* result = NULL;
  CHECK(ddpspawn_run("fit", fit_options, &result) == DDPSPAWN_OK);
  const char* checkpoint = ddpspawn_run_result_get(result, "checkpoint");
  CHECK(checkpoint != NULL && strstr(checkpoint, "last.ckpt") != NULL);
  CHECK(ddpspawn_run_result_get(result, "global_step") != NULL &&
        strcmp(ddpspawn_run_result_get(result, "global_step"), "40") == 0);
  CHECK(ddpspawn_run_result_get(result, "no.such.key") == NULL);
  CHECK(strstr(ddpspawn_run_result_text(result), "metric.train_loss_epoch=") != NULL);
  /* Enumerated pairs are the text's lines, in order, and agree with _get. */
  const size_t pairs = ddpspawn_run_result_count(result);
  CHECK(pairs >= 3);
  size_t text_lines = 0;
  const char* text = ddpspawn_run_result_text(result);
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c != '\n' && (c == text || c[-1] == '\n')) ++text_lines; /* a line starts */
  }
  CHECK(pairs == text_lines);
  for (size_t i = 0; i < pairs; ++i) {
    const char* key = ddpspawn_run_result_key(result, i);
    CHECK(key != NULL && ddpspawn_run_result_value(result, i) != NULL);
    CHECK(key != NULL &&
          ddpspawn_run_result_get(result, key) == ddpspawn_run_result_value(result, i));
  }
  CHECK(ddpspawn_run_result_key(result, pairs) == NULL);
  CHECK(ddpspawn_run_result_value(result, pairs) == NULL);
  CHECK(ddpspawn_run_result_count(NULL) == 0 && ddpspawn_run_result_key(NULL, 0) == NULL);
  snprintf(ckpt_opt, sizeof ckpt_opt, "checkpoint=%s", checkpoint ? checkpoint : "");
  ddpspawn_run_result_destroy(result);

  const char* validate_options[] = {"model=mlp:4,16,3", data_opt,           ckpt_opt,
                                    root_opt,           "nproc_per_node=2", NULL};
  result = NULL;
  CHECK(ddpspawn_run("validate", validate_options, &result) == DDPSPAWN_OK);
  const char* accuracy = ddpspawn_run_result_get(result, "metric.val_accuracy");
  CHECK(accuracy != NULL && atof(accuracy) > 0.7);
  ddpspawn_run_result_destroy(result);
  /* How each rank of the last run ended, without reading any message. */
  CHECK(ddpspawn_run_failed_rank() == -1);
  CHECK(ddpspawn_run_nprocs() == 2);
  ddpspawn_rank_report run_report = DDPSPAWN_RANK_REPORT_INIT;
  CHECK(ddpspawn_run_rank_report(1, &run_report) == DDPSPAWN_OK);
  CHECK(run_report.state == DDPSPAWN_RANK_EXITED && run_report.exit_code == 0);
  CHECK(ddpspawn_run_rank_report(2, &run_report) == DDPSPAWN_ERR_INVALID_ARGUMENT);

  /* A rank that fails: rank 0 cannot write its logs under a file. */
  const char* unwritable[] = {"model=mlp:4,16,3", train_opt,      "default_root_dir=/dev/null/logs",
                              "nproc_per_node=2", "max_epochs=1", NULL};
  result = NULL;
  CHECK(ddpspawn_run("fit", unwritable, &result) == DDPSPAWN_ERR_WORKER_FAILED);
  CHECK(ddpspawn_run_failed_rank() == 0);
  CHECK(ddpspawn_run_rank_report(0, &run_report) == DDPSPAWN_OK);
  CHECK(run_report.state == DDPSPAWN_RANK_EXITED && run_report.exit_code == 1);
  const char* rank_text = NULL;
  CHECK(ddpspawn_run_rank_error(0, &rank_text) == DDPSPAWN_OK);
  CHECK(rank_text != NULL && strstr(rank_text, "/dev/null/logs") != NULL);

  const char* missing_model[] = {"model=/nonexistent/model.pt", train_opt, NULL};
  ddpspawn_run_result* untouched = (ddpspawn_run_result*)dir;
  CHECK(ddpspawn_run("fit", missing_model, &untouched) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "/nonexistent/model.pt") != NULL);
  CHECK(ddpspawn_run_failed_rank() == -1 && ddpspawn_run_nprocs() == 0);
  CHECK(untouched == (ddpspawn_run_result*)dir);
  const char* spawn[] = {"model=mlp:4,16,3", train_opt, "start_method=spawn", NULL};
  CHECK(ddpspawn_run("fit", spawn, &result) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  const char* not_pairs[] = {"model", NULL};
  CHECK(ddpspawn_run("fit", not_pairs, &result) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_run("dance", fit_options, &result) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_run(NULL, fit_options, &result) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  ddpspawn_run_result_destroy(NULL);
  CHECK(strcmp(ddpspawn_run_result_text(NULL), "") == 0);
  CHECK(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0);
}

/* DistributedSampler's indices: without shuffle, torch's padding and striding exactly (10 samples,
 * 3 replicas: [0 3 6 9], [1 4 7 0], [2 5 8 1]; drop_last: [0 3 6], ...); with shuffle, the ranks
 * share one permutation (together they read every index once when the replicas divide the size),
 * which changes with the epoch; the count alone, and each refusal, named. */
static void check_sampler(void) {
  int64_t got[4];
  size_t count = 0;
  CHECK(ddpspawn_distributed_sampler_indices(10, 3, 1, 0, 0, 0, 0, NULL, 0, &count) == DDPSPAWN_OK);
  CHECK(count == 4);
  CHECK(ddpspawn_distributed_sampler_indices(10, 3, 1, 0, 0, 0, 0, got, 4, &count) == DDPSPAWN_OK);
  CHECK(got[0] == 1 && got[1] == 4 && got[2] == 7 && got[3] == 0);
  CHECK(ddpspawn_distributed_sampler_indices(10, 3, 2, 0, 0, 1, 0, got, 4, &count) == DDPSPAWN_OK);
  CHECK(count == 3 && got[0] == 2 && got[1] == 5 && got[2] == 8);
  int seen[12] = {0};
  int64_t epoch0[6], epoch1[6];
  for (int rank = 0; rank < 2; ++rank) {
    int64_t part[6];
    CHECK(ddpspawn_distributed_sampler_indices(12, 2, rank, 1, 7, 0, 0, part, 6, &count) ==
          DDPSPAWN_OK);
    for (int i = 0; i < 6; ++i) {
      CHECK(part[i] >= 0 && part[i] < 12);
      seen[part[i]]++;
      if (rank == 0) epoch0[i] = part[i];
    }
  }
  for (int i = 0; i < 12; ++i) CHECK(seen[i] == 1);
  CHECK(ddpspawn_distributed_sampler_indices(12, 2, 0, 1, 7, 0, 1, epoch1, 6, &count) ==
        DDPSPAWN_OK);
  CHECK(memcmp(epoch0, epoch1, sizeof epoch0) != 0);
  CHECK(ddpspawn_distributed_sampler_indices(10, 3, 1, 0, 0, 0, 0, got, 3, &count) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "out_indices holds 3 indices; rank 1 reads 4") != NULL);
  CHECK(ddpspawn_distributed_sampler_indices(10, 3, 3, 0, 0, 0, 0, got, 4, &count) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "rank 3 is out of range for 3 replicas") != NULL);
  CHECK(ddpspawn_distributed_sampler_indices(2, 3, 0, 0, 0, 1, 0, got, 4, &count) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_distributed_sampler_indices(0, 1, 0, 0, 0, 0, 0, got, 4, &count) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_distributed_sampler_indices(10, 3, 0, 0, 0, 0, -1, got, 4, &count) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_distributed_sampler_indices(10, 3, 0, 0, 0, 0, 0, got, 4, NULL) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
}

/* Byte counts no buffer can have (SIZE_MAX), or over the 1 GiB limit of the byte collectives, are
 * DDPSPAWN_ERR_INVALID_ARGUMENT with the out-parameters untouched, not an abort inside the library.
 */
static void check_byte_sizes(void) {
  ddpspawn_context* ctx = NULL;
  CHECK(ddpspawn_context_create(NULL, &ctx) == DDPSPAWN_OK);
  char buffer[4] = "abc";
  void* out = buffer;
  size_t out_size = 7;
  size_t sizes[1] = {7};
  const size_t over_limit = ((size_t)1 << 30) + 1;
  CHECK(ddpspawn_broadcast_bytes(ctx, buffer, SIZE_MAX, 0, &out, &out_size) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "at most 1073741824 bytes") != NULL);
  CHECK(ddpspawn_broadcast_bytes(ctx, buffer, over_limit, 0, &out, &out_size) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_all_gather_bytes(ctx, buffer, SIZE_MAX, &out, sizes) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_all_gather_bytes(ctx, buffer, over_limit, &out, sizes) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(out == (void*)buffer && out_size == 7 && sizes[0] == 7);
  CHECK(ddpspawn_worker_set_result(buffer, SIZE_MAX) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  /* Sizes within the limit still work. */
  CHECK(ddpspawn_broadcast_bytes(ctx, buffer, 3, 0, &out, &out_size) == DDPSPAWN_OK);
  CHECK(out_size == 3 && memcmp(out, "abc", 3) == 0);
  ddpspawn_free(out);
  CHECK(ddpspawn_all_gather_bytes(ctx, buffer, 2, &out, sizes) == DDPSPAWN_OK);
  CHECK(sizes[0] == 2 && memcmp(out, "ab", 2) == 0);
  ddpspawn_free(out);
  ddpspawn_context_destroy(ctx);
}

/* A 10 MB error text is not copied whole into ddpspawn_last_error: its first 64 KiB are kept, with
 * a note. */
static void check_long_error(void) {
  const size_t length = (size_t)10 * 1024 * 1024;
  char* backend = malloc(length + 1);
  if (backend == NULL) {
    CHECK(backend != NULL);
    return;
  }
  memset(backend, 'x', length);
  backend[length] = '\0';
  ddpspawn_context_options options = DDPSPAWN_CONTEXT_OPTIONS_INIT;
  options.backend = backend;
  ddpspawn_context* ctx = NULL;
  CHECK(ddpspawn_context_create(&options, &ctx) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  const char* message = ddpspawn_last_error();
  CHECK(strlen(message) <= (size_t)64 * 1024);
  CHECK(strncmp(message, "unknown backend 'xxxx", 21) == 0);
  CHECK(strstr(message, "[truncated: the message was 10485") != NULL);
  free(backend);
}

/* A forkserver job of 2 ranks running `argv`; NULL when it cannot be created. */
static ddpspawn_job* forkserver_job(const char* const* argv) {
  ddpspawn_launch_options options = DDPSPAWN_LAUNCH_OPTIONS_INIT;
  options.nprocs = 2;
  options.start_method = "forkserver";
  options.argv = argv;
  options.timeout_s = 60;
  ddpspawn_job* job = NULL;
  CHECK(ddpspawn_job_create(&options, &job) == DDPSPAWN_OK);
  return job;
}

/* The pid of the process that forked rank 0 of a forkserver job of 2 ranks running `argv`; 0 when
 * the job failed. */
static long forkserver_parent(const char* const* argv) {
  long parent = 0;
  ddpspawn_job* job = forkserver_job(argv);
  if (job == NULL) return 0;
  if (ddpspawn_job_run(job) == DDPSPAWN_OK) {
    const void* data = NULL;
    size_t size = 0;
    int32_t has = 0;
    char text[64] = {0};
    CHECK(ddpspawn_job_result(job, &data, &size, &has) == DDPSPAWN_OK && has == 1);
    if (has == 1 && size < sizeof text) memcpy(text, data, size);
    int served = 0;
    CHECK(sscanf(text, "parent=%ld served=%d", &parent, &served) == 2 && served == 1);
  } else {
    fprintf(stderr, "forkserver job failed: %s\n", ddpspawn_last_error());
  }
  ddpspawn_job_destroy(job);
  return parent;
}

/* forkserver: the ranks are forked by a server (this program, exec'd once), not by the launcher,
 * and a second job reuses it; the collectives work there; a program that does not serve is a clear
 * error. */
static void check_forkserver(const char* self) {
  const char* parent_argv[] = {self, "parent", NULL};
  long first = forkserver_parent(parent_argv);
  long second = forkserver_parent(parent_argv);
  CHECK(first > 0 && first != (long)getpid());
  CHECK(second == first); /* the same server, still serving */

  const char* worker_argv[] = {self, "worker", NULL};
  ddpspawn_job* job = forkserver_job(worker_argv);
  CHECK(job != NULL && ddpspawn_job_run(job) == DDPSPAWN_OK);
  if (job != NULL) check_result(job, "sum=3 world=2");
  ddpspawn_job_destroy(job);

  const char* no_server[] = {"true", NULL};
  job = forkserver_job(no_server);
  CHECK(job != NULL && ddpspawn_job_run(job) == DDPSPAWN_ERR_FAILED_PRECONDITION);
  CHECK(strstr(ddpspawn_last_error(), "ddpspawn_serve_forks_if_forkserver()") != NULL);
  ddpspawn_job_destroy(job);
}

int main(int argc, char** argv) {
  /* First of all: a forkserver's exec of this program serves here. */
  const int served = ddpspawn_serve_forks_if_forkserver();
  if (argc > 1 && strcmp(argv[1], "worker") == 0) return run_collectives();
  if (argc > 1 && strcmp(argv[1], "parent") == 0) return report_parent(served);
  CHECK(served == 0);

  CHECK(ddpspawn_abi_version() == DDPSPAWN_ABI_VERSION);
  /* *_init_sized: the library's defaults, only up to the caller's size. */
  ddpspawn_reducer_options sized;
  memset(&sized, 0xab, sizeof sized);
  CHECK(ddpspawn_reducer_options_init_sized(&sized, sizeof sized) == DDPSPAWN_OK);
  ddpspawn_reducer_options expected = DDPSPAWN_REDUCER_OPTIONS_INIT;
  CHECK(sized.struct_size == sizeof sized && sized.bucket_cap_mb == expected.bucket_cap_mb &&
        sized.powersgd_rank == expected.powersgd_rank);
  CHECK(ddpspawn_reducer_options_init_sized(&sized, sizeof sized - 4) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "no released version") != NULL);
  CHECK(ddpspawn_launch_options_init_sized(NULL, 8) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  /* The build names its LibTorch 2.x and at least the gloo backend. */
  CHECK(strstr(ddpspawn_build_info(), "\ntorch=2.") != NULL);
  CHECK(strstr(ddpspawn_build_info(), "\nbackends=gloo") != NULL);
  CHECK(strncmp(ddpspawn_build_info(), "version=", 8) == 0);

  /* spawn: this program, re-executed as 2 ranks. */
  const char* worker_argv[] = {"/proc/self/exe", "worker", NULL};
  char self[4096];
  snprintf(self, sizeof self, "%s", argv[0]);
  worker_argv[0] = self;
  ddpspawn_launch_options options = DDPSPAWN_LAUNCH_OPTIONS_INIT;
  options.nprocs = 2;
  options.argv = worker_argv;
  options.timeout_s = 60;
  ddpspawn_job* job = NULL;
  CHECK(ddpspawn_job_create(&options, &job) == DDPSPAWN_OK);
  CHECK(ddpspawn_job_run(job) == DDPSPAWN_OK);
  check_result(job, "sum=3 world=2");
  ddpspawn_rank_report report = DDPSPAWN_RANK_REPORT_INIT;
  CHECK(ddpspawn_job_rank_report(job, 1, &report) == DDPSPAWN_OK);
  CHECK(report.state == DDPSPAWN_RANK_EXITED && report.exit_code == 0 && report.pid > 0);
  CHECK(ddpspawn_job_failed_rank(job) == -1);
  ddpspawn_job_destroy(job);

  check_two_nodes(worker_argv);
  check_forkserver(self);

  /* fork: the same collectives in forked children. */
  ddpspawn_launch_options fork_options = DDPSPAWN_LAUNCH_OPTIONS_INIT;
  fork_options.nprocs = 2;
  fork_options.start_method = "fork";
  fork_options.worker_fn = fork_worker;
  fork_options.timeout_s = 60;
  job = NULL;
  CHECK(ddpspawn_job_create(&fork_options, &job) == DDPSPAWN_OK);
  CHECK(ddpspawn_job_run(job) == DDPSPAWN_OK);
  check_result(job, "sum=3 world=2");
  ddpspawn_job_destroy(job);

  /* max_restarts: after rank 1 fails in the first start, the ranks start again and the second
   * start's result is the job's. */
  ddpspawn_launch_options restart_options = fork_options;
  restart_options.worker_fn = fail_first_start;
  restart_options.max_restarts = 1;
  job = NULL;
  CHECK(ddpspawn_job_create(&restart_options, &job) == DDPSPAWN_OK);
  CHECK(ddpspawn_job_run(job) == DDPSPAWN_OK);
  check_result(job, "start 1");
  CHECK(ddpspawn_job_restarts(job) == 1);
  ddpspawn_job_destroy(job);
  restart_options.max_restarts = 0;
  job = NULL;
  CHECK(ddpspawn_job_create(&restart_options, &job) == DDPSPAWN_OK);
  CHECK(ddpspawn_job_run(job) == DDPSPAWN_ERR_WORKER_FAILED);
  CHECK(strstr(ddpspawn_last_error(), "rank 1 fails in start 0") != NULL);
  CHECK(ddpspawn_job_restarts(job) == 0);
  ddpspawn_job_destroy(job);
  restart_options.max_restarts = -1;
  CHECK(ddpspawn_job_create(&restart_options, &job) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "max_restarts must be >= 0") != NULL);
  CHECK(ddpspawn_job_restarts(NULL) == -1);

  /* Bad input: a code and a message, never a crash; out-parameters untouched.
   */
  ddpspawn_job* untouched = (ddpspawn_job*)&options;
  CHECK(ddpspawn_job_create(NULL, &untouched) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(untouched == (ddpspawn_job*)&options);
  CHECK(strstr(ddpspawn_last_error(), "options") != NULL);
  options.nprocs = 0;
  CHECK(ddpspawn_job_create(&options, &untouched) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "nprocs") != NULL);
  options.nprocs = 2;
  options.start_method = "thread";
  CHECK(ddpspawn_job_create(&options, &untouched) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "start method") != NULL);
  options.start_method = NULL;
  options.struct_size = 3;
  CHECK(ddpspawn_job_create(&options, &untouched) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(untouched == (ddpspawn_job*)&options);
  /* A size ending mid-field is no released version's: refused, not copied. */
  options.struct_size = (uint32_t)sizeof options - 4;
  CHECK(ddpspawn_job_create(&options, &untouched) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "no released version") != NULL);
  CHECK(untouched == (ddpspawn_job*)&options);
  options.struct_size = sizeof options;
  CHECK(ddpspawn_job_start(NULL) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  ddpspawn_job_destroy(NULL);
  ddpspawn_context_destroy(NULL);
  CHECK(ddpspawn_all_reduce(NULL, NULL, 0, DDPSPAWN_FLOAT32, DDPSPAWN_SUM) ==
        DDPSPAWN_ERR_INVALID_ARGUMENT);

  ddpspawn_context_options context_options = DDPSPAWN_CONTEXT_OPTIONS_INIT;
  ddpspawn_context* ctx = NULL;
  context_options.backend = "mpi";
  CHECK(ddpspawn_context_create(&context_options, &ctx) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(ddpspawn_last_error(), "backend") != NULL);
  /* nccl: unavailable, saying why, exactly without NCCL in the build or without a CUDA device; else
   * a group of one joins. */
  context_options.backend = "nccl";
  if (strstr(ddpspawn_build_info(), "\nnccl=none\n") != NULL) {
    CHECK(ddpspawn_context_create(&context_options, &ctx) == DDPSPAWN_ERR_UNAVAILABLE);
    CHECK(ctx == NULL);
    CHECK(strstr(ddpspawn_last_error(), "this build of ddpspawn has none") != NULL);
  } else if (!cuda_device_visible()) {
    CHECK(ddpspawn_context_create(&context_options, &ctx) == DDPSPAWN_ERR_UNAVAILABLE);
    CHECK(ctx == NULL);
    CHECK(strstr(ddpspawn_last_error(), "no CUDA device is present") != NULL);
  } else {
    CHECK(ddpspawn_context_create(&context_options, &ctx) == DDPSPAWN_OK);
    CHECK(ctx != NULL && ddpspawn_context_world_size(ctx) == 1);
    ddpspawn_context_destroy(ctx);
    ctx = NULL;
  }
  context_options.backend = NULL;
  CHECK(ddpspawn_context_create(&context_options, &ctx) == DDPSPAWN_OK);
  CHECK(ddpspawn_context_world_size(ctx) == 1);
  float one = 1.0f;
  CHECK(ddpspawn_all_reduce(ctx, &one, 1, 99, DDPSPAWN_SUM) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_all_reduce(ctx, &one, 1, DDPSPAWN_FLOAT32, 42) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  CHECK(ddpspawn_broadcast(ctx, &one, 1, DDPSPAWN_FLOAT32, 5) == DDPSPAWN_ERR_INVALID_ARGUMENT);
  check_dlpack_refusals(ctx);
  ddpspawn_context_destroy(ctx);

  check_byte_sizes();
  check_sampler();
  check_long_error();

  /* A reducer may outlive its context: it keeps the process group. */
  ddpspawn_context* solo = NULL;
  CHECK(ddpspawn_context_create(NULL, &solo) == DDPSPAWN_OK);
  float grad[3] = {1.0f, 2.0f, 3.0f};
  void* grad_buffers[] = {grad};
  size_t grad_counts[] = {3};
  int32_t grad_dtypes[] = {DDPSPAWN_FLOAT32};
  ddpspawn_reducer* orphan = NULL;
  CHECK(ddpspawn_reducer_create(solo, grad_buffers, grad_counts, grad_dtypes, 1, NULL, &orphan) ==
        DDPSPAWN_OK);
  ddpspawn_context_destroy(solo);
  CHECK(ddpspawn_reducer_mark_ready(orphan, 0) == DDPSPAWN_OK);
  CHECK(ddpspawn_reducer_finalize(orphan) == DDPSPAWN_OK);
  CHECK(grad[0] == 1.0f && grad[1] == 2.0f && grad[2] == 3.0f);
  ddpspawn_reducer_destroy(orphan);

  check_training_run();

  if (failures == 0) printf("c_api_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
