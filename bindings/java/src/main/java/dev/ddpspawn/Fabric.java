// Lightning Fabric's verbs for a Java loop of one's own, over the C ABI (docs/fabric.md).
package dev.ddpspawn;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A data-parallel loop of one's own, as Lightning's {@code Fabric} runs one: {@link #launch} the
 * loop on N ranks, and in it {@link #setup} the model's parameters, take this rank's share of each
 * epoch ({@link #epochIndices}) and call {@link #backward} around the gradient computation. Java
 * has no tensor library of its own: a {@link Parameter} is a name, a shape and two native buffers
 * (its value and its gradient) that the caller's framework owns and writes.
 *
 * <p>CPU ranks (Gloo). Not thread-safe: a rank's Fabric is used on the thread that runs its loop.
 */
public final class Fabric {
  /** A rank's loop: rank 0's return value is what {@link #launch} returns in the launcher. */
  @FunctionalInterface
  public interface Loop {
    String run(Fabric fabric) throws Exception;
  }

  private final Launcher launcher;
  private Path logDir;
  private Context context;

  private Fabric(Launcher launcher) {
    this.launcher = launcher;
  }

  /** {@code devices} CPU ranks, with the launcher's defaults. */
  public static Fabric of(int devices) {
    return new Fabric(new Launcher(devices));
  }

  /** The ranks of {@code launcher}, with its settings (timeout, nodes, rendezvous, restarts). */
  public static Fabric withLauncher(Launcher launcher) {
    return new Fabric(launcher);
  }

  /** Where {@link #log} appends the Trainer's {@code metrics.csv}. */
  public Fabric logDir(Path dir) {
    this.logDir = dir;
    return this;
  }

  /**
   * Runs {@code loop} on every rank and returns rank 0's result. In the launching JVM it starts the
   * ranks: this program again (the same java, JVM options, class path, main class and arguments).
   * In a rank it joins the group, runs the loop, hands rank 0's result back and ends the JVM (exit
   * code 0, or 1 after reporting the exception, which fails the job naming the rank and the cause),
   * so it never returns there: what main does after it happens once. In a process that is already
   * one rank of a job of several (torchrun's or srun's variables, or MASTER_ADDR, RANK and
   * WORLD_SIZE) it joins that job and runs the loop here, returning this rank's result.
   */
  public String launch(Loop loop) {
    if (Worker.isWorker()) {
      runRank(loop);
      System.exit(0);
    }
    Context joined = Context.fromEnvironment();
    if (joined.worldSize() > 1) {
      context = joined;
      try {
        return loop.run(this);
      } catch (RuntimeException e) {
        throw e;
      } catch (Exception e) {
        throw new IllegalStateException("ddpspawn: the Fabric loop failed", e);
      } finally {
        context = null;
        joined.close();
      }
    }
    joined.close();
    List<String> argv = new ArrayList<>();
    ProcessHandle.Info self = ProcessHandle.current().info();
    argv.add(self.command().orElse("java"));
    argv.addAll(List.of(self.arguments().orElse(new String[0])));
    byte[] result = launcher.spawn(argv).result().orElse(new byte[0]);
    return new String(result, StandardCharsets.UTF_8);
  }

  /** In a rank: joins, runs the loop, reports rank 0's result or the failure (then exits 1). */
  private void runRank(Loop loop) {
    try (Context joined = Context.fromEnvironment()) {
      context = joined;
      String result = loop.run(this);
      if (joined.rank() == 0) {
        Worker.setResult((result == null ? "" : result).getBytes(StandardCharsets.UTF_8));
      }
    } catch (Throwable t) {
      Worker.fail(t);
    } finally {
      context = null;
    }
  }

  /** This rank's context (the collectives, the straggler report). */
  public Context context() {
    return context("context");
  }

  public int globalRank() {
    return context("globalRank").rank();
  }

  public int localRank() {
    return context("localRank").localRank();
  }

  public int nodeRank() {
    return context("nodeRank").nodeRank();
  }

  public int worldSize() {
    return context("worldSize").worldSize();
  }

  public boolean isGlobalZero() {
    return globalRank() == 0;
  }

  /**
   * Rank 0's parameter values on every rank (a broadcast, in place), and a reducer that averages
   * their gradients; every parameter of one element type. Close the model when done.
   */
  public FabricModel setup(List<Parameter> parameters) {
    return setup(parameters, Reducer.builder());
  }

  /** {@link #setup(List)} with the reducer's options (bucket caps, comm hooks, unused ones). */
  public FabricModel setup(List<Parameter> parameters, Reducer.Builder options) {
    Context rankContext = context("setup");
    if (parameters.isEmpty()) {
      throw new IllegalArgumentException("ddpspawn: Fabric.setup needs at least one parameter");
    }
    DType dtype = parameters.get(0).dtype();
    for (Parameter parameter : parameters) {
      if (parameter.dtype() != dtype) {
        throw new IllegalArgumentException(
            "ddpspawn: Fabric.setup needs every parameter of one element type: "
                + parameter.name()
                + " is "
                + parameter.dtype()
                + ", "
                + parameters.get(0).name()
                + " "
                + dtype);
      }
      rankContext.broadcast(parameter.value(), dtype, 0);
    }
    List<MemorySegment> gradients = parameters.stream().map(Parameter::gradient).toList();
    return new FabricModel(parameters, options.build(rankContext, gradients, dtype));
  }

  /** torch's DistributedSampler over {@code datasetSize} samples for this rank. */
  public DistributedSampler sampler(long datasetSize) {
    return DistributedSampler.of(context("sampler"), datasetSize);
  }

  /** This rank's share of epoch {@code epoch}, shuffled as DistributedSampler deals it. */
  public long[] epochIndices(long datasetSize, long epoch) {
    return sampler(datasetSize).indices(epoch);
  }

  /**
   * Runs {@code computeGradients} (the framework's backward, which adds this batch's gradients into
   * the gradient buffers), then averages the gradients over the ranks in place; inside {@link
   * #noBackwardSync} it only runs it, and the first backward after averages what accumulated.
   */
  public void backward(FabricModel model, Runnable computeGradients) {
    context("backward");
    computeGradients.run();
    model.syncGradients();
  }

  /**
   * Runs {@code body} with gradient averaging off when {@code enabled}: its backward calls
   * accumulate locally. Every rank must skip alike: among one launcher's ranks, ranks that do not
   * fail at the next synchronized backward, naming each rank's backward passes.
   */
  public void noBackwardSync(FabricModel model, boolean enabled, Runnable body) {
    context("noBackwardSync");
    if (!enabled) {
      body.run();
      return;
    }
    model.reducer().setSync(false);
    try {
      body.run();
    } finally {
      model.reducer().setSync(true);
    }
  }

  /**
   * Scales the gradients so that their {@code normType} norm is at most {@code maxNorm}, as torch's
   * clip_grad_norm_ (the library's kernels); returns the norm before clipping. A norm that is not
   * finite throws {@link DdpspawnException.InvalidArgument} naming the parameter whose gradient
   * holds a NaN or an infinity, and nothing is clipped.
   */
  public double clipGradients(FabricModel model, double maxNorm, double normType) {
    context("clipGradients");
    List<Parameter> parameters = model.parameters();
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment out = arena.allocate(ValueLayout.JAVA_DOUBLE);
      Native.check(
          Native.CLIP_GRAD_NORM_DLPACK,
          DLTensors.names(arena, parameters),
          DLTensors.of(arena, parameters, Parameter::gradient),
          (long) parameters.size(),
          maxNorm,
          normType,
          out);
      return out.get(ValueLayout.JAVA_DOUBLE, 0);
    }
  }

  /** {@link #clipGradients(FabricModel, double, double)} by the L2 norm. */
  public double clipGradients(FabricModel model, double maxNorm) {
    return clipGradients(model, maxNorm, 2.0);
  }

  /** Clamps every gradient element to {@code [-clipValue, clipValue]}. */
  public void clipGradientValues(FabricModel model, double clipValue) {
    context("clipGradientValues");
    List<Parameter> parameters = model.parameters();
    try (Arena arena = Arena.ofConfined()) {
      Native.check(
          Native.CLIP_GRAD_VALUE_DLPACK,
          DLTensors.of(arena, parameters, Parameter::gradient),
          (long) parameters.size(),
          clipValue);
    }
  }

  /** {@code op} over every rank's {@code data}, in place (Lightning's default is MEAN). */
  public void allReduce(MemorySegment data, DType dtype, ReduceOp op) {
    context("allReduce").allReduce(data, dtype, op);
  }

  /** Every rank's {@code data} into {@code out} (world size times as long), in rank order. */
  public void allGather(MemorySegment data, DType dtype, MemorySegment out) {
    context("allGather").allGather(data, dtype, out);
  }

  /** Rank {@code src}'s {@code data} on every rank, in place. */
  public void broadcast(MemorySegment data, DType dtype, int src) {
    context("broadcast").broadcast(data, dtype, src);
  }

  /** Rank {@code src}'s bytes on every rank. */
  public byte[] broadcastBytes(byte[] data, int src) {
    return context("broadcastBytes").broadcastBytes(data, src);
  }

  /** Waits until every rank has reached the barrier of this {@code name}. */
  public void barrier(String name) {
    context("barrier").barrier(name);
  }

  /**
   * Collective: rank 0 writes the model's parameter values by name and {@code step} to {@code
   * path}, atomically, in the Trainer's checkpoint format (what {@code ddpspawn export}, C++'s
   * Fabric::Load and Rust's load read); every rank returns rank 0's outcome. No optimizer state.
   */
  public void save(Path path, FabricModel model, long step) {
    Context rankContext = context("save");
    List<Parameter> parameters = model.parameters();
    try (Arena arena = Arena.ofConfined()) {
      Native.check(
          Native.CHECKPOINT_SAVE_DLPACK,
          rankContext.handle(),
          arena.allocateFrom(path.toString()),
          DLTensors.names(arena, parameters),
          DLTensors.of(arena, parameters, Parameter::value),
          (long) parameters.size(),
          step);
    }
  }

  /**
   * This rank alone: reads the checkpoint at {@code path} into the model's parameter values in
   * place, each from its name's entry, and returns its step. A missing name, or an entry of another
   * shape or type, throws naming it, and then no parameter has changed.
   */
  public long load(Path path, FabricModel model) {
    context("load");
    List<Parameter> parameters = model.parameters();
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment step = arena.allocate(ValueLayout.JAVA_LONG);
      Native.check(
          Native.CHECKPOINT_LOAD_DLPACK,
          arena.allocateFrom(path.toString()),
          DLTensors.names(arena, parameters),
          DLTensors.of(arena, parameters, Parameter::value),
          (long) parameters.size(),
          step);
      return step.get(ValueLayout.JAVA_LONG, 0);
    }
  }

  /** Lightning's log: rank 0 appends a metrics.csv row in {@link #logDir}. */
  public void log(String name, double value, long step, long epoch) {
    logDict(Map.of(name, value), step, epoch);
  }

  /** Lightning's log_dict: {@link #log} for several values. */
  public void logDict(Map<String, Double> values, long step, long epoch) {
    Context rankContext = context("log");
    if (logDir == null) {
      throw new IllegalStateException(
          "ddpspawn: Fabric.log needs Fabric.logDir, the directory of metrics.csv");
    }
    List<String> names = new ArrayList<>(values.keySet());
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment numbers = arena.allocate(ValueLayout.JAVA_DOUBLE, Math.max(1, names.size()));
      for (int i = 0; i < names.size(); i++) {
        numbers.setAtIndex(ValueLayout.JAVA_DOUBLE, i, values.get(names.get(i)));
      }
      Native.check(
          Native.LOG_METRICS,
          rankContext.handle(),
          arena.allocateFrom(logDir.toString()),
          epoch,
          step,
          Launcher.strings(arena, names),
          numbers,
          (long) names.size());
    }
  }

  /** Prints {@code text} once, from rank 0. */
  public void print(String text) {
    if (isGlobalZero()) {
      System.out.println(text);
    }
  }

  private Context context(String verb) {
    if (context == null) {
      throw new IllegalStateException(
          "ddpspawn: Fabric." + verb + " is for a rank's loop: call it inside launch()");
    }
    return context;
  }
}
