// What needs no launcher: the library's facts, a world of one, and the binding's own refusals.
package dev.ddpspawn;

import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import org.junit.jupiter.api.Test;

class SingleProcessTest {
  @Test
  void theLibraryIsTheOneThisBindingIsFor() {
    assertEquals(Library.ABI_VERSION, Library.abiVersion());
    assertTrue(Library.version().matches("\\d+\\.\\d+\\.\\d+"), Library.version());
    assertTrue(Library.buildInfo().contains("backends="), Library.buildInfo());
    assertFalse(Worker.isWorker());
  }

  @Test
  void aWorldOfOneReducesToItself() {
    try (Context context = Context.fromEnvironment();
        Arena arena = Arena.ofConfined()) {
      assertEquals(0, context.rank());
      assertEquals(1, context.worldSize());
      MemorySegment data = arena.allocateFrom(JAVA_FLOAT, 1.5f, -2f);
      context.allReduce(data, DType.FLOAT32, ReduceOp.SUM);
      assertEquals(1.5f, data.getAtIndex(JAVA_FLOAT, 0));
    }
  }

  @Test
  void heapMemoryAndPartialElementsAreRefused() {
    try (Context context = Context.fromEnvironment();
        Arena arena = Arena.ofConfined()) {
      assertThrows(
          IllegalArgumentException.class,
          () ->
              context.allReduce(MemorySegment.ofArray(new float[2]), DType.FLOAT32, ReduceOp.SUM));
      assertThrows(
          IllegalArgumentException.class,
          () -> context.allReduce(arena.allocate(6), DType.FLOAT32, ReduceOp.SUM));
    }
  }

  @Test
  void aClosedContextOrArenaIsRefused() {
    Context context = Context.fromEnvironment();
    Arena arena = Arena.ofConfined();
    Reducer reducer =
        Reducer.create(context, List.of(arena.allocate(JAVA_FLOAT, 4)), DType.FLOAT32);
    context.close();
    context.close(); // idempotent
    assertThrows(IllegalStateException.class, context::rank);
    reducer.markReady(0); // the reducer keeps the group
    reducer.finish();
    arena.close();
    assertThrows(IllegalStateException.class, () -> reducer.markReady(0));
    reducer.close();
    assertThrows(IllegalStateException.class, () -> reducer.setSync(false));
  }

  @Test
  void theSamplerPadsAndStridesAsTorchAndSharesOnePermutation() {
    DistributedSampler rankOne = DistributedSampler.of(10, 3, 1).withShuffle(false);
    assertArrayEquals(new long[] {1, 4, 7, 0}, rankOne.indices(0));
    assertArrayEquals(new long[] {1, 4, 7}, rankOne.withDropLast(true).indices(0));
    long[] all = new long[20];
    for (int rank = 0; rank < 4; rank++) {
      System.arraycopy(
          DistributedSampler.of(20, 4, rank).withSeed(3).indices(0), 0, all, 5 * rank, 5);
    }
    java.util.Arrays.sort(all);
    assertArrayEquals(java.util.stream.LongStream.range(0, 20).toArray(), all);
    DistributedSampler zero = DistributedSampler.of(20, 4, 0).withSeed(3);
    assertFalse(java.util.Arrays.equals(zero.indices(0), zero.indices(1)), "the epoch reshuffles");
    DdpspawnException failure =
        assertThrows(
            DdpspawnException.InvalidArgument.class,
            () -> DistributedSampler.of(10, 3, 3).indices(0));
    assertTrue(failure.getMessage().contains("rank 3 is out of range for 3 replicas"));
  }

  @Test
  void anUnknownBackendIsAnInvalidArgument() {
    DdpspawnException failure =
        assertThrows(
            DdpspawnException.class,
            () -> Context.create("carrier-pigeon", java.time.Duration.ofSeconds(5)));
    assertTrue(failure.getMessage().contains("carrier-pigeon"), failure.getMessage());
    assertEquals(Status.INVALID_ARGUMENT, failure.code());
  }
}
