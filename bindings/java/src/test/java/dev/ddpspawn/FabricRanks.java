// Programs whose own loop runs under dev.ddpspawn.Fabric, as a user writes one; FabricTest runs
// them
// in JVMs of their own (Fabric.launch reruns the program as each rank).
package dev.ddpspawn;

import static java.lang.foreign.ValueLayout.JAVA_FLOAT;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * {@code FabricRanks MODE DIR}: prints "result: " and rank 0's result, or "failed: " and the job's
 * error (then exits 1).
 *
 * <ul>
 *   <li>{@code conformance DIR}: the loop of tests/fabric/fabric_main's "train" mode (4 SGD steps
 *       with momentum of 2 micro-batches each, the first under noBackwardSync, gradients clipped to
 *       norm 0.05; each of 2 ranks trains on its half of every batch of 16 rows) from DIR's
 *       initial.txt and inputs.txt; saves DIR/java.ckpt. Result: the trained parameters, then those
 *       loaded from DIR/final.ckpt (C++'s Fabric::Save) and from DIR/java.ckpt, each after its
 *       step; sections split by "--" lines.
 *   <li>{@code verbs DIR}: the collectives, clipGradientValues, log into DIR, and load's refusal of
 *       another shape: one line of findings.
 *   <li>{@code nan DIR}: rank 1's gradients hold a NaN at clipGradients.
 * </ul>
 */
public final class FabricRanks {
  static final int STEPS = 4;
  static final int ROWS = 16;
  static final double MAX_NORM = 0.05;

  private FabricRanks() {}

  public static void main(String[] args) throws IOException {
    Path dir = Path.of(args[1]);
    Fabric.Loop loop =
        switch (args[0]) {
          case "conformance" -> conformance(dir);
          case "verbs" -> fabric -> verbs(fabric, dir);
          case "nan" -> FabricRanks::nan;
          default -> throw new IllegalArgumentException("no mode " + args[0]);
        };
    try {
      System.out.println("result: " + Fabric.of(2).logDir(dir).launch(loop));
    } catch (DdpspawnException e) {
      System.out.println("failed: " + e.getMessage());
      System.exit(1);
    }
  }

  /** The conformance network: Linear(4, 8), Tanh, Linear(8, 1), its buffers in one arena. */
  static final class Net {
    final MemorySegment[] values = new MemorySegment[4];
    final MemorySegment[] gradients = new MemorySegment[4];
    final List<Parameter> parameters = new ArrayList<>();
    static final String[] NAMES = {"0.weight", "0.bias", "2.weight", "2.bias"};
    static final long[][] SHAPES = {{8, 4}, {8}, {1, 8}, {1}};

    Net(Arena arena, float[] initial) {
      int offset = 0;
      for (int i = 0; i < 4; i++) {
        int count = (int) Arrays.stream(SHAPES[i]).reduce(1, (a, b) -> a * b);
        values[i] = arena.allocate(JAVA_FLOAT, count);
        gradients[i] = arena.allocate(JAVA_FLOAT, count);
        MemorySegment.copy(initial, offset, values[i], JAVA_FLOAT, 0, count);
        offset += count;
        parameters.add(Parameter.of(NAMES[i], values[i], gradients[i], SHAPES[i]));
      }
    }

    float w(int i, long index) {
      return values[i].getAtIndex(JAVA_FLOAT, index);
    }

    /**
     * Adds the gradient of mean((net(x) - x.sum(1))^2) over {@code rows} rows of {@code batch} from
     * {@code first} into the gradient buffers, as autograd accumulates.
     */
    void addGradients(float[] batch, int first, int rows) {
      for (int r = first; r < first + rows; r++) {
        double[] h = new double[8];
        double y = w(3, 0);
        double target = 0;
        for (int k = 0; k < 4; k++) {
          target += batch[4 * r + k];
        }
        for (int j = 0; j < 8; j++) {
          double z = w(1, j);
          for (int k = 0; k < 4; k++) {
            z += w(0, 4L * j + k) * batch[4 * r + k];
          }
          h[j] = Math.tanh(z);
          y += w(2, j) * h[j];
        }
        double dy = 2 * (y - target) / rows;
        add(3, 0, dy);
        for (int j = 0; j < 8; j++) {
          add(2, j, dy * h[j]);
          double dz = dy * w(2, j) * (1 - h[j] * h[j]);
          add(1, j, dz);
          for (int k = 0; k < 4; k++) {
            add(0, 4L * j + k, dz * batch[4 * r + k]);
          }
        }
      }
    }

    private void add(int i, long index, double delta) {
      gradients[i].setAtIndex(
          JAVA_FLOAT, index, (float) (gradients[i].getAtIndex(JAVA_FLOAT, index) + delta));
    }

    void zeroGradients() {
      for (MemorySegment gradient : gradients) {
        gradient.fill((byte) 0);
      }
    }

    /** SGD with momentum 0.9 and learning rate 0.1, as torch.optim.SGD steps. */
    void sgdStep(float[][] momentum, boolean first) {
      for (int i = 0; i < 4; i++) {
        for (int e = 0; e < momentum[i].length; e++) {
          float g = gradients[i].getAtIndex(JAVA_FLOAT, e);
          momentum[i][e] = first ? g : momentum[i][e] * 0.9f + g;
          values[i].setAtIndex(JAVA_FLOAT, e, w(i, e) - 0.1f * momentum[i][e]);
        }
      }
    }

    float[][] newMomentum() {
      float[][] momentum = new float[4][];
      for (int i = 0; i < 4; i++) {
        momentum[i] = new float[(int) (values[i].byteSize() / 4)];
      }
      return momentum;
    }

    String lines() {
      StringBuilder text = new StringBuilder();
      for (MemorySegment value : values) {
        for (float v : value.toArray(JAVA_FLOAT)) {
          text.append(v).append('\n');
        }
      }
      return text.toString();
    }
  }

  static float[] readValues(Path path) throws IOException {
    return floatsOf(Files.readString(path));
  }

  private static Fabric.Loop conformance(Path dir) throws IOException {
    float[] initial = readValues(dir.resolve("initial.txt"));
    float[] inputs = readValues(dir.resolve("inputs.txt"));
    return fabric -> {
      try (Arena arena = Arena.ofConfined()) {
        Net net = new Net(arena, initial);
        try (FabricModel model = fabric.setup(net.parameters)) {
          int half = ROWS / fabric.worldSize();
          int first = fabric.globalRank() * half;
          float[][] momentum = net.newMomentum();
          for (int step = 0; step < STEPS; step++) {
            net.zeroGradients();
            for (int micro = 0; micro < 2; micro++) {
              float[] batch =
                  Arrays.copyOfRange(
                      inputs, (2 * step + micro) * ROWS * 4, (2 * step + micro + 1) * ROWS * 4);
              fabric.noBackwardSync(
                  model,
                  micro == 0,
                  () -> fabric.backward(model, () -> net.addGradients(batch, first, half)));
            }
            fabric.clipGradients(model, MAX_NORM);
            net.sgdStep(momentum, step == 0);
          }
          fabric.save(dir.resolve("java.ckpt"), model, STEPS);
          StringBuilder result = new StringBuilder(net.lines());
          for (String file : new String[] {"final.ckpt", "java.ckpt"}) {
            Net fresh = new Net(arena, new float[49]);
            try (FabricModel loaded = fabric.setup(fresh.parameters)) {
              long step = fabric.load(dir.resolve(file), loaded);
              result.append("--\n").append(step).append('\n').append(fresh.lines());
            }
          }
          return result.toString();
        }
      }
    };
  }

  /**
   * The conformance loop in this process alone on {@code rows} rows of each batch from {@code
   * first}, clipped here (in double): the parameters it ends with.
   */
  static float[] trainAlone(float[] initial, float[] inputs, int first, int rows) {
    try (Arena arena = Arena.ofConfined()) {
      Net net = new Net(arena, initial);
      float[][] momentum = net.newMomentum();
      for (int step = 0; step < STEPS; step++) {
        net.zeroGradients();
        for (int micro = 0; micro < 2; micro++) {
          int at = (2 * step + micro) * ROWS * 4;
          net.addGradients(Arrays.copyOfRange(inputs, at, at + ROWS * 4), first, rows);
        }
        double squares = 0;
        for (MemorySegment gradient : net.gradients) {
          for (float g : gradient.toArray(JAVA_FLOAT)) {
            squares += (double) g * g;
          }
        }
        double scale = Math.min(1, MAX_NORM / (Math.sqrt(squares) + 1e-6));
        for (MemorySegment gradient : net.gradients) {
          for (long e = 0; e < gradient.byteSize() / 4; e++) {
            gradient.setAtIndex(
                JAVA_FLOAT, e, (float) (gradient.getAtIndex(JAVA_FLOAT, e) * scale));
          }
        }
        net.sgdStep(momentum, step == 0);
      }
      return floatsOf(net.lines());
    }
  }

  static float[] floatsOf(String lines) {
    String[] words = lines.strip().split("\\s+");
    float[] values = new float[words.length];
    for (int i = 0; i < words.length; i++) {
      values[i] = Float.parseFloat(words[i]);
    }
    return values;
  }

  private static String verbs(Fabric fabric, Path dir) {
    int rank = fabric.globalRank();
    List<String> findings = new ArrayList<>();
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment mine = arena.allocateFrom(JAVA_FLOAT, rank + 1f);
      fabric.allReduce(mine, DType.FLOAT32, ReduceOp.MEAN);
      findings.add("mean=" + mine.getAtIndex(JAVA_FLOAT, 0));
      MemorySegment gathered = arena.allocate(JAVA_FLOAT, 2);
      fabric.allGather(arena.allocateFrom(JAVA_FLOAT, rank * 10f), DType.FLOAT32, gathered);
      findings.add("gathered=" + Arrays.toString(gathered.toArray(JAVA_FLOAT)));
      MemorySegment from1 = arena.allocateFrom(JAVA_FLOAT, rank == 1 ? 7f : 0f);
      fabric.broadcast(from1, DType.FLOAT32, 1);
      findings.add("from_rank_1=" + from1.getAtIndex(JAVA_FLOAT, 0));
      byte[] bytes = fabric.broadcastBytes(("rank" + rank).getBytes(StandardCharsets.UTF_8), 1);
      findings.add("bytes=" + new String(bytes, StandardCharsets.UTF_8));
      fabric.barrier("verbs");

      MemorySegment value = arena.allocateFrom(JAVA_FLOAT, 1f, 2f, 3f);
      MemorySegment gradient = arena.allocate(JAVA_FLOAT, 3);
      try (FabricModel model =
          fabric.setup(List.of(Parameter.of("fc.weight", value, gradient, 3)))) {
        gradient.copyFrom(MemorySegment.ofArray(new float[] {-3f, 0.5f, 3f}));
        fabric.clipGradientValues(model, 1.0);
        findings.add("clamped=" + Arrays.toString(gradient.toArray(JAVA_FLOAT)));
        findings.add(String.format("norm=%.4f", fabric.clipGradients(model, 0.1)));
        findings.add("clipped=" + Arrays.toString(gradient.toArray(JAVA_FLOAT)));
        Path path = dir.resolve("verbs.ckpt");
        fabric.save(path, model, 7);
        value.fill((byte) 0);
        findings.add("step=" + fabric.load(path, model));
        findings.add("loaded=" + Arrays.toString(value.toArray(JAVA_FLOAT)));
        MemorySegment longer = arena.allocate(JAVA_FLOAT, 4);
        Parameter other = Parameter.of("fc.weight", longer, arena.allocate(JAVA_FLOAT, 4), 4);
        try (FabricModel another = fabric.setup(List.of(other))) {
          fabric.load(path, another);
          findings.add("another_shape_loaded");
        } catch (DdpspawnException.InvalidArgument e) {
          findings.add("refused=" + e.getMessage().contains("fc.weight"));
        }
      }

      fabric.logDict(Map.of("loss", 1.5 + rank), 0, 0);
      fabric.log("loss", 0.5 + rank, 1, 0);
    }
    return String.join(" ", findings);
  }

  private static String nan(Fabric fabric) {
    try (Arena arena = Arena.ofConfined()) {
      Net net = new Net(arena, new float[49]);
      try (FabricModel model = fabric.setup(net.parameters)) {
        if (fabric.globalRank() == 1) {
          net.gradients[1].setAtIndex(JAVA_FLOAT, 3, Float.NaN);
        }
        fabric.clipGradients(model, 1.0);
      }
    }
    return "clipped a NaN";
  }
}
