// DistributedDataParallel's gradient averaging for any Java framework, over native buffers.
package dev.ddpspawn;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;

/**
 * Averages a fixed set of gradient buffers across the ranks of a {@link Context}, in buckets whose
 * all-reduce starts as soon as their buffers are marked ready, overlapping the rest of backward.
 * Each iteration: write the gradients into the buffers, {@link #markReady} each one as it becomes
 * final, then {@link #finish}: every buffer then holds the mean over the ranks. The buffers are the
 * caller's native memory, used in place (no copy); their arena must stay open while the reducer is
 * (a closed one is refused). Not thread-safe. Close it to free the buckets.
 */
public final class Reducer implements AutoCloseable {
  private final List<MemorySegment> buffers;
  private final Arena hookArena; // the Java comm hook's stub and struct, or null
  private MemorySegment handle;

  private Reducer(MemorySegment handle, List<MemorySegment> buffers, Arena hookArena) {
    this.handle = handle;
    this.buffers = buffers;
    this.hookArena = hookArena;
  }

  /** A reducer with the default options (25 MB buckets, plain all-reduce). */
  public static Reducer create(Context context, List<MemorySegment> buffers, DType dtype) {
    return builder().build(context, buffers, dtype);
  }

  public static Builder builder() {
    return new Builder();
  }

  /** Buffer {@code index} is final for this iteration. */
  public void markReady(long index) {
    checkAlive(index);
    int code;
    try {
      code = (int) Native.REDUCER_MARK_READY.invokeExact(handle, index);
    } catch (Throwable t) {
      throw new IllegalStateException("ddpspawn: calling the C library failed", t);
    }
    Status.check(code);
  }

  /**
   * Starts what is left, waits, and writes the means into the buffers (ddpspawn_reducer_finalize).
   */
  public void finish() {
    for (long i = 0; i < buffers.size(); i++) {
      checkAlive(i);
    }
    int code;
    try {
      code = (int) Native.REDUCER_FINALIZE.invokeExact(handle);
    } catch (Throwable t) {
      throw new IllegalStateException("ddpspawn: calling the C library failed", t);
    }
    Status.check(code);
  }

  /**
   * Disabled: no_sync, gradients accumulate locally and {@link #finish} does nothing; the first
   * finish after enabling it again averages what accumulated.
   */
  public void setSync(boolean enabled) {
    Native.check(Native.REDUCER_SET_SYNC, handle(), enabled ? 1 : 0);
  }

  /**
   * Whether the last {@link #finish} wrote the mean into buffer {@code index} (not under no_sync,
   * nor, with unused parameters found, a buffer that no rank marked).
   */
  public boolean written(long index) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment out = arena.allocate(ValueLayout.JAVA_INT);
      Native.check(Native.REDUCER_WRITTEN, handle(), index, out);
      return out.get(ValueLayout.JAVA_INT, 0) != 0;
    }
  }

  /**
   * With the "powersgd" and "batched_powersgd" hooks: {elements the last compressed iteration sent,
   * elements of the gradients they stood for}; both 0 before compression starts and with the other
   * hooks. Read it between iterations.
   */
  public long[] compression() {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment sent = arena.allocate(ValueLayout.JAVA_LONG);
      MemorySegment dense = arena.allocate(ValueLayout.JAVA_LONG);
      Native.check(Native.REDUCER_COMPRESSION, handle(), sent, dense);
      return new long[] {sent.get(ValueLayout.JAVA_LONG, 0), dense.get(ValueLayout.JAVA_LONG, 0)};
    }
  }

  public int bucketCount() {
    return (int) Native.call(Native.REDUCER_BUCKET_COUNT, handle());
  }

  /** Frees the reducer (its buffers stay the caller's). Idempotent. */
  @Override
  public void close() {
    if (handle != null) {
      Native.call(Native.REDUCER_DESTROY, handle);
      handle = null;
      if (hookArena != null) {
        hookArena.close();
      }
    }
  }

  private MemorySegment handle() {
    if (handle == null) {
      throw new IllegalStateException("ddpspawn: the Reducer is closed");
    }
    return handle;
  }

  /**
   * Refuses a closed reducer, and buffer {@code index} when its arena was closed (an index out of
   * range is the library's to refuse). One check per call: markReady checks its buffer, finish all.
   */
  private void checkAlive(long index) {
    handle();
    if (index >= 0 && index < buffers.size() && !buffers.get((int) index).scope().isAlive()) {
      throw new IllegalStateException(
          "ddpspawn: buffer " + index + "'s arena was closed while its Reducer is open");
    }
  }

  /** The reducer's options; each starts from the loaded library's default. */
  public static final class Builder {
    // struct ddpspawn_reducer_options: uint32 struct_size, double bucket_cap_mb (8),
    // first_bucket_cap_mb (16), const char* comm_hook (24), int32 powersgd_rank (32),
    // powersgd_start_iteration (36), find_unused_parameters (40), custom_comm_hook* (48).
    private static final long OPTIONS_SIZE = 56;

    private Double bucketCapMb;
    private Double firstBucketCapMb;
    private String commHook;
    private Integer powerSgdRank;
    private Integer powerSgdStartIteration;
    private boolean findUnusedParameters;
    private CommHook customCommHook;

    private Builder() {}

    /** This Java hook averages every bucket instead of the built-in all-reduce. */
    public Builder customCommHook(CommHook hook) {
      customCommHook = hook;
      return this;
    }

    public Builder bucketCapMb(double megabytes) {
      bucketCapMb = megabytes;
      return this;
    }

    public Builder firstBucketCapMb(double megabytes) {
      firstBucketCapMb = megabytes;
      return this;
    }

    /** "allreduce", "fp16", "bf16", "powersgd" or "batched_powersgd". */
    public Builder commHook(String name) {
      commHook = name;
      return this;
    }

    public Builder powerSgdRank(int rank) {
      powerSgdRank = rank;
      return this;
    }

    public Builder powerSgdStartIteration(int iteration) {
      powerSgdStartIteration = iteration;
      return this;
    }

    /** A buffer no rank marked ready in an iteration is left untouched (one small all-reduce). */
    public Builder findUnusedParameters(boolean enabled) {
      findUnusedParameters = enabled;
      return this;
    }

    /**
     * A reducer over {@code buffers} (native memory of {@code dtype} elements, the same sizes in
     * the same order on every rank).
     */
    public Reducer build(Context context, List<MemorySegment> buffers, DType dtype) {
      List<MemorySegment> kept = List.copyOf(buffers);
      try (Arena arena = Arena.ofConfined()) {
        MemorySegment options = arena.allocate(OPTIONS_SIZE, 8);
        Native.check(Native.REDUCER_OPTIONS_INIT_SIZED, options, (int) OPTIONS_SIZE);
        if (bucketCapMb != null) {
          options.set(ValueLayout.JAVA_DOUBLE, 8, bucketCapMb);
        }
        if (firstBucketCapMb != null) {
          options.set(ValueLayout.JAVA_DOUBLE, 16, firstBucketCapMb);
        }
        if (commHook != null) {
          options.set(ValueLayout.ADDRESS, 24, arena.allocateFrom(commHook));
        }
        if (powerSgdRank != null) {
          options.set(ValueLayout.JAVA_INT, 32, powerSgdRank);
        }
        if (powerSgdStartIteration != null) {
          options.set(ValueLayout.JAVA_INT, 36, powerSgdStartIteration);
        }
        options.set(ValueLayout.JAVA_INT, 40, findUnusedParameters ? 1 : 0);
        int n = kept.size();
        MemorySegment pointers = arena.allocate(ValueLayout.ADDRESS, Math.max(1, n));
        MemorySegment counts = arena.allocate(ValueLayout.JAVA_LONG, Math.max(1, n));
        MemorySegment dtypes = arena.allocate(ValueLayout.JAVA_INT, Math.max(1, n));
        for (int i = 0; i < n; i++) {
          MemorySegment buffer = kept.get(i);
          pointers.setAtIndex(ValueLayout.ADDRESS, i, buffer);
          counts.setAtIndex(ValueLayout.JAVA_LONG, i, dtype.count(buffer, "buffer " + i));
          dtypes.setAtIndex(ValueLayout.JAVA_INT, i, dtype.code);
        }
        Arena hookArena = customCommHook == null ? null : Arena.ofShared();
        if (hookArena != null) {
          options.set(ValueLayout.ADDRESS, 48, CommHookStub.create(customCommHook, hookArena));
        }
        MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
        try {
          Native.check(
              Native.REDUCER_CREATE,
              context.handle(),
              pointers,
              counts,
              dtypes,
              (long) n,
              options,
              out);
        } catch (RuntimeException e) {
          if (hookArena != null) {
            hookArena.close();
          }
          throw e;
        }
        return new Reducer(out.get(ValueLayout.ADDRESS, 0), kept, hookArena);
      }
    }
  }
}
