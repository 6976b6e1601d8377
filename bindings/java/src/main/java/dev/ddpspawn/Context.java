// A rank's membership of the process group, and the collectives on native memory.
package dev.ddpspawn;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * Joins the process group the environment describes (a ddpspawn launcher, torchrun, SLURM, or
 * MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE; one process when none is set) and runs collectives on
 * native memory, in place and without copies. Every rank must issue the same collectives in the
 * same order. Not thread-safe: one thread at a time. Close it to leave the group (a {@link Reducer}
 * made from it keeps the group alive until it is closed too).
 */
public final class Context implements AutoCloseable {
  // struct ddpspawn_context_options: uint32 struct_size, const char* backend, double timeout_s.
  private static final long OPTIONS_SIZE = 24;

  private MemorySegment handle;
  private final boolean owned;

  private Context(MemorySegment handle, boolean owned) {
    this.handle = handle;
    this.owned = owned;
  }

  /** A context the library lends for one call (a comm hook's): closing it destroys nothing. */
  static Context borrowed(MemorySegment handle) {
    return new Context(handle, false);
  }

  /** Joins with the default backend (gloo) and timeout (1800 s). */
  public static Context fromEnvironment() {
    return create(null, Duration.ZERO);
  }

  /** Joins with {@code backend} ("gloo" or "nccl") and a limit for joining and each collective. */
  public static Context create(String backend, Duration timeout) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment options = arena.allocate(OPTIONS_SIZE, 8);
      Native.check(Native.CONTEXT_OPTIONS_INIT_SIZED, options, (int) OPTIONS_SIZE);
      if (backend != null) {
        options.set(ValueLayout.ADDRESS, 8, arena.allocateFrom(backend));
      }
      options.set(ValueLayout.JAVA_DOUBLE, 16, timeout.toNanos() / 1e9);
      MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
      Native.check(Native.CONTEXT_CREATE, options, out);
      return new Context(out.get(ValueLayout.ADDRESS, 0), true);
    }
  }

  public int rank() {
    return (int) Native.call(Native.CONTEXT_RANK, handle());
  }

  public int worldSize() {
    return (int) Native.call(Native.CONTEXT_WORLD_SIZE, handle());
  }

  public int localRank() {
    return (int) Native.call(Native.CONTEXT_LOCAL_RANK, handle());
  }

  public int localWorldSize() {
    return (int) Native.call(Native.CONTEXT_LOCAL_WORLD_SIZE, handle());
  }

  public int nodeRank() {
    return (int) Native.call(Native.CONTEXT_NODE_RANK, handle());
  }

  /** The cluster environment detected: "ddpspawn", "torchelastic", "slurm" or "env". */
  public String environment() {
    return Native.string((MemorySegment) Native.call(Native.CONTEXT_ENVIRONMENT, handle()));
  }

  /**
   * Which rank holds the others back, over this context's collectives so far. Timed where one
   * launcher's ranks meet in shared memory (gloo on one host); elsewhere {@code measured} is false
   * and the summary says why.
   */
  public record Straggler(boolean measured, long collectives, int rank, String summary) {}

  /** The straggler report so far (ddpspawn_context_straggler). */
  public Straggler straggler() {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment measured = arena.allocate(ValueLayout.JAVA_INT);
      MemorySegment collectives = arena.allocate(ValueLayout.JAVA_LONG);
      MemorySegment rank = arena.allocate(ValueLayout.JAVA_INT);
      MemorySegment summary = arena.allocate(ValueLayout.ADDRESS);
      Native.check(Native.CONTEXT_STRAGGLER, handle(), measured, collectives, rank, summary);
      return new Straggler(
          measured.get(ValueLayout.JAVA_INT, 0) != 0,
          collectives.get(ValueLayout.JAVA_LONG, 0),
          rank.get(ValueLayout.JAVA_INT, 0),
          Native.string(summary.get(ValueLayout.ADDRESS, 0)));
    }
  }

  /**
   * One rank's arrivals so far: the collectives it reached after every other rank, how much later
   * than the next-latest rank it was over those, and how long it waited for the last rank over
   * every collective (seconds). All 0 where arrivals are not measured.
   */
  public record RankArrivals(long arrivedLast, double lateSeconds, double waitedSeconds) {}

  /** Rank {@code rank}'s arrivals (ddpspawn_context_rank_arrivals). */
  public RankArrivals rankArrivals(int rank) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment arrivedLast = arena.allocate(ValueLayout.JAVA_LONG);
      MemorySegment late = arena.allocate(ValueLayout.JAVA_DOUBLE);
      MemorySegment waited = arena.allocate(ValueLayout.JAVA_DOUBLE);
      Native.check(Native.CONTEXT_RANK_ARRIVALS, handle(), rank, arrivedLast, late, waited);
      return new RankArrivals(
          arrivedLast.get(ValueLayout.JAVA_LONG, 0),
          late.get(ValueLayout.JAVA_DOUBLE, 0),
          waited.get(ValueLayout.JAVA_DOUBLE, 0));
    }
  }

  /** Waits until every rank reached the barrier {@code name}. */
  public void barrier(String name) {
    try (Arena arena = Arena.ofConfined()) {
      Native.check(Native.BARRIER, handle(), arena.allocateFrom(name));
    }
  }

  /** In place: every rank ends with {@code op} over every rank's {@code data}. */
  public void allReduce(MemorySegment data, DType dtype, ReduceOp op) {
    Native.check(Native.ALL_REDUCE, handle(), data, dtype.count(data, "data"), dtype.code, op.code);
  }

  /** In place on {@code dst} only. */
  public void reduce(MemorySegment data, DType dtype, ReduceOp op, int dst) {
    Native.check(
        Native.REDUCE, handle(), data, dtype.count(data, "data"), dtype.code, op.code, dst);
  }

  /** Overwrites {@code data} on every rank with rank {@code src}'s. */
  public void broadcast(MemorySegment data, DType dtype, int src) {
    Native.check(Native.BROADCAST, handle(), data, dtype.count(data, "data"), dtype.code, src);
  }

  /** {@code out} (world size times {@code data}'s size) gets every rank's data in rank order. */
  public void allGather(MemorySegment data, DType dtype, MemorySegment out) {
    long count = dtype.count(data, "data");
    if (dtype.count(out, "out") != count * worldSize()) {
      throw new IllegalArgumentException(
          "ddpspawn: out must hold world size (" + worldSize() + ") times data's elements");
    }
    Native.check(Native.ALL_GATHER, handle(), data, count, dtype.code, out);
  }

  /**
   * {@code output} gets chunk {@code rank} of {@code op} over every rank's {@code input} (world
   * size chunks of output's size, in rank order); input is unchanged.
   */
  public void reduceScatter(MemorySegment input, MemorySegment output, DType dtype, ReduceOp op) {
    long count = dtype.count(output, "output");
    if (dtype.count(input, "input") != count * worldSize()) {
      throw new IllegalArgumentException(
          "ddpspawn: input must hold world size (" + worldSize() + ") times output's elements");
    }
    Native.check(Native.REDUCE_SCATTER, handle(), input, output, count, dtype.code, op.code);
  }

  /** Rank {@code src}'s bytes, on every rank (the others' {@code data} is not read). */
  public byte[] broadcastBytes(byte[] data, int src) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
      MemorySegment size = arena.allocate(ValueLayout.JAVA_LONG);
      Native.check(
          Native.BROADCAST_BYTES, handle(), bytes(arena, data), (long) data.length, src, out, size);
      return takeBytes(out.get(ValueLayout.ADDRESS, 0), size.get(ValueLayout.JAVA_LONG, 0));
    }
  }

  /** Every rank's bytes, in rank order. */
  public List<byte[]> allGatherBytes(byte[] data) {
    int worldSize = worldSize();
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
      MemorySegment sizes = arena.allocate(ValueLayout.JAVA_LONG, worldSize);
      Native.check(
          Native.ALL_GATHER_BYTES, handle(), bytes(arena, data), (long) data.length, out, sizes);
      long total = 0;
      for (int rank = 0; rank < worldSize; rank++) {
        total += sizes.getAtIndex(ValueLayout.JAVA_LONG, rank);
      }
      MemorySegment all = out.get(ValueLayout.ADDRESS, 0).reinterpret(total);
      List<byte[]> result = new ArrayList<>(worldSize);
      long offset = 0;
      for (int rank = 0; rank < worldSize; rank++) {
        long size = sizes.getAtIndex(ValueLayout.JAVA_LONG, rank);
        result.add(all.asSlice(offset, size).toArray(ValueLayout.JAVA_BYTE));
        offset += size;
      }
      Native.call(Native.FREE, all);
      return result;
    }
  }

  /** Leaves the group; later calls throw IllegalStateException. Idempotent. */
  @Override
  public void close() {
    if (handle != null && owned) {
      Native.call(Native.CONTEXT_DESTROY, handle);
    }
    handle = null;
  }

  MemorySegment handle() {
    if (handle == null) {
      throw new IllegalStateException("ddpspawn: the Context is closed");
    }
    return handle;
  }

  /** A copy of {@code data} in {@code arena} (at least one byte, so never NULL). */
  static MemorySegment bytes(Arena arena, byte[] data) {
    MemorySegment segment = arena.allocate(Math.max(1, data.length));
    MemorySegment.copy(data, 0, segment, ValueLayout.JAVA_BYTE, 0, data.length);
    return segment;
  }

  private static byte[] takeBytes(MemorySegment pointer, long size) {
    byte[] result = pointer.reinterpret(size).toArray(ValueLayout.JAVA_BYTE);
    Native.call(Native.FREE, pointer);
    return result;
  }
}
