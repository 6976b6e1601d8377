// The loaded library: its version, ABI version and what this build is.
package dev.ddpspawn;

import java.lang.foreign.MemorySegment;

/** Facts about the loaded libddpspawn. Stateless. */
public final class Library {
  /** The ABI major version this binding is written for. */
  public static final int ABI_VERSION = 1;

  private Library() {}

  /** The library's version, e.g. "0.1.0". */
  public static String version() {
    return Native.string((MemorySegment) Native.call(Native.VERSION));
  }

  /** The loaded library's ABI version. */
  public static int abiVersion() {
    return (int) Native.call(Native.ABI_VERSION);
  }

  /** "key=value" lines: version, torch, cuda, nccl, backends. */
  public static String buildInfo() {
    return Native.string((MemorySegment) Native.call(Native.BUILD_INFO));
  }
}
