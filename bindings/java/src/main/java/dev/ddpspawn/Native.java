// The C ABI's functions as method handles, one for one with capi/include/ddpspawn/ddpspawn.h.
package dev.ddpspawn;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_DOUBLE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;

/**
 * The loaded library's entry points. Loaded once per class loader (the global arena: the library
 * stays loaded for the JVM's life). No logic: the classes that call these own the meaning.
 */
final class Native {
  private static final Linker LINKER = Linker.nativeLinker();
  private static final SymbolLookup LIBRARY =
      SymbolLookup.libraryLookup(LibraryLocation.find(), Arena.global());

  // Errors and the library.
  static final MethodHandle LAST_ERROR = function("ddpspawn_last_error", ADDRESS);
  static final MethodHandle ABI_VERSION = function("ddpspawn_abi_version", JAVA_INT);
  static final MethodHandle VERSION = function("ddpspawn_version", ADDRESS);
  static final MethodHandle BUILD_INFO = function("ddpspawn_build_info", ADDRESS);
  static final MethodHandle FREE = procedure("ddpspawn_free", ADDRESS);
  static final MethodHandle SET_LAST_ERROR =
      function("ddpspawn_set_last_error", JAVA_INT, JAVA_INT, ADDRESS);

  // The launcher.
  static final MethodHandle LAUNCH_OPTIONS_INIT_SIZED =
      function("ddpspawn_launch_options_init_sized", JAVA_INT, ADDRESS, JAVA_INT);
  static final MethodHandle JOB_CREATE =
      function("ddpspawn_job_create", JAVA_INT, ADDRESS, ADDRESS);
  static final MethodHandle JOB_DESTROY = procedure("ddpspawn_job_destroy", ADDRESS);
  static final MethodHandle JOB_RUN = function("ddpspawn_job_run", JAVA_INT, ADDRESS);
  static final MethodHandle RANK_REPORT_INIT_SIZED =
      function("ddpspawn_rank_report_init_sized", JAVA_INT, ADDRESS, JAVA_INT);
  static final MethodHandle JOB_NPROCS = function("ddpspawn_job_nprocs", JAVA_INT, ADDRESS);
  static final MethodHandle JOB_RESTARTS = function("ddpspawn_job_restarts", JAVA_INT, ADDRESS);
  static final MethodHandle JOB_RANK_REPORT =
      function("ddpspawn_job_rank_report", JAVA_INT, ADDRESS, JAVA_INT, ADDRESS);
  static final MethodHandle JOB_FAILED_RANK =
      function("ddpspawn_job_failed_rank", JAVA_INT, ADDRESS);
  static final MethodHandle JOB_RANK_ERROR =
      function("ddpspawn_job_rank_error", JAVA_INT, ADDRESS, JAVA_INT, ADDRESS);
  static final MethodHandle JOB_RESULT =
      function("ddpspawn_job_result", JAVA_INT, ADDRESS, ADDRESS, ADDRESS, ADDRESS);

  // Inside a worker.
  static final MethodHandle IS_WORKER = function("ddpspawn_is_worker", JAVA_INT);
  static final MethodHandle WORKER_SET_RESULT =
      function("ddpspawn_worker_set_result", JAVA_INT, ADDRESS, JAVA_LONG);
  static final MethodHandle WORKER_SET_ERROR =
      function("ddpspawn_worker_set_error", JAVA_INT, ADDRESS);

  // Contexts and collectives.
  static final MethodHandle CONTEXT_OPTIONS_INIT_SIZED =
      function("ddpspawn_context_options_init_sized", JAVA_INT, ADDRESS, JAVA_INT);
  static final MethodHandle CONTEXT_CREATE =
      function("ddpspawn_context_create", JAVA_INT, ADDRESS, ADDRESS);
  static final MethodHandle CONTEXT_DESTROY = procedure("ddpspawn_context_destroy", ADDRESS);
  static final MethodHandle CONTEXT_RANK = function("ddpspawn_context_rank", JAVA_INT, ADDRESS);
  static final MethodHandle CONTEXT_WORLD_SIZE =
      function("ddpspawn_context_world_size", JAVA_INT, ADDRESS);
  static final MethodHandle CONTEXT_LOCAL_RANK =
      function("ddpspawn_context_local_rank", JAVA_INT, ADDRESS);
  static final MethodHandle CONTEXT_LOCAL_WORLD_SIZE =
      function("ddpspawn_context_local_world_size", JAVA_INT, ADDRESS);
  static final MethodHandle CONTEXT_NODE_RANK =
      function("ddpspawn_context_node_rank", JAVA_INT, ADDRESS);
  static final MethodHandle CONTEXT_ENVIRONMENT =
      function("ddpspawn_context_environment", ADDRESS, ADDRESS);
  static final MethodHandle CONTEXT_STRAGGLER =
      function("ddpspawn_context_straggler", JAVA_INT, ADDRESS, ADDRESS, ADDRESS, ADDRESS, ADDRESS);
  static final MethodHandle CONTEXT_RANK_ARRIVALS =
      function(
          "ddpspawn_context_rank_arrivals", JAVA_INT, ADDRESS, JAVA_INT, ADDRESS, ADDRESS, ADDRESS);
  static final MethodHandle BARRIER = function("ddpspawn_barrier", JAVA_INT, ADDRESS, ADDRESS);
  static final MethodHandle BROADCAST =
      function("ddpspawn_broadcast", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT);
  static final MethodHandle BROADCAST_BYTES =
      function(
          "ddpspawn_broadcast_bytes",
          JAVA_INT,
          ADDRESS,
          ADDRESS,
          JAVA_LONG,
          JAVA_INT,
          ADDRESS,
          ADDRESS);
  static final MethodHandle ALL_REDUCE =
      function("ddpspawn_all_reduce", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT);
  static final MethodHandle REDUCE =
      function(
          "ddpspawn_reduce", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, JAVA_INT);
  static final MethodHandle ALL_GATHER =
      function("ddpspawn_all_gather", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, ADDRESS);
  static final MethodHandle REDUCE_SCATTER =
      function(
          "ddpspawn_reduce_scatter",
          JAVA_INT,
          ADDRESS,
          ADDRESS,
          ADDRESS,
          JAVA_LONG,
          JAVA_INT,
          JAVA_INT);
  static final MethodHandle ALL_GATHER_BYTES =
      function(
          "ddpspawn_all_gather_bytes", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS);

  // The gradient reducer.
  static final MethodHandle REDUCER_OPTIONS_INIT_SIZED =
      function("ddpspawn_reducer_options_init_sized", JAVA_INT, ADDRESS, JAVA_INT);
  static final MethodHandle REDUCER_CREATE =
      function(
          "ddpspawn_reducer_create",
          JAVA_INT,
          ADDRESS,
          ADDRESS,
          ADDRESS,
          ADDRESS,
          JAVA_LONG,
          ADDRESS,
          ADDRESS);
  static final MethodHandle REDUCER_DESTROY = procedure("ddpspawn_reducer_destroy", ADDRESS);
  static final MethodHandle REDUCER_MARK_READY =
      function("ddpspawn_reducer_mark_ready", JAVA_INT, ADDRESS, JAVA_LONG);
  static final MethodHandle REDUCER_FINALIZE =
      function("ddpspawn_reducer_finalize", JAVA_INT, ADDRESS);
  static final MethodHandle REDUCER_SET_SYNC =
      function("ddpspawn_reducer_set_sync", JAVA_INT, ADDRESS, JAVA_INT);
  static final MethodHandle REDUCER_WRITTEN =
      function("ddpspawn_reducer_written", JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS);
  static final MethodHandle REDUCER_BUCKET_COUNT =
      function("ddpspawn_reducer_bucket_count", JAVA_INT, ADDRESS);
  static final MethodHandle REDUCER_COMPRESSION =
      function("ddpspawn_reducer_compression", JAVA_INT, ADDRESS, ADDRESS, ADDRESS);

  // Sharding a dataset.
  static final MethodHandle DISTRIBUTED_SAMPLER_INDICES =
      function(
          "ddpspawn_distributed_sampler_indices",
          JAVA_INT,
          JAVA_LONG,
          JAVA_INT,
          JAVA_INT,
          JAVA_INT,
          JAVA_LONG,
          JAVA_INT,
          JAVA_LONG,
          ADDRESS,
          JAVA_LONG,
          ADDRESS);

  // A loop's own checkpoints, metrics and gradient clipping (DLTensor arrays: DLTensors.java).
  static final MethodHandle CHECKPOINT_SAVE_DLPACK =
      function(
          "ddpspawn_checkpoint_save_dlpack",
          JAVA_INT,
          ADDRESS,
          ADDRESS,
          ADDRESS,
          ADDRESS,
          JAVA_LONG,
          JAVA_LONG);
  static final MethodHandle CHECKPOINT_LOAD_DLPACK =
      function(
          "ddpspawn_checkpoint_load_dlpack",
          JAVA_INT,
          ADDRESS,
          ADDRESS,
          ADDRESS,
          JAVA_LONG,
          ADDRESS);
  static final MethodHandle LOG_METRICS =
      function(
          "ddpspawn_log_metrics",
          JAVA_INT,
          ADDRESS,
          ADDRESS,
          JAVA_LONG,
          JAVA_LONG,
          ADDRESS,
          ADDRESS,
          JAVA_LONG);
  static final MethodHandle CLIP_GRAD_NORM_DLPACK =
      function(
          "ddpspawn_clip_grad_norm_dlpack",
          JAVA_INT,
          ADDRESS,
          ADDRESS,
          JAVA_LONG,
          JAVA_DOUBLE,
          JAVA_DOUBLE,
          ADDRESS);
  static final MethodHandle CLIP_GRAD_VALUE_DLPACK =
      function("ddpspawn_clip_grad_value_dlpack", JAVA_INT, ADDRESS, JAVA_LONG, JAVA_DOUBLE);

  // Training runs.
  static final MethodHandle RUN = function("ddpspawn_run", JAVA_INT, ADDRESS, ADDRESS, ADDRESS);
  static final MethodHandle RUN_RESULT_DESTROY = procedure("ddpspawn_run_result_destroy", ADDRESS);
  static final MethodHandle RUN_RESULT_COUNT =
      function("ddpspawn_run_result_count", JAVA_LONG, ADDRESS);
  static final MethodHandle RUN_RESULT_KEY =
      function("ddpspawn_run_result_key", ADDRESS, ADDRESS, JAVA_LONG);
  static final MethodHandle RUN_RESULT_VALUE =
      function("ddpspawn_run_result_value", ADDRESS, ADDRESS, JAVA_LONG);
  static final MethodHandle RUN_FAILED_RANK = function("ddpspawn_run_failed_rank", JAVA_INT);
  static final MethodHandle RUN_NPROCS = function("ddpspawn_run_nprocs", JAVA_INT);
  static final MethodHandle RUN_RANK_REPORT =
      function("ddpspawn_run_rank_report", JAVA_INT, JAVA_INT, ADDRESS);
  static final MethodHandle RUN_RANK_ERROR =
      function("ddpspawn_run_rank_error", JAVA_INT, JAVA_INT, ADDRESS);

  private Native() {}

  /** Calls {@code handle}; the C ABI throws nothing, so a Throwable here is the JVM's own. */
  static Object call(MethodHandle handle, Object... arguments) {
    try {
      return handle.invokeWithArguments(arguments);
    } catch (RuntimeException | Error e) {
      throw e;
    } catch (Throwable t) {
      throw new IllegalStateException("ddpspawn: calling the C library failed", t);
    }
  }

  /** Calls a function that returns a ddpspawn_status and throws its exception when not OK. */
  static void check(MethodHandle handle, Object... arguments) {
    Status.check((int) call(handle, arguments));
  }

  /** A NUL-terminated C string the library owns, or null for NULL. */
  static String string(MemorySegment pointer) {
    return pointer.equals(MemorySegment.NULL)
        ? null
        : pointer.reinterpret(Long.MAX_VALUE).getString(0);
  }

  private static MethodHandle function(
      String name, MemoryLayout result, MemoryLayout... arguments) {
    return LINKER.downcallHandle(symbol(name), FunctionDescriptor.of(result, arguments));
  }

  private static MethodHandle procedure(String name, MemoryLayout... arguments) {
    return LINKER.downcallHandle(symbol(name), FunctionDescriptor.ofVoid(arguments));
  }

  private static MemorySegment symbol(String name) {
    return LIBRARY
        .find(name)
        .orElseThrow(() -> new UnsatisfiedLinkError("ddpspawn: the library has no " + name));
  }
}
