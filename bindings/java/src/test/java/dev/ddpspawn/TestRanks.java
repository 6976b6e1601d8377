// The ranks the tests start: each scenario checks what it receives and fails the rank otherwise.
package dev.ddpspawn;

import static java.lang.foreign.ValueLayout.JAVA_DOUBLE;
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;

/** A rank's main: args[0] names the scenario. */
public final class TestRanks {
  private TestRanks() {}

  public static void main(String[] args) {
    Worker.run(
        () -> {
          switch (args[0]) {
            case "collectives" -> collectives();
            case "reducer" -> reducer();
            case "hook" -> hook();
            case "fail" -> fail();
            case "sleep" -> sleep();
            default -> throw new IllegalArgumentException("no scenario " + args[0]);
          }
        });
  }

  static void expect(boolean condition, String what) {
    if (!condition) {
      throw new AssertionError(what);
    }
  }

  /** Every collective on values that differ per rank, against the exact result. */
  private static void collectives() {
    try (Context context = Context.fromEnvironment();
        Arena arena = Arena.ofConfined()) {
      int rank = context.rank();
      int world = context.worldSize();
      expect(world == 2 && context.environment().equals("ddpspawn"), "2 ddpspawn ranks");

      MemorySegment sum = arena.allocateFrom(JAVA_DOUBLE, rank + 1.0, 10.0 * (rank + 1));
      context.allReduce(sum, DType.FLOAT64, ReduceOp.SUM);
      expect(Arrays.equals(sum.toArray(JAVA_DOUBLE), new double[] {3, 30}), "all_reduce sum");

      MemorySegment max = arena.allocateFrom(JAVA_LONG, rank, -rank);
      context.allReduce(max, DType.INT64, ReduceOp.MAX);
      expect(Arrays.equals(max.toArray(JAVA_LONG), new long[] {1, 0}), "all_reduce max");

      MemorySegment broadcast = arena.allocateFrom(JAVA_FLOAT, rank == 1 ? 7f : 0f);
      context.broadcast(broadcast, DType.FLOAT32, 1);
      expect(broadcast.getAtIndex(JAVA_FLOAT, 0) == 7f, "broadcast from rank 1");

      MemorySegment mine = arena.allocateFrom(JAVA_FLOAT, rank, rank + 0.5f);
      MemorySegment gathered = arena.allocate(JAVA_FLOAT, 4);
      context.allGather(mine, DType.FLOAT32, gathered);
      expect(
          Arrays.equals(gathered.toArray(JAVA_FLOAT), new float[] {0, 0.5f, 1, 1.5f}),
          "all_gather");

      // Rank r's input is [r+1, r+1, 10(r+1), 10(r+1)]: chunk r of the mean is ([1.5, 1.5] or
      // [15, 15]).
      float v = rank + 1;
      MemorySegment input = arena.allocateFrom(JAVA_FLOAT, v, v, 10 * v, 10 * v);
      MemorySegment output = arena.allocate(JAVA_FLOAT, 2);
      context.reduceScatter(input, output, DType.FLOAT32, ReduceOp.MEAN);
      float expected = rank == 0 ? 1.5f : 15f;
      expect(
          Arrays.equals(output.toArray(JAVA_FLOAT), new float[] {expected, expected}),
          "reduce_scatter mean: " + Arrays.toString(output.toArray(JAVA_FLOAT)));

      byte[] text =
          context.broadcastBytes(("from rank " + rank).getBytes(StandardCharsets.UTF_8), 0);
      expect(new String(text, StandardCharsets.UTF_8).equals("from rank 0"), "broadcast_bytes");

      List<byte[]> all = context.allGatherBytes(new byte[rank + 1]);
      expect(
          all.size() == 2 && all.get(0).length == 1 && all.get(1).length == 2, "all_gather_bytes");

      context.barrier("done");
      // One launcher's ranks on one host meet in shared memory: their arrivals are timed.
      Context.Straggler straggler = context.straggler();
      expect(
          straggler.measured() && straggler.collectives() >= 7 && straggler.rank() >= 0,
          "a measured straggler report: " + straggler);
      expect(straggler.summary().contains("arrived last"), straggler.summary());

      // Rank 1 comes 10 ms late to each of 20 all-reduces: it is the one that arrived last (at
      // least 18 times: a loaded machine may deschedule the other now and then), and rank 0 waited
      // for it.
      Context.RankArrivals[] before = {context.rankArrivals(0), context.rankArrivals(1)};
      for (int i = 0; i < 20; i++) {
        if (rank == 1) {
          try {
            Thread.sleep(10);
          } catch (InterruptedException e) {
            throw new IllegalStateException(e);
          }
        }
        context.allReduce(arena.allocateFrom(JAVA_FLOAT, 1f), DType.FLOAT32, ReduceOp.SUM);
      }
      Context.RankArrivals[] after = {context.rankArrivals(0), context.rankArrivals(1)};
      long lastOf1 = after[1].arrivedLast() - before[1].arrivedLast();
      long lastOf0 = after[0].arrivedLast() - before[0].arrivedLast();
      expect(lastOf0 + lastOf1 == 20 && lastOf1 >= 18, "rank 1 arrived last: " + lastOf1);
      double waited0 = after[0].waitedSeconds() - before[0].waitedSeconds();
      double waited1 = after[1].waitedSeconds() - before[1].waitedSeconds();
      expect(waited0 > 0.1 && waited0 > waited1, "rank 0 waited " + waited0 + " s, 1 " + waited1);
      expect(context.straggler().rank() == 1, "the straggler: " + context.straggler());
      if (rank == 0) {
        Worker.setResult("collectives ok".getBytes(StandardCharsets.UTF_8));
      }
    }
  }

  /** Two buffers averaged in buckets; no_sync accumulates and writes nothing. */
  private static void reducer() {
    try (Context context = Context.fromEnvironment();
        Arena arena = Arena.ofConfined()) {
      int rank = context.rank();
      MemorySegment a = arena.allocate(JAVA_FLOAT, 1000);
      MemorySegment b = arena.allocate(JAVA_FLOAT, 3);
      // Small buckets: the two buffers go in buckets of their own.
      try (Reducer reducer =
          Reducer.builder()
              .bucketCapMb(0.001)
              .firstBucketCapMb(0.001)
              .build(context, List.of(a, b), DType.FLOAT32)) {
        expect(reducer.bucketCount() == 2, "2 buckets, not " + reducer.bucketCount());
        a.fill((byte) 0);
        for (int i = 0; i < 1000; i++) {
          a.setAtIndex(JAVA_FLOAT, i, i * (rank + 1)); // mean: 1.5 i
        }
        MemorySegment.copy(new float[] {rank, 2 * rank, 4}, 0, b, JAVA_FLOAT, 0, 3);
        reducer.markReady(1);
        reducer.markReady(0);
        reducer.finish();
        for (int i = 0; i < 1000; i++) {
          expect(a.getAtIndex(JAVA_FLOAT, i) == 1.5f * i, "buffer 0's mean at " + i);
        }
        expect(
            Arrays.equals(b.toArray(JAVA_FLOAT), new float[] {0.5f, 1f, 4f}),
            "buffer 1's mean: " + Arrays.toString(b.toArray(JAVA_FLOAT)));
        expect(reducer.written(0) && reducer.written(1), "both written");

        reducer.setSync(false); // no_sync: left as it is
        b.setAtIndex(JAVA_FLOAT, 0, rank);
        reducer.markReady(0);
        reducer.markReady(1);
        reducer.finish();
        expect(
            b.getAtIndex(JAVA_FLOAT, 0) == rank && !reducer.written(1), "no_sync writes nothing");
        reducer.setSync(true);
        reducer.markReady(0);
        reducer.markReady(1);
        reducer.finish();
        expect(b.getAtIndex(JAVA_FLOAT, 0) == 0.5f, "synced again");
        long[] none = reducer.compression();
        expect(none[0] == 0 && none[1] == 0, "all-reduce compresses nothing");
      }
      // Batched PowerSGD from the first iteration: a 1000-element bucket, zero-padded to a 32x32
      // matrix, is sent as rank-1 factors (2 x 32 elements), not 1000.
      MemorySegment c = arena.allocate(JAVA_FLOAT, 1000);
      try (Reducer reducer =
          Reducer.builder()
              .commHook("batched_powersgd")
              .powerSgdStartIteration(0)
              .build(context, List.of(c), DType.FLOAT32)) {
        reducer.markReady(0);
        reducer.finish();
        long[] sent = reducer.compression();
        expect(sent[0] > 0 && sent[0] < sent[1], "compressed: " + Arrays.toString(sent));
      }
      if (rank == 0) {
        Worker.setResult("reducer ok".getBytes(StandardCharsets.UTF_8));
      }
    }
  }

  /**
   * A Java hook that averages with the context it is lent, then adds 1000 (so the result shows that
   * it, not the built-in all-reduce, ran); then a hook that throws fails the reducer's call.
   */
  private static void hook() {
    try (Context context = Context.fromEnvironment();
        Arena arena = Arena.ofConfined()) {
      int rank = context.rank();
      MemorySegment a = arena.allocateFrom(JAVA_FLOAT, rank, 10 * rank);
      MemorySegment b = arena.allocateFrom(JAVA_DOUBLE, 2.0 * rank);
      int[] calls = {0};
      CommHook meanPlus1000 =
          (lent, bucket) -> {
            calls[0]++;
            lent.allReduce(bucket.data(), bucket.dtype(), ReduceOp.MEAN);
            for (long i = 0; i < bucket.data().byteSize() / 4; i++) {
              bucket
                  .data()
                  .setAtIndex(JAVA_FLOAT, i, bucket.data().getAtIndex(JAVA_FLOAT, i) + 1000);
            }
          };
      try (Reducer reducer =
          Reducer.builder()
              .customCommHook(meanPlus1000)
              .build(context, List.of(a), DType.FLOAT32)) {
        reducer.markReady(0);
        reducer.finish();
        expect(
            Arrays.equals(a.toArray(JAVA_FLOAT), new float[] {1000.5f, 1005f}),
            "the hook's mean + 1000: " + Arrays.toString(a.toArray(JAVA_FLOAT)));
        expect(calls[0] == reducer.bucketCount(), "one call a bucket, not " + calls[0]);
      }
      CommHook refuses =
          (lent, bucket) -> {
            throw new IllegalStateException("the hook says no to bucket " + bucket.index());
          };
      try (Reducer reducer =
          Reducer.builder().customCommHook(refuses).build(context, List.of(b), DType.FLOAT64)) {
        try {
          reducer.markReady(0);
          reducer.finish();
          throw new AssertionError("a throwing hook did not fail the reducer");
        } catch (DdpspawnException.Internal e) {
          expect(e.getMessage().contains("the hook says no to bucket 0"), e.getMessage());
        }
      }
      if (rank == 0) {
        Worker.setResult("hook ok".getBytes(StandardCharsets.UTF_8));
      }
    }
  }

  /**
   * Rank 1 throws; rank 0 is busy in its own code (not in a collective, which would see rank 1 gone
   * and fail by itself, sometimes before the launcher's stop reaches it) until the launcher stops
   * it.
   */
  private static void fail() {
    try (Context context = Context.fromEnvironment()) {
      if (context.rank() == 1) {
        throw new IllegalStateException("rank one fails on purpose");
      }
      sleep();
    }
  }

  private static void sleep() {
    try {
      Thread.sleep(60_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
