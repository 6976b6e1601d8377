// Build script for ddpspawn-sys: tells rustc where libddpspawn.so is.
//
// Order: the DDPSPAWN_LIB_DIR environment variable (a directory holding
// libddpspawn.so), then `pkg-config --libs ddpspawn`, else a build error that
// says what to set. The directory found is passed to dependents as
// DEP_DDPSPAWN_LIB_DIR (`links = "ddpspawn"` metadata `lib_dir`) so that they
// can add an rpath to their own binaries: an rpath link argument printed here
// only reaches this crate's own tests.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIB_FILE: &str = "libddpspawn.so";

fn main() {
    println!("cargo:rerun-if-env-changed=DDPSPAWN_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-changed=build.rs");

    // docs.rs has no libddpspawn; documentation needs no linking.
    if env::var_os("DOCS_RS").is_some() {
        return;
    }

    if let Some(dir) = env::var_os("DDPSPAWN_LIB_DIR").filter(|d| !d.is_empty()) {
        let dir = check_lib_dir(Path::new(&dir));
        link_search(&dir);
        export_lib_dirs(&[dir]);
        println!("cargo:rustc-link-lib=dylib=ddpspawn");
        return;
    }

    match pkg_config_libs() {
        Ok(flags) => apply_pkg_config(&flags),
        Err(why) => panic!(
            "\n\nddpspawn-sys: cannot find the ddpspawn C library.\n\
             Set DDPSPAWN_LIB_DIR to the directory holding {LIB_FILE} (a link to \
             libddpspawn.so.1 is enough), e.g.\n    \
             DDPSPAWN_LIB_DIR=/path/to/lib cargo build\n\
             or install ddpspawn with a pkg-config file (ddpspawn.pc).\n\
             (pkg-config --libs ddpspawn: {why})\n\n"
        ),
    }
}

/// Makes `dir` absolute and checks that it holds the link-time name.
fn check_lib_dir(dir: &Path) -> PathBuf {
    let abs = dir.canonicalize().unwrap_or_else(|e| {
        panic!(
            "\n\nddpspawn-sys: DDPSPAWN_LIB_DIR={} cannot be used: {e}.\n\
             Set it to the directory holding {LIB_FILE}.\n\n",
            dir.display()
        )
    });
    if !abs.join(LIB_FILE).exists() {
        let hint = if abs.join("libddpspawn.so.1").exists() {
            format!(
                " It holds libddpspawn.so.1: add the link-time name with\n    \
                 ln -s libddpspawn.so.1 {}",
                abs.join(LIB_FILE).display()
            )
        } else {
            String::new()
        };
        panic!(
            "\n\nddpspawn-sys: DDPSPAWN_LIB_DIR={} has no {LIB_FILE}.{hint}\n\n",
            abs.display()
        );
    }
    abs
}

/// Link search path and an rpath for this crate's own test binaries.
fn link_search(dir: &Path) {
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}

/// The `lib_dir` metadata (DEP_DDPSPAWN_LIB_DIR for dependents), a
/// PATH-style list.
fn export_lib_dirs(dirs: &[PathBuf]) {
    if dirs.is_empty() {
        return;
    }
    if let Ok(joined) = env::join_paths(dirs) {
        println!("cargo:lib_dir={}", joined.to_string_lossy());
    }
}

fn pkg_config_libs() -> Result<String, String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&program)
        .args(["--libs", "ddpspawn"])
        .output()
        .map_err(|e| format!("could not run {program}: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{} ({})", stderr.trim(), out.status));
    }
    String::from_utf8(out.stdout).map_err(|_| "output is not UTF-8".to_string())
}

/// Turns `-L<dir>` and `-l<name>` into cargo directives; other flags are
/// ignored with a warning.
fn apply_pkg_config(flags: &str) {
    let mut linked = false;
    let mut dirs = Vec::new();
    let mut tokens = flags.split_whitespace();
    while let Some(token) = tokens.next() {
        if let Some(rest) = token.strip_prefix("-L") {
            let dir = if rest.is_empty() {
                tokens.next().unwrap_or("")
            } else {
                rest
            };
            if !dir.is_empty() {
                link_search(Path::new(dir));
                dirs.push(PathBuf::from(dir));
            }
        } else if let Some(rest) = token.strip_prefix("-l") {
            let name = if rest.is_empty() {
                tokens.next().unwrap_or("")
            } else {
                rest
            };
            if !name.is_empty() {
                println!("cargo:rustc-link-lib={name}");
                linked |= name == "ddpspawn";
            }
        } else {
            println!("cargo:warning=ddpspawn-sys: ignoring pkg-config flag {token}");
        }
    }
    if !linked {
        println!("cargo:rustc-link-lib=dylib=ddpspawn");
    }
    export_lib_dirs(&dirs);
}
