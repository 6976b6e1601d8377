// Where libddpspawn.so.1 is: the places a program names, then the places an installed jar knows.
package dev.ddpspawn;

import java.io.IOException;
import java.io.InputStream;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

/** Finds the C library, in this order, and says every place it looked when none holds it. */
final class LibraryLocation {
  static final String LIBRARY_FILE = "libddpspawn.so.1";
  static final String PROPERTY = "ddpspawn.library";
  static final String ENVIRONMENT = "DDPSPAWN_LIBRARY";

  /** Written into the jar by tools/install: the installed library's absolute path. */
  static final String INSTALLED_RESOURCE = "/dev/ddpspawn/installed.properties";

  private LibraryLocation() {}

  /**
   * The library's path: the system property {@code ddpspawn.library}, else {@code
   * $DDPSPAWN_LIBRARY}, else {@code ../../lib/libddpspawn.so.1} from the jar (tools/install's
   * {@code PREFIX/share/java}), else the path tools/install recorded in the jar (for a copy in a
   * Maven repository).
   */
  static Path find() {
    List<String> tried = new ArrayList<>();
    String named = System.getProperty(PROPERTY);
    if (named != null) {
      return existing(Path.of(named), "-D" + PROPERTY);
    }
    named = System.getenv(ENVIRONMENT);
    if (named != null && !named.isEmpty()) {
      return existing(Path.of(named), "$" + ENVIRONMENT);
    }
    Path jar = jarPath();
    if (jar != null) {
      Path besidePrefix = jar.getParent().resolve("../../lib").resolve(LIBRARY_FILE).normalize();
      if (Files.isRegularFile(besidePrefix)) {
        return besidePrefix;
      }
      tried.add(besidePrefix.toString());
    }
    String installed = installedPath();
    if (installed != null) {
      Path path = Path.of(installed);
      if (Files.isRegularFile(path)) {
        return path;
      }
      tried.add(installed + " (recorded by tools/install)");
    }
    throw new UnsatisfiedLinkError(
        "ddpspawn: no "
            + LIBRARY_FILE
            + "; name it with -D"
            + PROPERTY
            + "=PATH or $"
            + ENVIRONMENT
            + (tried.isEmpty() ? "" : " (looked in " + String.join(", ", tried) + ")"));
  }

  private static Path existing(Path path, String source) {
    if (!Files.isRegularFile(path)) {
      throw new UnsatisfiedLinkError(
          "ddpspawn: " + source + " names " + path + ", which is not a file");
    }
    return path;
  }

  private static Path jarPath() {
    var source = LibraryLocation.class.getProtectionDomain().getCodeSource();
    if (source == null || source.getLocation() == null) {
      return null;
    }
    try {
      Path path = Path.of(source.getLocation().toURI());
      return Files.isRegularFile(path) ? path : null;
    } catch (URISyntaxException | IllegalArgumentException e) {
      return null;
    }
  }

  private static String installedPath() {
    try (InputStream in = LibraryLocation.class.getResourceAsStream(INSTALLED_RESOURCE)) {
      if (in == null) {
        return null;
      }
      Properties properties = new Properties();
      properties.load(in);
      return properties.getProperty("library");
    } catch (IOException e) {
      return null;
    }
  }
}
