// dev.ddpspawn.Fabric: the conformance loop against C++'s, the verbs, a rank's failure, joining a
// job of another launcher, and the refusal outside a rank. Each program runs in a JVM of its own
// (FabricRanks), as a user's would.
package dev.ddpspawn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class FabricTest {
  @TempDir Path dir;

  /** This JVM's java, options and class path running FabricRanks with {@code args}. */
  private static ProcessBuilder fabricRanks(String... args) {
    List<String> argv = new ArrayList<>();
    argv.add(ProcessHandle.current().info().command().orElseThrow());
    argv.add("--enable-native-access=ALL-UNNAMED");
    argv.add("-Djava.io.tmpdir=" + System.getProperty("java.io.tmpdir"));
    argv.add("-cp");
    argv.add(System.getProperty("java.class.path"));
    argv.add(FabricRanks.class.getName());
    argv.addAll(List.of(args));
    return new ProcessBuilder(argv).redirectErrorStream(true);
  }

  /** Runs {@code process} to its end (2 minutes at most): its exit code, then its output. */
  private static String[] run(ProcessBuilder process) throws IOException, InterruptedException {
    Process started = process.start();
    String output = new String(started.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(started.waitFor(120, TimeUnit.SECONDS), "the program ended");
    return new String[] {Integer.toString(started.exitValue()), output};
  }

  /** The text after "result: " of a program that succeeded. */
  private static String result(String[] run) {
    assertEquals("0", run[0], run[1]);
    int at = run[1].indexOf("result: ");
    assertTrue(at >= 0, run[1]);
    return run[1].substring(at + "result: ".length()).strip();
  }

  private static float[] floats(String lines) {
    return FabricRanks.floatsOf(lines);
  }

  private static double largestDifference(float[] a, float[] b) {
    assertEquals(a.length, b.length, "as many parameters");
    double largest = 0;
    for (int i = 0; i < a.length; i++) {
      largest = Math.max(largest, Math.abs((double) a[i] - b[i]));
    }
    return largest;
  }

  @Test
  void theConformanceLoopEndsWhereCppsDoes() throws Exception {
    Path fabricMain = Path.of("tests/fabric/fabric_main").toAbsolutePath();
    assertTrue(Files.isExecutable(fabricMain), fabricMain + ": the test's data");
    String[] cpp = run(new ProcessBuilder(fabricMain.toString(), "train", dir.toString()));
    assertEquals("0", cpp[0], cpp[1]);

    String[] sections = result(run(fabricRanks("conformance", dir.toString()))).split("\n--\n");
    assertEquals(3, sections.length);
    float[] java = floats(sections[0]);
    float[] cppWeights = FabricRanks.readValues(dir.resolve("weights.txt"));
    float[] initial = FabricRanks.readValues(dir.resolve("initial.txt"));
    double difference = largestDifference(java, cppWeights);
    double moved = largestDifference(cppWeights, initial);
    float[] inputs = FabricRanks.readValues(dir.resolve("inputs.txt"));
    double halfAlone =
        largestDifference(
            FabricRanks.trainAlone(initial, inputs, 0, FabricRanks.ROWS / 2), cppWeights);
    double wholeAlone =
        largestDifference(FabricRanks.trainAlone(initial, inputs, 0, FabricRanks.ROWS), cppWeights);
    System.out.printf(
        "fabric conformance, C++ and Java, 2 ranks: largest difference %.3e (the weights moved by"
            + " %.3e; rank 0's half alone ends %.3e away, the whole batches alone %.3e)%n",
        difference, moved, halfAlone, wholeAlone);
    // Told apart from one rank's training, and the Java arithmetic is the loop's: the whole
    // batches in one process are the mean of both halves, C++'s result.
    assertTrue(moved > 1e-3 && halfAlone > 1e-4, "the loop tells 2 ranks from one");
    assertTrue(wholeAlone <= 1e-6, "one process on the whole batches ends " + wholeAlone + " away");
    // Java computes the forward and backward itself (in double, stored as float): not LibTorch's
    // kernels, so equal to 1e-6, not bit for bit.
    assertTrue(difference <= 1e-6, "Java's weights differ from C++'s by " + difference);

    // C++'s checkpoint and Java's own, loaded by Fabric.load: C++'s weights and Java's, exactly.
    String[] cppLoaded = sections[1].split("\n", 2);
    assertEquals("4", cppLoaded[0]);
    assertEquals(0.0, largestDifference(floats(cppLoaded[1]), cppWeights));
    String[] javaLoaded = sections[2].split("\n", 2);
    assertEquals("4", javaLoaded[0]);
    assertEquals(0.0, largestDifference(floats(javaLoaded[1]), java));
  }

  private static final String VERBS =
      "mean=1.5 gathered=[0.0, 10.0] from_rank_1=7.0 bytes=rank1 clamped=[-1.0, 0.5, 1.0]"
          + " norm=1.5000 clipped=[-0.066666625, 0.033333313, 0.066666625] step=7"
          + " loaded=[1.0, 2.0, 3.0] refused=true";

  @Test
  void theVerbsGiveTheirResults() throws Exception {
    assertEquals(VERBS, result(run(fabricRanks("verbs", dir.toString()))));
    List<String> rows = Files.readAllLines(dir.resolve("metrics.csv"));
    assertEquals(3, rows.size(), rows.toString()); // the header and rank 0's two rows
    assertTrue(rows.get(1).contains("1.5") && rows.get(2).contains("0.5"), rows.toString());
  }

  @Test
  void aNonFiniteGradientFailsTheJobNamingTheRankAndTheParameter() throws Exception {
    String[] run = run(fabricRanks("nan", dir.toString()));
    assertEquals("1", run[0], run[1]);
    assertTrue(run[1].contains("failed: ") && run[1].contains("rank 1"), run[1]);
    assertTrue(run[1].contains("the gradient of 0.bias (shape [8]) is not finite"), run[1]);
  }

  @Test
  void inAJobOfAnotherLauncherEachProcessRunsTheLoopAsItsRank() throws Exception {
    int port;
    try (ServerSocket socket = new ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    List<Process> ranks = new ArrayList<>();
    for (int rank = 0; rank < 2; rank++) {
      ProcessBuilder process = fabricRanks("verbs", dir.toString());
      Map<String, String> env = process.environment();
      env.putAll(
          Map.of(
              "MASTER_ADDR",
              "127.0.0.1",
              "MASTER_PORT",
              Integer.toString(port),
              "RANK",
              Integer.toString(rank),
              "WORLD_SIZE",
              "2"));
      ranks.add(process.start());
    }
    for (Process rank : ranks) {
      String output = new String(rank.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(rank.waitFor(120, TimeUnit.SECONDS), "the rank ended");
      assertEquals(0, rank.exitValue(), output);
      assertTrue(output.contains("result: " + VERBS), output);
    }
  }

  @Test
  void verbsOutsideALaunchedLoopAreRefused() {
    Fabric fabric = Fabric.of(2);
    IllegalStateException refused =
        assertThrows(IllegalStateException.class, () -> fabric.barrier("outside"));
    assertTrue(refused.getMessage().contains("Fabric.barrier is for a rank's loop"));
    assertThrows(IllegalStateException.class, fabric::worldSize);
  }
}
