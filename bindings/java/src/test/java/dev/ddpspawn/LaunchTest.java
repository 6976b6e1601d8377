// Java ranks started by the Launcher: collectives and the reducer, exact, and how failures end.
package dev.ddpspawn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

class LaunchTest {
  private static String result(JobReport report) {
    return new String(report.result().orElseThrow(), StandardCharsets.UTF_8);
  }

  private static Launcher launcher() {
    return new Launcher(2).timeout(Duration.ofSeconds(120));
  }

  @Test
  void collectivesGiveTheExactResults() {
    JobReport report = launcher().spawnJava(TestRanks.class, "collectives");
    assertEquals("collectives ok", result(report));
    assertEquals(2, report.ranks().size());
    assertTrue(report.failedRank().isEmpty());
    for (RankReport rank : report.ranks()) {
      assertEquals(RankReport.State.EXITED, rank.state());
      assertEquals(0, rank.exitCode());
    }
  }

  @Test
  void reducerAveragesInPlaceAndNoSyncAccumulates() {
    assertEquals("reducer ok", result(launcher().spawnJava(TestRanks.class, "reducer")));
  }

  @Test
  void aJavaCommHookAveragesEveryBucketAndItsErrorsReachTheCaller() {
    assertEquals("hook ok", result(launcher().spawnJava(TestRanks.class, "hook")));
  }

  @Test
  void aFailingRankIsNamedWithItsStackTrace() {
    DdpspawnException.WorkerFailed failure =
        assertThrows(
            DdpspawnException.WorkerFailed.class,
            () -> launcher().gracePeriod(Duration.ofSeconds(1)).spawnJava(TestRanks.class, "fail"));
    JobReport report = failure.report().orElseThrow();
    assertEquals(1, report.failedRank().getAsInt());
    RankReport one = report.ranks().get(1);
    assertEquals(RankReport.State.EXITED, one.state());
    assertEquals(1, one.exitCode());
    assertTrue(one.error().contains("rank one fails on purpose"), one.error());
    assertTrue(report.ranks().get(0).stoppedByLauncher(), "rank 0 was stopped by the launcher");
    assertTrue(failure.getMessage().contains("rank 1"), failure.getMessage());
    assertEquals(Status.WORKER_FAILED, failure.code());
  }

  @Test
  void theJobsTimeoutStopsEveryRank() {
    DdpspawnException.Timeout timeout =
        assertThrows(
            DdpspawnException.Timeout.class,
            () ->
                new Launcher(2)
                    .timeout(Duration.ofSeconds(2))
                    .gracePeriod(Duration.ofMillis(200))
                    .spawnJava(TestRanks.class, "sleep"));
    for (RankReport rank : timeout.report().orElseThrow().ranks()) {
      assertTrue(rank.stoppedByLauncher(), "rank " + rank.rank() + " stopped");
    }
  }

  @Test
  void badOptionsAreRefusedBeforeAnyProcessStarts() {
    assertThrows(
        DdpspawnException.InvalidArgument.class, () -> new Launcher(0).spawn(List.of("true")));
    DdpspawnException failure =
        assertThrows(
            DdpspawnException.InvalidArgument.class,
            () -> new Launcher(1).spawn(List.of("/nonexistent/program")));
    assertTrue(failure.getMessage().contains("/nonexistent/program"), failure.getMessage());
  }
}
