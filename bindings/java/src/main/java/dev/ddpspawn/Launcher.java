// The launching side: start N worker processes (this JVM's program again, or any program).
package dev.ddpspawn;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * Builds and runs a job of N worker processes, started by exec (the C ABI's "spawn"): a JVM cannot
 * be forked safely, so neither fork nor forkserver is offered. The setters only record; {@link
 * #spawn} and {@link #spawnJava} check everything before any process starts, block until every rank
 * ended and return the {@link JobReport}, or throw the failure, which carries the same report. A
 * Launcher can run any number of jobs; not thread-safe.
 */
public final class Launcher {
  // struct ddpspawn_launch_options, 120 bytes: struct_size, nprocs (4), start_method (8), argv
  // (16), env (24), fork-only fields (32-71), timeout_s (72), grace_period_s (80), master_addr
  // (88), master_port (96), nnodes (104), node_rank (108), max_restarts (112).
  private static final long OPTIONS_SIZE = 120;

  private final int nprocs;
  private Duration timeout;
  private Duration gracePeriod;
  private final List<String> environment = new ArrayList<>();
  private String masterAddr;
  private int masterPort;
  private int nnodes = 1;
  private int nodeRank;
  private int maxRestarts;

  /** A job of {@code nprocs} ranks (per node). */
  public Launcher(int nprocs) {
    this.nprocs = nprocs;
  }

  /** Whole-job limit; past it every rank is stopped and the job throws Timeout. */
  public Launcher timeout(Duration limit) {
    timeout = limit;
    return this;
  }

  /** After the first failure, the time between SIGTERM and SIGKILL for the other ranks. */
  public Launcher gracePeriod(Duration period) {
    gracePeriod = period;
    return this;
  }

  /** An environment variable for every rank. */
  public Launcher env(String name, String value) {
    environment.add(name + "=" + value);
    return this;
  }

  public Launcher masterAddr(String address) {
    masterAddr = address;
    return this;
  }

  public Launcher masterPort(int port) {
    masterPort = port;
    return this;
  }

  /** A job of several hosts, one launcher each (torchrun's --nnodes). */
  public Launcher nnodes(int count) {
    nnodes = count;
    return this;
  }

  /** This launcher's node (torchrun's --node-rank). */
  public Launcher nodeRank(int rank) {
    nodeRank = rank;
    return this;
  }

  /** When a rank fails, start every rank again, up to this many times. */
  public Launcher maxRestarts(int restarts) {
    maxRestarts = restarts;
    return this;
  }

  /**
   * Runs {@code mainClass}'s main in each rank: this JVM (its java, its options, its class path)
   * started again, with {@code args}. In the rank, {@link Worker#isWorker} is true.
   */
  public JobReport spawnJava(Class<?> mainClass, String... args) {
    List<String> argv = new ArrayList<>();
    argv.add(ProcessHandle.current().info().command().orElse("java"));
    argv.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments());
    argv.add("-cp");
    argv.add(System.getProperty("java.class.path"));
    argv.add(mainClass.getName());
    argv.addAll(List.of(args));
    return spawn(argv);
  }

  /** Runs {@code argv} (the program is searched on PATH) in each rank. */
  public JobReport spawn(List<String> argv) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment options = arena.allocate(OPTIONS_SIZE, 8);
      Native.check(Native.LAUNCH_OPTIONS_INIT_SIZED, options, (int) OPTIONS_SIZE);
      options.set(ValueLayout.JAVA_INT, 4, nprocs);
      options.set(ValueLayout.ADDRESS, 8, arena.allocateFrom("spawn"));
      options.set(ValueLayout.ADDRESS, 16, strings(arena, argv));
      options.set(ValueLayout.ADDRESS, 24, strings(arena, environment));
      if (timeout != null) {
        options.set(ValueLayout.JAVA_DOUBLE, 72, seconds(timeout));
      }
      if (gracePeriod != null) {
        options.set(ValueLayout.JAVA_DOUBLE, 80, seconds(gracePeriod));
      }
      if (masterAddr != null) {
        options.set(ValueLayout.ADDRESS, 88, arena.allocateFrom(masterAddr));
      }
      options.set(ValueLayout.JAVA_INT, 96, masterPort);
      options.set(ValueLayout.JAVA_INT, 104, nnodes);
      options.set(ValueLayout.JAVA_INT, 108, nodeRank);
      options.set(ValueLayout.JAVA_INT, 112, maxRestarts);
      MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
      Native.check(Native.JOB_CREATE, options, out);
      MemorySegment job = out.get(ValueLayout.ADDRESS, 0);
      try {
        int code = (int) Native.call(Native.JOB_RUN, job);
        String message = code == Status.OK ? null : Status.lastError();
        JobReport report = JobReport.ofJob(job);
        if (code != Status.OK) {
          throw Status.exception(code, message, report);
        }
        return report;
      } finally {
        Native.call(Native.JOB_DESTROY, job);
      }
    }
  }

  private static double seconds(Duration duration) {
    return duration.toNanos() / 1e9;
  }

  /** A NULL-terminated array of C strings, in {@code arena}. */
  static MemorySegment strings(Arena arena, List<String> values) {
    MemorySegment array = arena.allocate(ValueLayout.ADDRESS, values.size() + 1L);
    for (int i = 0; i < values.size(); i++) {
      array.setAtIndex(ValueLayout.ADDRESS, i, arena.allocateFrom(values.get(i)));
    }
    array.setAtIndex(ValueLayout.ADDRESS, values.size(), MemorySegment.NULL);
    return array;
  }
}
